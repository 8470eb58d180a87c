// The SDK's UnitRunner: call order and hooks, gradient accumulation over
// micro-batches with tied parameters, activation accounting, failures; and
// on a real core model (gpt with a tied head), the same gradients as the
// single-process reference trainer.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/models.hpp"
#include "fake_tables.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/core/data/sampler.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "tessera/sdk/flat_params.hpp"
#include "tessera/sdk/unit_runner.hpp"

namespace tessera::test {
namespace {

FakeModel runner_model() {
  return FakeModel({
      FakeUnit{"embed", {FakeParam{"a", {2, 3}}, FakeParam{"b", {4}}}, 100},
      FakeUnit{"mid", {FakeParam{"c", {5}}, FakeParam{"t", {2, 3}, 0, 0}}, 200},
      FakeUnit{"head", {FakeParam{"d", {3}}}, 300},
  });
}

int64_t activations(int rank) {
  return MemoryTracker::instance().stats(rank).current[TESSERA_MEM_ACTIVATIONS];
}

// Logs every hook call into the model's call list and can fail on demand.
class LoggingHooks : public sdk::RunnerHooks {
 public:
  explicit LoggingHooks(FakeModel& model) : model_(model) {}
  void before_forward(int32_t unit, int32_t micro) override {
    model_.calls.push_back("bf" + std::to_string(unit) + "/" + std::to_string(micro));
  }
  void before_backward(int32_t unit, int32_t micro) override {
    model_.calls.push_back("bb" + std::to_string(unit) + "/" + std::to_string(micro));
    if (unit == fail_unit) throw std::runtime_error("hook failed");
  }
  void after_backward(int32_t unit, int32_t micro, bool last) override {
    model_.calls.push_back("ab" + std::to_string(unit) + "/" + std::to_string(micro) +
                           (last ? "L" : ""));
    if (unit == 0 && last) activations_at_end = activations(1);
  }
  int32_t fail_unit = -1;
  int64_t activations_at_end = -1;

