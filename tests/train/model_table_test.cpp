// The model table (tessera_model_api over model::Model): forward and
// backward through it equal direct unit calls bit for bit, parameter infos
// describe owners and ties, and every failure is a status plus a readable
// host last_error, never an exception.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <thread>
#include <vector>

#include "tessera/core/train/strategy_host.hpp"
#include "train/train_util.hpp"

namespace tessera::train {
namespace {

using test::batch_for;
using test::last_error;
using test::same_bits;

// One context per unit, destroyed with the test.
struct Contexts {
  const tessera_model_api* api;
  std::vector<tessera_unit_ctx*> ctx;
  ~Contexts() {
    for (tessera_unit_ctx* c : ctx) api->context_destroy(c);
  }
};

// Runs forward and backward of every unit through the table, adding the
// gradients into `grads`; returns the loss.
float table_forward_backward(const model::Model& m, const model::ModelParams& params,
                             model::ModelParams& grads, const Batch& batch, float scale) {
  const tessera_model_api* api = model_api();
  const tessera_model* cm = as_c_model(m);
  const auto units = api->num_units(cm);
  Contexts contexts{api, {}};
  tessera_matrix x{};
  for (int32_t u = 0; u < units; ++u) {
    tessera_unit_ctx* ctx = nullptr;
    EXPECT_EQ(api->context_create(cm, u, &ctx), TESSERA_OK) << last_error();
    contexts.ctx.push_back(ctx);
    tessera_matrix out{};
    EXPECT_EQ(api->forward(cm, u, ctx, params.unit_const(static_cast<std::size_t>(u)).data(),
                           as_c_batch(batch), x, scale, &out),
              TESSERA_OK)
        << last_error();
    EXPECT_GT(api->context_bytes(ctx), 0u);
    x = out;
  }
  EXPECT_EQ(x.rows * x.cols, 1);
  const float loss = *x.data;
  tessera_matrix grad{};
  for (int32_t u = units; u-- > 0;) {
    tessera_matrix grad_in{};
    EXPECT_EQ(api->backward(cm, u, contexts.ctx[static_cast<std::size_t>(u)],
                            params.unit_const(static_cast<std::size_t>(u)).data(),
                            grads.unit(static_cast<std::size_t>(u)).data(), grad, &grad_in),
              TESSERA_OK)
        << last_error();
    grad = grad_in;
  }
  EXPECT_EQ(grad.data, nullptr) << "the first unit returns no input gradient";
  return loss;
}

class ModelTableEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelTableEquivalence, ForwardBackwardEqualDirectUnitCalls) {
  const auto m = GetParam() == "mlp" ? test::tiny_mlp() : test::tiny_gpt(GetParam() == "gpt_tied");
  model::ModelParams params(*m);
  params.init(*m, 5);
  const Batch batch = batch_for(*m, 3, 9);
  const float scale = 1.0F / 3.0F;

  model::ModelParams direct_grads(*m);
  const double direct_loss =
      model::reference_forward_backward(*m, params, direct_grads, batch, scale);
  model::ModelParams table_grads(*m);
  const float table_loss = table_forward_backward(*m, params, table_grads, batch, scale);

