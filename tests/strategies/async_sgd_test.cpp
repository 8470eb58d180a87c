// `async_sgd`: at staleness 0 it is synchronous SGD, so its parameters
// equal ddp's on as many ranks as it has workers (one or two servers, sgd
// and adamw); at staleness 4 it still trains (the loss falls and ends near
// ddp's); with one worker slowed down the servers never answer a push more
// than `staleness` steps ahead of the slowest worker; its checkpoints
// resume under ddp and the other way round; bad options are refused before
// any rank starts, naming the option.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "../support/error_of.hpp"
#include "estimate_support.hpp"
#include "resume_support.hpp"
#include "strategy_support.hpp"
#include "tessera/core/train/trainer.hpp"

namespace tessera::test {
namespace {

RunSpec async_spec(const std::string& model, int servers, int workers, int64_t staleness,
                   const std::string& optimizer = "sgd", const std::string& more = "") {
  RunSpec s;
  s.model = model;
  s.strategy = "async_sgd";
  s.world = servers + workers;
  s.optimizer = optimizer;
  s.strategy_options = "servers = " + std::to_string(servers) +
                       "\nstaleness = " + std::to_string(staleness) + "\n" + more;
  return s;
}

RunSpec ddp_like(RunSpec s, int workers) {
  s.strategy = "ddp";
  s.world = workers;
  s.strategy_options.clear();
  return s;
}

// `async` trains as ddp on `workers` ranks (parameters within kTolerance,
// final loss within 1e-4 relative).
void expect_equals_ddp(const RunSpec& async, int workers) {
  const train::RunResult result = run(async);
  const train::RunResult ref = run(ddp_like(async, workers));
  std::string worst;
  const double diff = max_param_rel_diff(merged(result), merged(ref), &worst);
  EXPECT_LE(diff, kTolerance) << "worst tensor " << worst;
  EXPECT_NEAR(result.final_loss, ref.final_loss, 1e-4 * ref.final_loss);
}

// One server and two workers against ddp on two ranks; the gradient
// clipping of RunSpec (1.0) is on: one server clips the whole gradient.
TEST(AsyncSgdEquivalence, StalenessZeroIsDdpWithSgd) {
  expect_equals_ddp(async_spec("mlp", 1, 2, 0, "sgd"), 2);
}

TEST(AsyncSgdEquivalence, StalenessZeroIsDdpWithAdamw) {
  expect_equals_ddp(async_spec("gpt", 1, 2, 0, "adamw"), 2);
}

// Two servers hold half the parameters each (mlp's Ψ is odd: the second
// shard ends in padding). Each server clips its own shard, so clipping is
// off here to compare with ddp's global clipping.
TEST(AsyncSgdEquivalence, TwoServersAtStalenessZeroAreDdp) {
  for (const std::string optimizer : {"sgd", "adamw"}) {
    RunSpec s = async_spec("mlp", 2, 2, 0, optimizer);
    s.grad_clip = 0;
    SCOPED_TRACE(optimizer);
    expect_equals_ddp(s, 2);
  }
}

// Staleness 4: every push is its own update from a gradient up to four
// versions old. On the gpt test model with plain SGD the loss still falls
// (by about 10 % in 30 steps) and ends within 5 % of ddp's (measured:
// about 1 %, whatever order the pushes arrive in), with the servers'
// replies predicted (the default) and without.
TEST(AsyncSgdTraining, StaleUpdatesStillTrain) {
  for (const bool predict : {true, false}) {
    SCOPED_TRACE(predict ? "predict" : "no predict");
    RunSpec s = async_spec("gpt", 1, 2, 4, "sgd", predict ? "" : "predict = false\n");
    s.steps = 30;
    s.lr = 0.1;
    RunSpec first = ddp_like(s, 2);
    first.steps = 1;  // the loss of step 1 is the initial parameters'
    const double initial = run(first).final_loss;
    const train::RunResult result = run(s);
    const train::RunResult ref = run(ddp_like(s, 2));
    EXPECT_LT(result.final_loss, 0.95 * initial);
    EXPECT_NEAR(result.final_loss, ref.final_loss, 0.05 * ref.final_loss);
  }
}

// The numbers after `key` ("mean delay ", "gain ", "max lead ") in the
// server's debug lines, step by step.
std::vector<double> debug_values(const std::string& log, const std::string& key) {
  std::vector<double> values;
  for (size_t at = log.find(key); at != std::string::npos; at = log.find(key, at + 1)) {
    values.push_back(std::stod(log.substr(at + key.size())));
  }
  return values;
}

// The last step's value of `key`, or -1 when the lines have none.
double debug_value(const std::string& log, const std::string& key) {
  const std::vector<double> values = debug_values(log, key);
  return values.empty() ? -1 : values.back();
}

// A predicting server measures how many updates it applies between a
// reply and the push computed from it: with two workers pushing in turn,
// the other worker's push at least sometimes (more than 0), and at most a
// few steps' pushes (the lead is bounded by staleness 2: 2 × 2 + 1
// pushes). Without prediction, or at staleness 0, it measures nothing.
TEST(AsyncSgdTraining, PredictingServersMeasureTheDelay) {
  RunSpec s = async_spec("mlp", 1, 2, 2, "adamw");
  s.steps = 12;
  const double delay = debug_value(debug_log_of(s, "strategy.async_sgd"), "mean delay ");
  EXPECT_GT(delay, 0.0);
  EXPECT_LE(delay, 5.0);
  EXPECT_EQ(debug_value(debug_log_of(async_spec("mlp", 1, 2, 2, "adamw", "predict = false\n"),
                                     "strategy.async_sgd"),
                        "mean delay "),
            -1.0);
  EXPECT_EQ(debug_value(debug_log_of(async_spec("mlp", 1, 2, 0, "adamw"), "strategy.async_sgd"),
                        "mean delay "),
            -1.0);
}

// The median over a run's steps of the number after `key` in the server's
// debug lines, or -1 when there is none.
double median_debug_value(const std::string& log, const std::string& key) {
  std::vector<double> values = debug_values(log, key);
  if (values.empty()) return -1;
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// The prediction's gain is how much of an update the next one repeats:
// AdamW's updates carry its momentum from one to the next (measured over
// eight runs: 0.66 to 0.84 after 30 steps), plain SGD's on the gpt test
// model's small batches are mostly noise (0.17 to 0.25), so a server
// extrapolates the first and hardly the second. The median over the
// steps: at the end of a run where one worker ran far ahead (seen under
// AddressSanitizer), consecutive updates come from parameters of very
// different ages and AdamW's gain fell to 0.46 in its last steps, as it
// should.
TEST(AsyncSgdTraining, ThePredictionFollowsHowMuchUpdatesPersist) {
  RunSpec adamw = async_spec("gpt", 1, 2, 4, "adamw");
  adamw.steps = 30;
  RunSpec sgd = async_spec("gpt", 1, 2, 4, "sgd");
  sgd.steps = 30;
  sgd.lr = 0.1;
  const double persistent = median_debug_value(debug_log_of(adamw, "strategy.async_sgd"), "gain ");
  const double noisy = median_debug_value(debug_log_of(sgd, "strategy.async_sgd"), "gain ");
  EXPECT_GT(persistent, 0.5);
  EXPECT_LE(persistent, 1.0);
  EXPECT_GE(noisy, 0.0);
  EXPECT_LT(noisy, 0.4);
}

// Trains 12 steps of mlp on 1 server + 2 workers at staleness 2 with the
// delay options `delays`: the run completes, and no reply ever let a worker
// run more than `staleness` steps ahead of the slowest one.
void expect_lead_within_staleness(const std::string& delays) {
  RunSpec s = async_spec("mlp", 1, 2, 2, "sgd", delays);
  s.steps = 12;
  train::RunResult result;
  const std::string log = debug_log_of(s, "strategy.async_sgd", &result);
  EXPECT_EQ(result.last_step, 12);
  const auto lead = static_cast<int64_t>(debug_value(log, "max lead "));
  ASSERT_GE(lead, 0) << log;
  EXPECT_LE(lead, 2) << log;
}

// Worker rank 1 sleeps every step.
TEST(AsyncSgdTraining, SlowWorkerBoundsTheLead) {
  expect_lead_within_staleness("delay_ms = 5\ndelay_ranks = \"1\"\n");
}

// Both workers slowed in turn (delay_every = 2: world rank 1 at even
// steps, rank 2 at odd ones).
TEST(AsyncSgdTraining, RotatingSlowdownBoundsTheLead) {
  expect_lead_within_staleness("delay_ms = 5\ndelay_ranks = \"1,2\"\ndelay_every = 2\n");
}

// With a bound larger than the run (staleness 20, 12 steps, one log step
// at the end) a worker never waits for a slowed one: its own steps are
// many times faster (RunResult::rank_step_seconds, which the summary
// names when they differ).
TEST(AsyncSgdTraining, UnboundedWorkersRunAheadOfASlowedOne) {
  RunSpec s = async_spec("mlp", 1, 2, 20, "sgd", "delay_ms = 40\ndelay_ranks = \"1\"\n");
  s.steps = 12;
  const train::RunResult result = run(s);
  ASSERT_EQ(result.rank_step_seconds.size(), 3U);
  EXPECT_GT(result.rank_step_seconds[1], 0.04);  // it sleeps 40 ms at every step
  EXPECT_LT(result.rank_step_seconds[2], 0.5 * result.rank_step_seconds[1]);
  EXPECT_DOUBLE_EQ(result.mean_step_seconds, *std::max_element(result.rank_step_seconds.begin(),
                                                               result.rank_step_seconds.end()));
}

// A server that fails (here: the NaN gradients of a learning rate of
// 1e30, refused by its clipping) fails the run with its own error; the
// workers waiting for its replies are released, and nothing hangs.
TEST(AsyncSgdTraining, AFailingServerFailsTheRun) {
  RunSpec s = async_spec("mlp", 1, 2, 4, "sgd");
  s.lr = 1e30;
  s.grad_clip = 0;
  const std::string msg = error_of([&] { (void)run(s); });
  expect_mentions(msg, {"rank 0", "async_sgd", "NaN"});
}

// A worker stuck in its step (here: asleep for longer than the backend's
// timeout) stops the run within the timeout. Which rank's timeout comes
// first is a race: the server's error names the stuck worker as the
// slowest, the other worker's says that the server holds its reply back
// for staleness.
TEST(AsyncSgdTraining, AStuckWorkerStopsTheRunSayingWhy) {
  RunSpec s = async_spec("mlp", 1, 2, 1, "sgd", "delay_ms = 2500\ndelay_ranks = \"1\"\n");
  s.timeout_s = 1;
  const std::string msg = error_of([&] { (void)run(s); });
  EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
  const bool server = msg.find("rank 1 is the slowest") != std::string::npos;
  const bool worker = msg.find("holds its reply to step") != std::string::npos &&
                      msg.find("staleness 1") != std::string::npos;
  EXPECT_TRUE(server || worker) << msg;
}

TEST(AsyncSgdOptions, BadOptionsAreRefused) {
  std::string msg = refusal(async_spec("mlp", 2, 0, 0));
  expect_mentions(msg, {"async_sgd", "servers", "2"});
  msg = refusal(async_spec("mlp", 1, 2, -1));
  expect_mentions(msg, {"async_sgd", "staleness", "-1"});
  msg = refusal(async_spec("mlp", 1, 2, 0, "sgd", "delay_ranks = \"1,x\"\n"));
  expect_mentions(msg, {"async_sgd", "delay_ranks", "1,x"});
  msg = refusal(async_spec("mlp", 1, 2, 0, "sgd", "delay_ranks = \"3\"\n"));
  expect_mentions(msg, {"delay_ranks", "3"});
  msg = refusal(async_spec("mlp", 1, 2, 0, "sgd", "delay_ms = -5\n"));
  expect_mentions(msg, {"delay_ms", "-5"});
  msg = refusal(async_spec("mlp", 1, 2, 0, "sgd", "delay_every = 0\n"));
  expect_mentions(msg, {"async_sgd", "delay_every", "0"});
  // The largest 64-bit count of servers, its world need said without overflow.
  RunSpec most = async_spec("mlp", 1, 1, 0);
  most.strategy_options = "servers = 9223372036854775807\n";
  msg = refusal(most);
  expect_mentions(msg, {"servers + 1 = 9223372036854775808 ranks"});
}

// Staleness 0 trains as ddp does, so a checkpoint of one continues under
// the other to the parameters of the uninterrupted run (full and sharded).
TEST(AsyncSgdCheckpoint, ResumesUnderDdpAndBack) {
  RunSpec async = async_spec("mlp", 1, 2, 0, "adamw");
  const RunSpec ddp = ddp_like(async, 2);
  expect_continues(async, ddp);
  expect_continues(ddp, async, "sharded");
}

// The estimate against a run at staleness 0 (where every server step
// sends one reply per worker): the largest rank's peaks (a worker's
// replica and push buffers, a server's optimizer shard and message
// buffers) and the bytes a rank sends per step; and at staleness 4, where
// a predicting server also holds two more shard-sized buffers (with five
// workers on one server the server is the largest rank).
TEST(AsyncSgdEstimate, MatchesTheRun) {
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "async_sgd", 3, "servers = 1\nstaleness = 0"));
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "async_sgd", 4, "servers = 2\nstaleness = 0"));
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "async_sgd", 3, "servers = 1\nstaleness = 4"));
  expect_estimate_matches_run(
      estimate_spec(kQuickstartGpt, "async_sgd", 6, "servers = 1\nstaleness = 4"));
}

TEST(AsyncSgdEstimate, RefusesWhatCheckRefuses) {
  expect_mentions(estimate_refusal(estimate_spec(kQuickstartGpt, "async_sgd", 1, "servers = 1")),
                  {"servers", "1"});
}

}  // namespace
}  // namespace tessera::test