 private:
  FakeModel& model_;
};

struct RunnerFixture {
  FakeModel model = runner_model();
  HostContext host_ctx{"strategy.test"};
  sdk::Host host{host_ctx.api()};
  sdk::ModelView view{host, model.api(), model.handle()};
  sdk::FlatLayout layout{view};
  std::vector<float> params = std::vector<float>(layout.total());
  std::vector<float> grads = std::vector<float>(layout.total(), 0.0F);
  sdk::SlotPointers param_ptrs{layout, params.data()};
  sdk::SlotPointers grad_ptrs{layout, grads.data()};
  FakeBatch b0{1.0F, 2};
  FakeBatch b1{2.0F, 2};
  std::vector<const tessera_batch*> batches = {reinterpret_cast<const tessera_batch*>(&b0),
                                               reinterpret_cast<const tessera_batch*>(&b1)};
  std::vector<float> scales = {0.5F, 0.25F};
};

// The calls LoggingHooks records for two micro-batches over the three
// units: hooks (bf/bb/ab, "L" on the last micro-batch) around forwards (F)
// and backwards (B), with the units below `recomputed` running their
// forward again right after their before_backward hook.
std::vector<std::string> expected_calls(int recomputed) {
  std::vector<std::string> expected;
  for (int m = 0; m < 2; ++m) {
    const std::string mm = "/" + std::to_string(m);
    for (int u = 0; u < 3; ++u) {
      expected.push_back("bf" + std::to_string(u) + mm);
      expected.push_back("F" + std::to_string(u));
    }
    for (int u = 2; u >= 0; --u) {
      expected.push_back("bb" + std::to_string(u) + mm);
      if (u < recomputed) expected.push_back("F" + std::to_string(u));
      expected.push_back("B" + std::to_string(u));
      expected.push_back("ab" + std::to_string(u) + mm + (m == 1 ? "L" : ""));
    }
  }
  return expected;
}

TEST(UnitRunner, ForwardThenReverseBackwardPerMicroBatchWithHooks) {
  MemoryTracker::instance().reset(2);
  RunnerFixture f;
  for (size_t i = 0; i < f.params.size(); ++i) f.params[i] = 0.125F * static_cast<float>(i);
  sdk::UnitRunner runner(f.host, f.view, 1);
  LoggingHooks hooks(f.model);
  const double loss = runner.run(f.batches, f.scales, f.param_ptrs, f.grad_ptrs, &hooks);

  // Every slot's values, the tied one counted again.
  double slots = 0.0;
  for (size_t i = 0; i < f.params.size(); ++i) slots += f.params[i];
  for (size_t i = 0; i < 6; ++i) slots += f.params[i];  // mid.t = embed.a
  EXPECT_DOUBLE_EQ(loss, 0.5 * (1.0 + slots) + 0.25 * (2.0 + slots));

  // d loss / d element = loss scale per use, summed over micro-batches.
  for (size_t i = 0; i < f.grads.size(); ++i) {
    EXPECT_FLOAT_EQ(f.grads[i], i < 6 ? 1.5F : 0.75F) << "element " << i;
  }
  EXPECT_EQ(f.model.calls, expected_calls(0));
  // All three contexts were alive at the end of the backward pass; they stay
  // for the next step until released.
  EXPECT_EQ(hooks.activations_at_end, 600);
  EXPECT_EQ(activations(1), 600);
  EXPECT_EQ(runner.activation_bytes(), 600);
  runner.release();
  EXPECT_EQ(activations(1), 0);
  EXPECT_EQ(MemoryTracker::instance().stats(1).peak[TESSERA_MEM_ACTIVATIONS], 600);
}

// activation_checkpointing = 1 on embed, mid, head: embed and mid (not the
// last unit) drop their contexts after the forward and run it again right
// after their before_backward hook, which runs once per unit as before;
// loss and gradients are the same bits. What stays held is the head's
// context (300), the copy of embed's output mid recomputes from (4 bytes)
// and the input-gradient buffer (4); the peak adds the largest recomputed
// context, mid's (200).
TEST(UnitRunner, CheckpointedUnitsRecomputeTheirForwardAfterTheBackwardHook) {
  RunnerFixture f;
  for (size_t i = 0; i < f.params.size(); ++i) f.params[i] = 0.125F * static_cast<float>(i);
  MemoryTracker::instance().reset(2);
  double plain_loss = 0.0;
  {
    sdk::UnitRunner plain(f.host, f.view, 1);
    plain_loss = plain.run(f.batches, f.scales, f.param_ptrs, f.grad_ptrs);
  }
  const std::vector<float> plain_grads = f.grads;
  std::fill(f.grads.begin(), f.grads.end(), 0.0F);
  f.model.calls.clear();
  MemoryTracker::instance().reset(2);

  sdk::UnitRunner runner(f.host, f.view, 1, true, 1);
  LoggingHooks hooks(f.model);
  EXPECT_EQ(runner.run(f.batches, f.scales, f.param_ptrs, f.grad_ptrs, &hooks), plain_loss);
  EXPECT_EQ(f.grads, plain_grads);
  EXPECT_EQ(f.model.calls, expected_calls(2));
  EXPECT_EQ(hooks.activations_at_end, 308);
  EXPECT_EQ(runner.activation_bytes(), 308);
  EXPECT_EQ(MemoryTracker::instance().stats(1).peak[TESSERA_MEM_ACTIVATIONS], 300 + 4 + 4 + 200);
  runner.release();
  EXPECT_EQ(activations(1), 0);

  // Every second unit: only mid; what stays is embed's and the head's
  // contexts and the gradient buffer.
  std::fill(f.grads.begin(), f.grads.end(), 0.0F);
  MemoryTracker::instance().reset(2);
  sdk::UnitRunner second(f.host, f.view, 1, true, 2);
  EXPECT_EQ(second.run(f.batches, f.scales, f.param_ptrs, f.grad_ptrs), plain_loss);
  EXPECT_EQ(f.grads, plain_grads);
  EXPECT_EQ(second.activation_bytes(), 100 + 300 + 4);
  EXPECT_EQ(MemoryTracker::instance().stats(1).peak[TESSERA_MEM_ACTIVATIONS], 100 + 300 + 4 + 200);
}

TEST(UnitRunner, ContextsAreReusedOrFreedAfterEachRun) {
  MemoryTracker::instance().reset(2);
  RunnerFixture f;
  sdk::UnitRunner keeping(f.host, f.view, 1);
  (void)keeping.run(f.batches, f.scales, f.param_ptrs, f.grad_ptrs);
  (void)keeping.run(f.batches, f.scales, f.param_ptrs, f.grad_ptrs);
  EXPECT_EQ(activations(1), 600);  // the same contexts, counted once
  sdk::UnitRunner freeing(f.host, f.view, 1, false);
  (void)freeing.run(f.batches, f.scales, f.param_ptrs, f.grad_ptrs);
  EXPECT_EQ(activations(1), 600);  // only the keeping runner's
  keeping.release();
  EXPECT_EQ(activations(1), 0);
  EXPECT_EQ(MemoryTracker::instance().stats(1).peak[TESSERA_MEM_ACTIVATIONS], 1200);
}

TEST(UnitRunner, FailureInAHookReleasesContexts) {
  MemoryTracker::instance().reset(2);
  RunnerFixture f;
  sdk::UnitRunner runner(f.host, f.view, 1);
  LoggingHooks hooks(f.model);
  hooks.fail_unit = 1;
  EXPECT_THROW((void)runner.run(f.batches, f.scales, f.param_ptrs, f.grad_ptrs, &hooks),
               std::runtime_error);
  EXPECT_EQ(activations(1), 0);
}

TEST(UnitRunner, RefusesUnboundSlotsAndMismatchedSpans) {
  RunnerFixture f;
  sdk::UnitRunner runner(f.host, f.view, 0);
  sdk::SlotPointers unbound(f.layout);
  try {
    (void)runner.run(f.batches, f.scales, unbound, f.grad_ptrs);
    FAIL() << "unbound parameters accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'embed'"), std::string::npos) << e.what();
  }
  const std::vector<float> one_scale = {1.0F};
  EXPECT_THROW((void)runner.run(f.batches, one_scale, f.param_ptrs, f.grad_ptrs), Error);
}