  EXPECT_EQ(static_cast<float>(direct_loss), table_loss);
  EXPECT_TRUE(same_bits(direct_grads.flatten(), table_grads.flatten()));
}

TEST_P(ModelTableEquivalence, RankThreadsShareOneModel) {
  // Ranks as threads call the table on one model with their own contexts.
  const auto m = GetParam() == "mlp" ? test::tiny_mlp() : test::tiny_gpt(GetParam() == "gpt_tied");
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
  const tessera_model_api* api = model_api();
  const tessera_model* cm = as_c_model(*m);
  EXPECT_EQ(api->struct_size, sizeof(tessera_model_api));
  ASSERT_EQ(api->num_units(cm), 3);
  EXPECT_STREQ(api->unit_name(cm, 0), m->unit(0).name().c_str());
  EXPECT_EQ(api->unit_name(cm, 3), nullptr);
  EXPECT_EQ(api->unit_name(cm, -1), nullptr);
  EXPECT_EQ(api->num_params(cm, 1), 2);
  EXPECT_EQ(api->num_params(cm, 3), -1);

  tessera_param_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(api->param_info(cm, 1, 0, &info), TESSERA_OK) << last_error();
  EXPECT_STREQ(info.name, "w");
  EXPECT_EQ(std::string(info.full_name), m->unit(1).name() + ".w");
  EXPECT_EQ(info.ndim, 2);
  EXPECT_EQ(info.shape[0], 7);
  EXPECT_EQ(info.shape[1], 5);
  EXPECT_EQ(info.numel, 35);
  EXPECT_EQ(info.split, TESSERA_SPLIT_COLUMN);
  EXPECT_EQ(info.owner_unit, 1);
  EXPECT_EQ(info.owner_param, 0);

  Batch seq = batch_for(*test::tiny_gpt(true), 4, 1);
  const Batch cls = batch_for(*m, 6, 1);
  EXPECT_EQ(api->batch_examples(as_c_batch(cls)), 6);
  EXPECT_EQ(api->batch_tokens_per_example(as_c_batch(cls)), 1);
  EXPECT_EQ(api->batch_examples(as_c_batch(seq)), 4);
  EXPECT_EQ(api->batch_tokens_per_example(as_c_batch(seq)), 5);
  EXPECT_EQ(api->batch_examples(nullptr), 0);
}

TEST(ModelTable, TiedHeadNamesTheEmbeddingAsOwner) {
  const auto m = test::tiny_gpt(true);
  const tessera_model_api* api = model_api();
  const tessera_model* cm = as_c_model(*m);
  const int32_t head = api->num_units(cm) - 1;
  ASSERT_STREQ(api->unit_name(cm, head), "head");
  const int32_t slots = api->num_params(cm, head);
  ASSERT_EQ(slots, 3);

  tessera_param_info tied{};
  tied.struct_size = sizeof tied;
  ASSERT_EQ(api->param_info(cm, head, 2, &tied), TESSERA_OK) << last_error();
  EXPECT_STREQ(tied.name, "wte");
  EXPECT_STREQ(tied.full_name, "embed.wte");
  EXPECT_EQ(tied.owner_unit, 0);
  EXPECT_EQ(tied.owner_param, 0);
  EXPECT_EQ(tied.split, TESSERA_SPLIT_ROW);
  EXPECT_EQ(tied.numel, 11 * 8);

  tessera_param_info owner{};
  owner.struct_size = sizeof owner;
  ASSERT_EQ(api->param_info(cm, 0, 0, &owner), TESSERA_OK) << last_error();
  EXPECT_STREQ(owner.full_name, "embed.wte");
  EXPECT_EQ(owner.full_name, tied.full_name) << "one stable string per name";
  EXPECT_EQ(owner.owner_unit, 0);

  const auto untied = test::tiny_gpt(false);
  tessera_param_info own{};
  own.struct_size = sizeof own;
  ASSERT_EQ(api->param_info(as_c_model(*untied), head, 2, &own), TESSERA_OK) << last_error();
  EXPECT_STREQ(own.full_name, "head.w");
  EXPECT_EQ(own.owner_unit, head);
  EXPECT_EQ(own.owner_param, 2);
}

TEST(ModelTable, SmallerCallerStructGetsOnlyItsPrefix) {
  const auto m = test::tiny_mlp();
  tessera_param_info info{};
  info.numel = -7;
  info.struct_size = offsetof(tessera_param_info, numel);  // an older caller without numel
  ASSERT_EQ(model_api()->param_info(as_c_model(*m), 0, 1, &info), TESSERA_OK) << last_error();
  EXPECT_EQ(info.struct_size, offsetof(tessera_param_info, numel));
  EXPECT_STREQ(info.name, "b");
  EXPECT_EQ(info.numel, -7) << "a field beyond the caller's struct_size was written";
}

TEST(ModelTable, BadArgumentsReturnStatusAndMessage) {
  const auto m = test::tiny_gpt(true);
  const tessera_model_api* api = model_api();
  const tessera_model* cm = as_c_model(*m);
  tessera_param_info info{};
  info.struct_size = sizeof info;
  EXPECT_EQ(api->param_info(cm, 9, 0, &info), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("no unit 9"), std::string::npos) << last_error();
  EXPECT_EQ(api->param_info(cm, 0, 5, &info), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("unit 'embed'"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("no parameter 5"), std::string::npos) << last_error();
  tessera_unit_ctx* ctx = nullptr;
  EXPECT_EQ(api->context_create(cm, -1, &ctx), TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_NE(last_error().find("context_create"), std::string::npos) << last_error();
}

TEST(ModelTable, UnitErrorsComeBackAsStatusAndLastError) {
  const auto m = test::tiny_gpt(true);
  const tessera_model_api* api = model_api();
  const tessera_model* cm = as_c_model(*m);
  model::ModelParams params(*m);
  params.init(*m, 1);
  Batch batch = batch_for(*m, 2, 3);
  batch.tokens[3] = 11;  // vocab is 11: out of range

  tessera_unit_ctx* embed = nullptr;
  ASSERT_EQ(api->context_create(cm, 0, &embed), TESSERA_OK);
  tessera_unit_ctx* block = nullptr;
  ASSERT_EQ(api->context_create(cm, 1, &block), TESSERA_OK);
  tessera_matrix out{};
  EXPECT_EQ(
      api->forward(cm, 0, embed, params.unit_const(0).data(), as_c_batch(batch), {}, 1.0F, &out),
      TESSERA_ERR_INVALID_ARGUMENT);
  const std::string msg = last_error();
  EXPECT_NE(msg.find("model 'gpt' unit 'embed' forward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("11"), std::string::npos) << msg;

  // Backward with no forward on the context.
  tessera_matrix grad_in{};
  model::ModelParams grads(*m);
  EXPECT_NE(
      api->backward(cm, 1, block, params.unit_const(1).data(), grads.unit(1).data(), {}, &grad_in),
      TESSERA_OK);
  EXPECT_NE(last_error().find("unit 'block0' backward"), std::string::npos) << last_error();

  // A context of another unit, and missing parameter arrays.
  EXPECT_EQ(
      api->forward(cm, 1, embed, params.unit_const(1).data(), as_c_batch(batch), {}, 1.0F, &out),
      TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("created for unit 0"), std::string::npos) << last_error();
  EXPECT_EQ(api->forward(cm, 0, embed, nullptr, as_c_batch(batch), {}, 1.0F, &out),
            TESSERA_ERR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("parameter array is NULL"), std::string::npos) << last_error();
  api->context_destroy(embed);
  api->context_destroy(block);
  api->context_destroy(nullptr);
}

}  // namespace
}  // namespace tessera::train
