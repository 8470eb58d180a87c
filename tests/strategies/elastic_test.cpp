// `elastic`: with no rank lost it trains exactly as the strategy it wraps
// (its in-memory copies and the neighbour exchange after every step change
// nothing), for replicated (ddp), sharded-optimizer (zero1) and sharded
// (zero3) inner strategies; its memory table counts the copies as `other`;
// wrong inner strategies and options are refused naming them. A rank
// thread that fails mid-run (kill_rank) is survived by the others, which
// end where a run resumed on one rank fewer at that step ends;
// gloo.elastic_recovery (tests/multiprocess) kills a process rank.
#include <gtest/gtest.h>

#include <string>

#include "../support/error_of.hpp"
#include "resume_support.hpp"
#include "strategy_support.hpp"
#include "tessera/core/train/trainer.hpp"

namespace tessera::test {
namespace {

RunSpec elastic_spec(const std::string& model, const std::string& inner, int world,
                     const std::string& more = "") {
  RunSpec s;
  s.model = model;
  s.strategy = "elastic";
  s.world = world;
  s.strategy_options = "inner = \"" + inner + "\"\n" + more;
  return s;
}

void expect_equals_inner(const RunSpec& elastic, const std::string& inner) {
  RunSpec plain = elastic;
  plain.strategy = inner;
  plain.strategy_options.clear();
  const train::RunResult result = run(elastic);
  const train::RunResult ref = run(plain);
  std::string worst;
  const double diff = max_param_rel_diff(merged(result), merged(ref), &worst);
  EXPECT_LE(diff, kTolerance) << "worst tensor " << worst;
  EXPECT_NEAR(result.final_loss, ref.final_loss, 1e-6 * ref.final_loss);
}

TEST(ElasticTraining, WrapsDdpExactly) {
  expect_equals_inner(elastic_spec("gpt", "ddp", 3), "ddp");
}

TEST(ElasticTraining, WrapsZero1Exactly) {
  expect_equals_inner(elastic_spec("mlp", "zero1", 4), "zero1");
}

TEST(ElasticTraining, WrapsZero3Exactly) {
  expect_equals_inner(elastic_spec("gpt", "zero3", 2), "zero3");
}

// The inner strategy's options reach it: a zero1 with a bucket plan of its
// own still trains as zero1 with those options.
TEST(ElasticTraining, PassesInnerOptionsOn) {
  RunSpec s =
      elastic_spec("mlp", "ddp", 2, "inner_options = \"bucket_mb = 0.001; overlap = false\"\n");
  RunSpec plain = s;
  plain.strategy = "ddp";
  plain.strategy_options = "bucket_mb = 0.001\noverlap = false\n";
  const double diff = max_param_rel_diff(merged(run(s)), merged(run(plain)));
  EXPECT_LE(diff, kTolerance);
}

TEST(ElasticOptions, BadInnerStrategiesAndOptionsAreRefused) {
  std::string msg = refusal(elastic_spec("mlp", "nonesuch", 2));
  expect_mentions(msg, {"elastic", "nonesuch", "ddp"});
  msg = refusal(elastic_spec("mlp", "elastic", 2));
  expect_mentions(msg, {"elastic", "inner"});
  msg = refusal(elastic_spec("mlp", "ddp", 2, "inner_options = \"bucket = 3\"\n"));
  expect_mentions(msg, {"elastic", "bucket", "ddp"});
  msg = refusal(elastic_spec("mlp", "ddp", 2, "settle_ms = 0\n"));
  expect_mentions(msg, {"settle_ms", "0"});
  msg = refusal(elastic_spec("mlp", "ddp", 2, "kill_rank = 2\n"));
  expect_mentions(msg, {"kill_rank", "2"});
}

// Refused when the ranks create it: an inner strategy whose slices are not
// its ranks. (Two micro-batches, so that the pipeline's own create accepts
// its 1f1b schedule and elastic's check is the one that refuses.)
TEST(ElasticOptions, RefusesWhatItCannotRecover) {
  RunSpec s = elastic_spec("gpt", "pipeline", 2, "inner_options = \"stages = 2\"\n");
  s.micro_batches = 2;
  const std::string msg = error_of([&] { (void)run(s); });
  expect_mentions(msg, {"pipeline", "data-parallel slice"});
}

// Every rank refuses the batch (elastic has no estimate, so its ranks do):
// the error gives the cause once, not once more for each rank that met it.
TEST(ElasticOptions, ACauseEveryRankMeetsIsSaidOnce) {
  RunSpec s = elastic_spec("mlp", "ddp", 2);
  s.batch = 1;
  const std::string msg = error_of([&] { (void)run(s); });
  expect_mentions(msg, {"data.batch_size = 1 is too small"});
  EXPECT_EQ(msg.find("failed too"), std::string::npos) << msg;
}

// Two ranks, one lost: the survivor trains alone; a world of one survives
// losing nobody else, but the run still ends on it.
TEST(ElasticRecovery, OneOfTwoThreadRanksGoesOnAlone) {
  RunSpec s = elastic_spec("mlp", "ddp", 2, "settle_ms = 100\nkill_rank = 0\nkill_at_step = 4\n");
  s.steps = 8;
  const train::RunResult result = run(s);
  EXPECT_EQ(result.final_state.size(), 1U);
  EXPECT_EQ(result.last_step, 8);
}

// The survivors cannot go on (hybrid sharding in groups of 2 does not fit
// 3 ranks): the run fails, and its error says why, after the lost rank's.
TEST(ElasticRecovery, SurvivorsThatCannotGoOnSayWhy) {
  RunSpec s = elastic_spec("mlp", "fsdp", 4,
                           "inner_options = 'sharding_strategy = \"hybrid_shard\"; "
                           "shard_group_size = 2'\nsettle_ms = 100\nkill_rank = 1\n"
                           "kill_at_step = 3\n");
  s.steps = 6;
  const std::string msg = error_of([&] { (void)run(s); });
  expect_mentions(msg, {"rank 1 leaves the run at step 3", "failed too",
                        "option 'shard_group_size' = 2 does not divide the world size 3"});
}

// Rank 2 of 4 fails at the start of step 7 (its thread ends; the host
// aborts the world for it): the other three re-form the world, restore the
// state after step 6 from their memory and finish; the run succeeds with
// their results, equal within 1e-5 to 6 steps on 4 ranks resumed on 3. With
// zero1 the lost optimizer shard is rank 3's copy.
TEST(ElasticRecovery, TheOthersGoOnWithoutALostThreadRank) {
  const Scratch dir;
  RunSpec s = elastic_spec("gpt", "zero1", 4, "settle_ms = 200\nkill_rank = 2\nkill_at_step = 7\n");
  s.steps = 12;
  const train::RunResult result = run(s);
  EXPECT_EQ(result.final_state.size(), 3U);
  EXPECT_EQ(result.last_step, 12);

  RunSpec first = elastic_spec("gpt", "zero1", 4);
  first.steps = 12;
  first.extra_toml = checkpoint_toml(dir.path() / "four", 6, "full", false);
  (void)run(first);
  cut_at(dir.path() / "four", dir.path() / "three", "step-00000006");
  RunSpec second = elastic_spec("gpt", "zero1", 3);
  second.steps = 12;
  second.extra_toml = checkpoint_toml(dir.path() / "three", 100, "full", true);
  const train::RunResult ref = run(second);
  std::string worst;
  EXPECT_LE(max_param_rel_diff(merged(result), merged(ref), &worst), kTolerance)
      << "worst tensor " << worst;
}

}  // namespace
}  // namespace tessera::test