// On the core's gpt (tied head) the runner's gradients and loss are the
// reference trainer's, bit for bit: the same units in the same order.
TEST(UnitRunner, GptGradientsEqualTheReferenceTrainer) {
  const Config config = parse_config(
      "[model]\nname = \"gpt\"\nlayers = 1\nd_model = 16\nheads = 2\nseq_len = 8\nvocab = 32\n"
      "[data]\nbatch_size = 6\n",
      "runner.toml");
  const auto model = model::make_model(config.model, test::model_plugins());
  const auto data = make_dataset(config.data, model->data_shape(), 3);
  const DistributedSampler sampler(*data, 3, 6, 0, 1);
  const std::vector<Batch> micro = sampler.micro_batches(1, 2);
  const std::vector<float> scales = {1.0F / 48.0F, 1.0F / 48.0F};

  model::ModelParams ref_params(*model);
  ref_params.init(*model, 11);
  model::ModelParams ref_grads(*model);
  double ref_loss = 0.0;
  for (size_t m = 0; m < micro.size(); ++m) {
    ref_loss +=
        model::reference_forward_backward(*model, ref_params, ref_grads, micro[m], scales[m]);
  }

  HostContext host_ctx("strategy.test");
  const sdk::Host host(host_ctx.api());
  const sdk::ModelView view(host, model->api(), model->handle());
  const sdk::FlatLayout layout(view);
  std::vector<float> params = ref_params.flatten();
  ASSERT_EQ(params.size(), layout.total());
  std::vector<float> grads(layout.total(), 0.0F);
  const sdk::SlotPointers pp(layout, params.data());
  const sdk::SlotPointers gp(layout, grads.data());
  const std::vector<const tessera_batch*> batches = {train::as_c_batch(micro[0]),
                                                     train::as_c_batch(micro[1])};
  sdk::UnitRunner runner(host, view, 0);
  const double loss = runner.run(batches, scales, pp, gp);
  EXPECT_EQ(loss, ref_loss);
  EXPECT_EQ(grads, ref_grads.flatten());
}

}  // namespace
}  // namespace tessera::test
