// The model table of the in-tree model plugins (tessera_model_api, built by
// the SDK's model adapter): forward and backward through it equal direct
// calls of the same units bit for bit, parameter infos describe owners and
// ties, the host's batch accessors give the units their data, and every
// failure is a status plus a readable message, never an exception.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "gpt.hpp"
#include "mlp.hpp"
#include "tessera/core/train/strategy_host.hpp"
#include "train/train_util.hpp"

namespace tessera::train {
namespace {

using test::batch_for;
using test::same_bits;

// The message the plugin recorded for its last failed call on this thread.
std::string plugin_error() { return take_thread_error(); }

// One context per unit, destroyed with the test.
struct Contexts {
  const tessera_model_api* api;
  std::vector<tessera_unit_ctx*> ctx;
  ~Contexts() {
    for (tessera_unit_ctx* c : ctx) api->context_destroy(c);
  }
};

tessera_unit_call call_of(const float* const* params, float* const* grads, const Batch* batch,
                          float scale) {
  tessera_unit_call call{};
  call.struct_size = sizeof call;
  call.loss_scale = scale;
  call.batch = batch != nullptr ? as_c_batch(*batch) : nullptr;
  call.params = params;
  call.grads = grads;
  return call;
}

// Runs forward and backward of every unit through the table, adding the
// gradients into `grads`; returns the loss.
float table_forward_backward(const model::Model& m, const model::ModelParams& params,
                             model::ModelParams& grads, const Batch& batch, float scale) {
  const tessera_model_api* api = m.api();
  const tessera_model* cm = m.handle();
  const auto units = api->num_units(cm);
  Contexts contexts{api, {}};
  tessera_matrix x{};
  for (int32_t u = 0; u < units; ++u) {
    tessera_unit_ctx* ctx = nullptr;
    EXPECT_EQ(api->context_create(cm, u, &ctx), TESSERA_OK) << plugin_error();
    contexts.ctx.push_back(ctx);
    tessera_matrix out{};
    const tessera_unit_call call =
        call_of(params.unit_const(static_cast<std::size_t>(u)).data(), nullptr, &batch, scale);
    EXPECT_EQ(api->forward(cm, u, ctx, &call, x, &out), TESSERA_OK) << plugin_error();
    EXPECT_GT(api->context_bytes(ctx), 0u);
    x = out;
  }
  EXPECT_EQ(x.rows * x.cols, 1);
  const float loss = *x.data;
  tessera_matrix grad{};
  for (int32_t u = units; u-- > 0;) {
    tessera_matrix grad_in{};
    const tessera_unit_call call =
        call_of(params.unit_const(static_cast<std::size_t>(u)).data(),
                grads.unit(static_cast<std::size_t>(u)).data(), nullptr, scale);
    EXPECT_EQ(
        api->backward(cm, u, contexts.ctx[static_cast<std::size_t>(u)], &call, grad, &grad_in),
        TESSERA_OK)
        << plugin_error();
    grad = grad_in;
  }
  EXPECT_EQ(grad.data, nullptr) << "the first unit returns no input gradient";
  return loss;
}

// The same units built directly (no plugin, no C table): the reference.
std::vector<std::unique_ptr<model::Unit>> direct_units(const std::string& which) {
  if (which == "mlp") {
    model::MlpConfig c;
    c.input = 6;
    c.hidden = {7, 5};
    c.classes = 3;
    return model::build_mlp_units(c);
  }
  model::GptConfig c;
  c.vocab = 11;
  c.layers = 2;
  c.d_model = 8;
  c.heads = 2;
  c.seq_len = 5;
  c.tied_head = which == "gpt_tied";
  return model::build_gpt_units(c);
}

// Forward and backward of `units` called directly on `params`' buffers.
double direct_forward_backward(const std::vector<std::unique_ptr<model::Unit>>& units,
                               const model::ModelParams& params, model::ModelParams& grads,
                               const Batch& batch, float scale) {
  const sdk::model::BatchView view = test::view_of(batch);
  std::vector<std::unique_ptr<sdk::model::UnitContext>> ctx;
  sdk::model::UnitInput in;
  in.batch = &view;
  in.loss_scale = scale;
  for (std::size_t u = 0; u < units.size(); ++u) {
    ctx.push_back(units[u]->make_context());
    in.x = units[u]->forward(*ctx.back(), params.unit_const(u), in);
  }
  const double loss = in.x.data[0];
  model::ConstView g;
  for (std::size_t u = units.size(); u-- > 0;) {
    g = units[u]->backward(*ctx[u], params.unit_const(u), grads.unit(u), g);
  }
  return loss;
}

std::unique_ptr<model::Model> model_for(const std::string& which) {
  return which == "mlp" ? test::tiny_mlp() : test::tiny_gpt(which == "gpt_tied");
}

class ModelTableEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelTableEquivalence, ForwardBackwardEqualDirectUnitCalls) {
  const auto m = model_for(GetParam());
  model::ModelParams params(*m);
  params.init(*m, 5);
  const Batch batch = batch_for(*m, 3, 9);
  const float scale = 1.0F / 3.0F;

