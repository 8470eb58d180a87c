// `elastic`: with no rank lost it trains exactly as the strategy it wraps
// (its in-memory copies and the neighbour exchange after every step change
// nothing), for replicated (ddp), sharded-optimizer (zero1) and sharded
// (zero3) inner strategies; its memory table counts the copies as `other`;
// wrong inner strategies and options are refused naming them. Recovery
// itself needs ranks that can die alone: gloo.elastic_recovery
// (tests/multiprocess) kills one.
#include <gtest/gtest.h>

#include <string>

#include "../support/error_of.hpp"
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
// its ranks, and SIGKILL on ranks that are threads of one process.
TEST(ElasticOptions, RefusesWhatItCannotRecover) {
  std::string msg = error_of(
      [] { (void)run(elastic_spec("gpt", "pipeline", 2, "inner_options = \"stages = 2\"\n")); });
  expect_mentions(msg, {"pipeline", "data-parallel slice"});
  msg = error_of(
      [] { (void)run(elastic_spec("mlp", "ddp", 2, "kill_rank = 1\nkill_at_step = 3\n")); });
  expect_mentions(msg, {"kill_rank", "threads"});
}

}  // namespace
}  // namespace tessera::test