  model::ModelParams direct_grads(*m);
  const double direct_loss =
      direct_forward_backward(direct_units(GetParam()), params, direct_grads, batch, scale);
  model::ModelParams table_grads(*m);
  const float table_loss = table_forward_backward(*m, params, table_grads, batch, scale);

  EXPECT_EQ(static_cast<float>(direct_loss), table_loss);
  EXPECT_TRUE(same_bits(direct_grads.flatten(), table_grads.flatten()));
}

TEST_P(ModelTableEquivalence, RankThreadsShareOneModel) {
  // Ranks as threads call the table on one model with their own contexts.
  const auto m = model_for(GetParam());
  model::ModelParams params(*m);
  params.init(*m, 2);
  const Batch batch = batch_for(*m, 2, 4);
  model::ModelParams expected(*m);
  const float loss = table_forward_backward(*m, params, expected, batch, 0.5F);
  constexpr int kThreads = 4;
  std::vector<model::ModelParams> grads;
  for (int t = 0; t < kThreads; ++t) grads.emplace_back(*m);
  std::vector<float> losses(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        grads[static_cast<std::size_t>(t)].zero();
        losses[static_cast<std::size_t>(t)] =
            table_forward_backward(*m, params, grads[static_cast<std::size_t>(t)], batch, 0.5F);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(losses[static_cast<std::size_t>(t)], loss);
    EXPECT_TRUE(same_bits(grads[static_cast<std::size_t>(t)].flatten(), expected.flatten()));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ModelTableEquivalence,
                         ::testing::Values("mlp", "gpt_tied", "gpt_untied"));

TEST(ModelTable, DescribesUnitsAndParameters) {
  const auto m = test::tiny_mlp();
  const tessera_model_api* api = m->api();
  const tessera_model* cm = m->handle();
  EXPECT_EQ(api->struct_size, sizeof(tessera_model_api));
  ASSERT_EQ(api->num_units(cm), 3);
  EXPECT_STREQ(api->unit_name(cm, 0), m->unit_name(0).c_str());
  EXPECT_EQ(api->unit_name(cm, 3), nullptr);
  EXPECT_EQ(api->unit_name(cm, -1), nullptr);
  EXPECT_EQ(api->num_params(cm, 1), 2);
  EXPECT_EQ(api->num_params(cm, 3), -1);

  tessera_param_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(api->param_info(cm, 1, 0, &info), TESSERA_OK) << plugin_error();
  EXPECT_STREQ(info.name, "w");
  EXPECT_EQ(std::string(info.full_name), m->unit_name(1) + ".w");
  EXPECT_EQ(info.ndim, 2);
  EXPECT_EQ(info.shape[0], 7);
  EXPECT_EQ(info.shape[1], 5);
  EXPECT_EQ(info.numel, 35);
  EXPECT_EQ(info.split, TESSERA_SPLIT_ROW);  // layer1: the row half of a Megatron pair
  EXPECT_EQ(info.owner_unit, 1);
  EXPECT_EQ(info.owner_param, 0);
  EXPECT_EQ(info.split_blocks, 1);

  tessera_data_spec spec{};
  spec.struct_size = sizeof spec;
  ASSERT_EQ(api->data_spec(cm, &spec), TESSERA_OK) << plugin_error();
  EXPECT_EQ(spec.kind, TESSERA_DATA_FEATURES);
  EXPECT_EQ(spec.features, 6);
  EXPECT_EQ(spec.classes, 3);

  tessera_unit_cost cost{};
  cost.struct_size = sizeof cost;
  ASSERT_EQ(api->unit_cost(cm, 1, &cost), TESSERA_OK) << plugin_error();
  EXPECT_EQ(cost.params, 7 * 5 + 5);
  EXPECT_NE(api->unit_flags(cm, 1) & TESSERA_UNIT_TENSOR_PARALLEL, 0u);
  EXPECT_NE(api->unit_flags(cm, 1) & TESSERA_UNIT_SPLIT_BACKWARD, 0u);  // mlp layers split
  EXPECT_EQ(api->unit_flags(cm, 7), 0u);                                // no such unit
}

TEST(ModelTable, HostBatchAccessorsDescribeBothLayouts) {
  HostContext host("model.test");
  const tessera_host_api* api = host.api();
  const Batch seq = batch_for(*test::tiny_gpt(true), 4, 1);
  const Batch cls = batch_for(*test::tiny_mlp(), 6, 1);
  EXPECT_EQ(api->batch_examples(api->ctx, as_c_batch(cls)), 6);
  EXPECT_EQ(api->batch_examples(api->ctx, as_c_batch(seq)), 4);
  EXPECT_EQ(api->batch_examples(api->ctx, nullptr), 0);
  tessera_tensor_view v{};
  v.struct_size = sizeof v;
  ASSERT_EQ(api->batch_tensor(api->ctx, as_c_batch(seq), "tokens", &v), TESSERA_OK);
  EXPECT_EQ(v.dtype, TESSERA_I32);
  EXPECT_EQ(v.ndim, 2);
  EXPECT_EQ(v.shape[0], 4);
  EXPECT_EQ(v.shape[1], 5);
  EXPECT_EQ(v.data, seq.tokens.data());
  ASSERT_EQ(api->batch_tensor(api->ctx, as_c_batch(cls), "features", &v), TESSERA_OK);
  EXPECT_EQ(v.dtype, TESSERA_F32);
  EXPECT_EQ(v.shape[1], 6);
  ASSERT_EQ(api->batch_tensor(api->ctx, as_c_batch(cls), "targets", &v), TESSERA_OK);
  EXPECT_EQ(v.ndim, 1);
  EXPECT_EQ(api->batch_tensor(api->ctx, as_c_batch(cls), "tokens", &v),
            TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(plugin_error(), "batch has no tensor 'tokens' (it has features, targets)");
  const sdk::model::BatchView view = sdk::model::BatchView::read(api, as_c_batch(seq));
  EXPECT_EQ(view.size, 4);
  EXPECT_EQ(view.seq_len, 5);
  EXPECT_EQ(view.tokens.data(), seq.tokens.data());
  EXPECT_EQ(view.targets.size(), seq.targets.size());
  EXPECT_TRUE(view.inputs.empty());
}

TEST(ModelTable, TiedHeadNamesTheEmbeddingAsOwner) {
  const auto m = test::tiny_gpt(true);
  const tessera_model_api* api = m->api();
  const tessera_model* cm = m->handle();
  const int32_t head = api->num_units(cm) - 1;
  ASSERT_STREQ(api->unit_name(cm, head), "head");
  const int32_t slots = api->num_params(cm, head);
  ASSERT_EQ(slots, 3);

  tessera_param_info tied{};
  tied.struct_size = sizeof tied;
  ASSERT_EQ(api->param_info(cm, head, 2, &tied), TESSERA_OK) << plugin_error();
  EXPECT_STREQ(tied.name, "wte");
  EXPECT_STREQ(tied.full_name, "embed.wte");
  EXPECT_EQ(tied.owner_unit, 0);
  EXPECT_EQ(tied.owner_param, 0);
  EXPECT_EQ(tied.split, TESSERA_SPLIT_ROW);
  EXPECT_EQ(tied.numel, 11 * 8);

  tessera_param_info owner{};
  owner.struct_size = sizeof owner;
  ASSERT_EQ(api->param_info(cm, 0, 0, &owner), TESSERA_OK) << plugin_error();
  EXPECT_STREQ(owner.full_name, "embed.wte");
  EXPECT_EQ(owner.full_name, tied.full_name) << "one stable string per name";
  EXPECT_EQ(owner.owner_unit, 0);

  const auto untied = test::tiny_gpt(false);
  tessera_param_info own{};
  own.struct_size = sizeof own;
  ASSERT_EQ(untied->api()->param_info(untied->handle(), head, 2, &own), TESSERA_OK)
      << plugin_error();
  EXPECT_STREQ(own.full_name, "head.w");
  EXPECT_EQ(own.owner_unit, head);
  EXPECT_EQ(own.owner_param, 2);
}

TEST(ModelTable, SmallerCallerStructGetsOnlyItsPrefix) {
  const auto m = test::tiny_mlp();
  tessera_param_info info{};
  info.numel = -7;
  info.struct_size = offsetof(tessera_param_info, numel);  // an older caller without numel
  ASSERT_EQ(m->api()->param_info(m->handle(), 0, 1, &info), TESSERA_OK) << plugin_error();
  EXPECT_EQ(info.struct_size, offsetof(tessera_param_info, numel));
  EXPECT_STREQ(info.name, "b");
  EXPECT_EQ(info.numel, -7) << "a field beyond the caller's struct_size was written";
}

TEST(ModelTable, BadArgumentsReturnStatusAndMessage) {
  const auto m = test::tiny_gpt(true);
  const tessera_model_api* api = m->api();
  const tessera_model* cm = m->handle();
  tessera_param_info info{};
  info.struct_size = sizeof info;
  EXPECT_EQ(api->param_info(cm, 9, 0, &info), TESSERA_ERR_INVALID_ARGUMENT);
  std::string msg = plugin_error();
  EXPECT_NE(msg.find("model 'gpt' has no unit 9 (it has 4)"), std::string::npos) << msg;
  EXPECT_EQ(api->param_info(cm, 0, 5, &info), TESSERA_ERR_INVALID_ARGUMENT);
  msg = plugin_error();
  EXPECT_NE(msg.find("unit 'embed' has no parameter 5"), std::string::npos) << msg;
  tessera_unit_ctx* ctx = nullptr;
  EXPECT_EQ(api->context_create(cm, -1, &ctx), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
  msg = plugin_error();
  EXPECT_NE(msg.find("has no unit -1"), std::string::npos) << msg;
}

TEST(ModelTable, UnitErrorsComeBackAsStatusAndLastError) {
  const auto m = test::tiny_gpt(true);
  const tessera_model_api* api = m->api();
  const tessera_model* cm = m->handle();
  model::ModelParams params(*m);
  params.init(*m, 1);
  Batch batch = batch_for(*m, 2, 3);
  batch.tokens[3] = 11;  // vocab is 11: out of range

  tessera_unit_ctx* embed = nullptr;
  ASSERT_EQ(api->context_create(cm, 0, &embed), TESSERA_OK);
  tessera_unit_ctx* block = nullptr;
  ASSERT_EQ(api->context_create(cm, 1, &block), TESSERA_OK);
  tessera_matrix out{};
  tessera_unit_call call = call_of(params.unit_const(0).data(), nullptr, &batch, 1.0F);
  EXPECT_EQ(api->forward(cm, 0, embed, &call, {}, &out), TESSERA_ERR_INVALID_ARGUMENT);
  std::string msg = plugin_error();
  EXPECT_NE(msg.find("unit 'embed'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("11"), std::string::npos) << msg;

  // Backward with no forward on the context.
  tessera_matrix grad_in{};
  model::ModelParams grads(*m);
  call = call_of(params.unit_const(1).data(), grads.unit(1).data(), nullptr, 1.0F);
  EXPECT_NE(api->backward(cm, 1, block, &call, {}, &grad_in), TESSERA_OK);
  msg = plugin_error();
  EXPECT_NE(msg.find("unit 'block0'"), std::string::npos) << msg;

  // A context of another unit, missing parameter arrays, no call at all.
  call = call_of(params.unit_const(1).data(), nullptr, &batch, 1.0F);
  EXPECT_EQ(api->forward(cm, 1, embed, &call, {}, &out), TESSERA_ERR_INVALID_ARGUMENT);
  msg = plugin_error();
  EXPECT_NE(msg.find("created for unit 0"), std::string::npos) << msg;
  call = call_of(nullptr, nullptr, &batch, 1.0F);
  EXPECT_EQ(api->forward(cm, 0, embed, &call, {}, &out), TESSERA_ERR_INVALID_ARGUMENT);
  msg = plugin_error();
  EXPECT_NE(msg.find("parameter array is NULL"), std::string::npos) << msg;
  EXPECT_EQ(api->forward(cm, 0, embed, nullptr, {}, &out), TESSERA_ERR_INVALID_ARGUMENT);
  msg = plugin_error();
  EXPECT_NE(msg.find("unit call is NULL"), std::string::npos) << msg;

  // A tensor-parallel group without a communicator and a weight half
  // without its input half are refused naming the unit (a unit without
  // the tensor-parallel flag: tests/model/unit_errors_test.cpp).
  tessera_tp_group tp{};
  tp.struct_size = sizeof tp;
  tp.rank = 0;
  tp.size = 2;
  call = call_of(params.unit_const(0).data(), nullptr, &batch, 1.0F);
  call.tp = &tp;
  EXPECT_EQ(api->forward(cm, 0, embed, &call, {}, &out), TESSERA_ERR_INVALID_ARGUMENT);
  msg = plugin_error();
  EXPECT_NE(msg.find("model 'gpt' unit 'embed' forward: tensor-parallel group of 2 ranks has "
                     "rank 0 and no communicator"),
            std::string::npos)
      << msg;
  EXPECT_NE(api->unit_flags(cm, 1) & TESSERA_UNIT_SPLIT_BACKWARD, 0u);  // gpt blocks split
  call = call_of(params.unit_const(1).data(), grads.unit(1).data(), nullptr, 1.0F);
  EXPECT_EQ(api->backward_weight(cm, 1, block, &call), TESSERA_ERR_INVALID_ARGUMENT);
  msg = plugin_error();
  EXPECT_NE(msg.find("unit 'block0': backward_weight without backward_input on this context"),
            std::string::npos)
      << msg;
  api->context_destroy(embed);
  api->context_destroy(block);
  api->context_destroy(nullptr);
}

}  // namespace
}  // namespace tessera::train
