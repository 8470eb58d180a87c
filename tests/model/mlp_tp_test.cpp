// The mlp under tensor parallelism: the classes-parallel head and a column
// layer that gathers its output, on 2 and 3 in-memory ranks against the
// whole units on one rank; whole models (column and row layers, a head
// split by classes or replicated), also through the plugin's table; a
// group of one rank changes nothing; a backward in a group of another size
// than its forward is refused naming the unit and both sizes. Sequence
// parallelism (the examples split in blocks between the pairs): every unit
// kind and whole models on 2, 3 and 4 ranks, the context bytes after a
// forward against their formulas, and the refusals.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "../support/models.hpp"
#include "fd_check.hpp"
#include "mlp.hpp"
#include "tessera/sdk/error.hpp"
#include "tp_check.hpp"

namespace tessera::model {
namespace {

using testing::expect_model_tp_matches;
using testing::expect_tp_one_is_identical;
using testing::expect_unit_tp_matches;

// Widths divisible by 2 and 3.
constexpr int64_t kMlpTpInput = 5;
constexpr int64_t kMlpTpWidth = 12;
constexpr int64_t kMlpTpClasses = 6;

Batch mlp_tp_batch(int64_t classes = kMlpTpClasses) {
  Batch batch = Batch::make(7, 0, kMlpTpInput);
  for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
    batch.inputs[i] = static_cast<float>((i * 7 % 11)) / 11.0f - 0.5f;
  }
  for (std::size_t i = 0; i < batch.targets.size(); ++i) {
    batch.targets[i] = static_cast<int32_t>((i * 5 + 1) % static_cast<std::size_t>(classes));
  }
  return batch;
}

MlpConfig mlp_tp_config(int64_t classes) {
  MlpConfig config;
  config.input = kMlpTpInput;
  config.hidden = {kMlpTpWidth, kMlpTpWidth, kMlpTpWidth};  // column, row, column (gathers)
  config.classes = classes;
  config.activation = kernels::Activation::gelu;
  return config;
}

TEST(MlpTensorParallel, ClassesParallelHeadAndGatheringColumnLayer) {
  const ClassifierHead head("head", kMlpTpWidth, kMlpTpClasses, false);
  const DenseUnit layer("layer2", kMlpTpWidth, kMlpTpWidth, kernels::Activation::gelu, false,
                        DenseSplit::column, true);
  for (const int tp : {2, 3}) {
    expect_unit_tp_matches(head, mlp_tp_batch(), kMlpTpWidth, tp, 301);
    expect_unit_tp_matches(head, mlp_tp_batch(), kMlpTpWidth, tp, 302, true);
    expect_unit_tp_matches(layer, mlp_tp_batch(), kMlpTpWidth, tp, 303);
    expect_unit_tp_matches(layer, mlp_tp_batch(), kMlpTpWidth, tp, 304, true);
  }
}

TEST(MlpTensorParallel, WholeModelsHeadSplitOrReplicated) {
  // 6 classes split 2 and 3 ways; 5 do not, and the head stays whole.
  for (const int64_t classes : {kMlpTpClasses, int64_t{5}}) {
    SCOPED_TRACE("classes = " + std::to_string(classes));
    const auto units = build_mlp_units(mlp_tp_config(classes));
    for (const int tp : {2, 3}) expect_model_tp_matches(units, mlp_tp_batch(classes), tp, 305);
  }
}

TEST(MlpTensorParallel, ThroughThePluginTable) {
  // The plugin's adapter gives every backward the group of its own call.
  const auto model = tessera::test::build_model(
      "mlp", "input = 5\nhidden = [12, 12, 12]\nclasses = 6\nactivation = \"gelu\"\n");
  const auto units = build_mlp_units(mlp_tp_config(kMlpTpClasses));
  for (const int tp : {2, 3}) expect_model_tp_matches(units, mlp_tp_batch(), tp, 306, model.get());
}

TEST(MlpTensorParallel, GroupOfOneIsBitIdentical) {
  const DenseUnit first("layer0", kMlpTpInput, kMlpTpWidth, kernels::Activation::relu, true);
  const DenseUnit row("layer1", kMlpTpWidth, kMlpTpWidth, kernels::Activation::gelu, false,
                      DenseSplit::row);
  const DenseUnit gather("layer2", kMlpTpWidth, kMlpTpWidth, kernels::Activation::gelu, false,
                         DenseSplit::column, true);
  const ClassifierHead head("head", kMlpTpWidth, kMlpTpClasses, false);
  expect_tp_one_is_identical(first, mlp_tp_batch(), 0, 307);
  expect_tp_one_is_identical(row, mlp_tp_batch(), kMlpTpWidth, 308);
  expect_tp_one_is_identical(gather, mlp_tp_batch(), kMlpTpWidth, 309);
  expect_tp_one_is_identical(head, mlp_tp_batch(), kMlpTpWidth, 310);
}

// Forward of `unit` in a group of 2 on its shards, then `backward` (true)
// or backward_input (false) without a group; the message each rank got.
std::vector<std::string> backward_without_group(const Unit& unit, bool whole_backward) {
  const Batch batch = mlp_tp_batch();
  const BatchView view = tessera::test::view_of(batch);
  std::vector<std::vector<float>> shards;
  // Split tensors as halves, replicated ones (a row layer's bias) whole.
  for (const ParamSpec& s : unit.params()) {
    shards.emplace_back(s.split == SplitHint::none ? s.numel() : s.numel() / 2, 0.5f);
  }
  std::vector<const float*> p;
  p.reserve(shards.size());
  for (const auto& v : shards) p.push_back(v.data());
  std::vector<float> x(static_cast<std::size_t>(batch.size * kMlpTpWidth), 0.25f);
  std::vector<std::string> messages(2);
  testing::run_tp_ranks(2, [&](int rank, const tessera_tp_group& group) {
    std::vector<std::vector<float>> grads(shards.size());
    std::vector<float*> g;
    g.reserve(shards.size());
    for (std::size_t i = 0; i < shards.size(); ++i) {
      grads[i].assign(shards[i].size(), 0.0f);
      g.push_back(grads[i].data());
    }
    auto ctx = unit.make_context();
    ctx->set_tp(&group);
    UnitInput in;
    in.batch = &view;
    in.tp = &group;
    in.x = {x.data(), batch.size, kMlpTpWidth};
    const ConstView out = unit.forward(*ctx, p, in);
    const std::vector<float> dy(out.data, out.data + out.rows * out.cols);
    const ConstView grad{dy.data(), out.rows, out.cols};
    ctx->set_tp(nullptr);
    try {
      if (whole_backward) {
        (void)unit.backward(*ctx, p, g, grad);
      } else {
        (void)unit.backward_input(*ctx, p, grad);
      }
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
      messages[static_cast<std::size_t>(rank)] = e.what();
    }
  });
  return messages;
}

TEST(MlpTensorParallel, BackwardInAnotherGroupSizeIsRefused) {
  const ClassifierHead head("head", kMlpTpWidth, kMlpTpClasses, false);
  const DenseUnit layer("layer0", kMlpTpWidth, kMlpTpWidth, kernels::Activation::relu, false);
  for (const std::string& m : backward_without_group(head, true)) {
    EXPECT_NE(m.find("unit 'head': backward in a tensor-parallel group of 1 ranks after a "
                     "forward in one of 2"),
              std::string::npos)
        << m;
  }
  for (const std::string& m : backward_without_group(layer, false)) {
    EXPECT_NE(m.find("unit 'layer0': backward in a tensor-parallel group of 1 ranks after a "
                     "forward in one of 2"),
              std::string::npos)
        << m;
  }
}

}  // namespace
}  // namespace tessera::model

namespace tessera::model {
namespace {

using testing::expect_model_tp_matches;
using testing::expect_unit_tp_matches;

// 12 examples and widths split 2, 3 and 4 ways; 12 classes too, 5 none
// (the head stays replicated).
constexpr int64_t kSeqExamples = 12;
constexpr int64_t kSeqClasses = 12;
constexpr int64_t kSeqOddClasses = 5;

Batch mlp_seq_batch(int64_t classes, int64_t examples = kSeqExamples) {
  Batch batch = Batch::make(examples, 0, kMlpTpInput);
  for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
    batch.inputs[i] = static_cast<float>((i * 7 % 11)) / 11.0f - 0.5f;
  }
  for (std::size_t i = 0; i < batch.targets.size(); ++i) {
    batch.targets[i] = static_cast<int32_t>((i * 5 + 1) % static_cast<std::size_t>(classes));
  }
  return batch;
}

MlpConfig mlp_seq_config(std::size_t hidden, int64_t classes) {
  MlpConfig config;
  config.input = kMlpTpInput;
  config.hidden.assign(hidden, kMlpTpWidth);
  config.classes = classes;
  config.activation = kernels::Activation::gelu;
  return config;
}

TEST(MlpSequenceParallel, UnitsWithWholeRowsAtTheirEdges) {
  // The units whose input and output are rows of examples (or the batch):
  // the head split by classes or replicated, first or not, and a column
  // layer that gathers its output, first or not. The pair's inner edge
  // (column shard -> row layer) is covered by the whole models below.
  const ClassifierHead head("head", kMlpTpWidth, kSeqClasses, false);
  const ClassifierHead replicated("head", kMlpTpWidth, kSeqOddClasses, false);
  const ClassifierHead first_head("head", kMlpTpInput, kSeqClasses, true);
  const ClassifierHead first_replicated("head", kMlpTpInput, kSeqOddClasses, true);
  const DenseUnit gather("layer2", kMlpTpWidth, kMlpTpWidth, kernels::Activation::gelu, false,
                         DenseSplit::column, true);
  const DenseUnit first_gather("layer0", kMlpTpInput, kMlpTpWidth, kernels::Activation::relu, true,
                               DenseSplit::column, true);
  const Batch batch = mlp_seq_batch(kSeqClasses);
  const Batch odd = mlp_seq_batch(kSeqOddClasses);
  for (const int tp : {2, 3, 4}) {
    for (const bool halves : {false, true}) {
      const uint64_t seed = 400 + static_cast<uint64_t>(tp) * 10 + (halves ? 5 : 0);
      expect_unit_tp_matches(head, batch, kMlpTpWidth, tp, seed, halves, true);
      expect_unit_tp_matches(replicated, odd, kMlpTpWidth, tp, seed + 1, halves, true);
      expect_unit_tp_matches(first_head, batch, 0, tp, seed + 2, halves, true);
      expect_unit_tp_matches(first_replicated, odd, 0, tp, seed + 3, halves, true);
      expect_unit_tp_matches(gather, batch, kMlpTpWidth, tp, seed + 4, halves, true);
      expect_unit_tp_matches(first_gather, batch, 0, tp, seed + 5, halves, true);
    }
  }
}

TEST(MlpSequenceParallel, WholeModelsEvenAndOddHiddenCounts) {
  // 0 to 4 hidden layers: an even count ends on a row layer, an odd one on
  // a gathering column layer; a column layer after a row layer from 3 on.
  // 12 classes split by every group, 5 by none (replicated head).
  for (const int64_t classes : {kSeqClasses, kSeqOddClasses}) {
    for (std::size_t hidden = 0; hidden <= 4; ++hidden) {
      SCOPED_TRACE("classes = " + std::to_string(classes) +
                   ", hidden layers = " + std::to_string(hidden));
      const auto units = build_mlp_units(mlp_seq_config(hidden, classes));
      for (const int tp : {2, 3, 4}) {
        expect_model_tp_matches(units, mlp_seq_batch(classes), tp, 500 + hidden, nullptr, true);
      }
    }
  }
}

TEST(MlpSequenceParallel, ThroughThePluginTable) {
  const auto model = tessera::test::build_model(
      "mlp", "input = 5\nhidden = [12, 12, 12]\nclasses = 5\nactivation = \"gelu\"\n");
  const auto units = build_mlp_units(mlp_seq_config(3, kSeqOddClasses));
  for (const int tp : {2, 4}) {
    expect_model_tp_matches(units, mlp_seq_batch(kSeqOddClasses), tp, 510, model.get(), true);
  }
}

// Forward of `unit` on every rank of a group of `tp` (with
// TESSERA_TP_SEQUENCE when `sequence`) on its shards of random parameters
// and a random x [x_rows, x_cols] (not read by a first unit): each rank's
// context bytes after the forward, or the message it threw.
struct MlpSeqForward {
  std::vector<std::size_t> bytes;
  std::vector<std::string> errors;
};

MlpSeqForward mlp_seq_forward(const Unit& unit, const Batch& batch, int64_t x_rows, int64_t x_cols,
                              int tp, bool sequence) {
  const BatchView view = tessera::test::view_of(batch);
  std::vector<std::vector<float>> whole;
  uint64_t seed = 600;
  for (const ParamSpec& s : unit.params())
    whole.push_back(testing::random_values(s.numel(), 0.4f, seed++));
  const std::vector<float> x = testing::random_values(x_rows * x_cols, 1.0f, seed);
  MlpSeqForward result;
  result.bytes.assign(static_cast<std::size_t>(tp), 0);
  result.errors.assign(static_cast<std::size_t>(tp), "");
  testing::run_tp_ranks(
      tp,
      [&](int rank, const tessera_tp_group& group) {
        std::vector<std::vector<float>> shards;
        std::vector<const float*> p;
        const auto specs = unit.params();
        for (std::size_t i = 0; i < specs.size(); ++i) {
          shards.push_back(testing::shard_of(specs[i], whole[i], rank, tp));
        }
        p.reserve(shards.size());
        for (const auto& v : shards) p.push_back(v.data());
        auto ctx = unit.make_context();
        ctx->set_tp(&group);
        UnitInput in;
        in.batch = &view;
        in.tp = &group;
        in.loss_scale = 1.0f;
        if (!unit.is_first()) in.x = {x.data(), x_rows, x_cols};
        const auto r = static_cast<std::size_t>(rank);
        try {
          (void)unit.forward(*ctx, p, in);
          result.bytes[r] = ctx->bytes();
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << e.what();
          result.errors[r] = e.what();
        }
      },
      sequence ? static_cast<uint32_t>(TESSERA_TP_SEQUENCE) : 0U);
  return result;
}

TEST(MlpSequenceParallel, ContextBytesAfterForward) {
  // Floats kept after a forward, B examples, p ranks (4 bytes each):
  //   column layer (not gathering):  B·in + 2·B·out/p              both modes
  //   row layer:        tensor B·in/p + 2·B·out, sequence B·in/p + 2·(B/p)·out
  //   gathering column: tensor B·in + 2·B·out/p + 2·B·out (raw gather + output),
  //                     sequence B·in + 2·B·out/p + (B/p)·out
  //   head, classes-parallel: B·in + B·C/p + B (int32 targets)    both modes
  //   head, replicated: tensor B·(in + C + 1), sequence (B/p)·(in + C + 1)
  // so sequence saves (1 − 1/p)·2·B·out on a row layer, (2 − 1/p)·B·out on a
  // gathering column layer and (1 − 1/p)·B·(in + C + 1) on a replicated head.
  const int64_t b = kSeqExamples;
  const int64_t w = kMlpTpWidth;
  const DenseUnit column("layer2", w, w, kernels::Activation::gelu, false);
  const DenseUnit row("layer1", w, w, kernels::Activation::gelu, false, DenseSplit::row);
  const DenseUnit gather("layer2", w, w, kernels::Activation::gelu, false, DenseSplit::column,
                         true);
  const ClassifierHead head("head", w, kSeqClasses, false);
  const ClassifierHead replicated("head", w, kSeqOddClasses, false);
  const Batch batch = mlp_seq_batch(kSeqClasses);
  const Batch odd = mlp_seq_batch(kSeqOddClasses);
  const auto floats = [](int64_t n) { return static_cast<std::size_t>(4 * n); };
  for (const int tp : {2, 3, 4}) {
    SCOPED_TRACE("tp = " + std::to_string(tp));
    const int64_t p = tp;
    const int64_t local = b / p;
    const auto bytes = [&](const Unit& unit, const Batch& on, int64_t rows, int64_t cols,
                           bool sequence) {
      const MlpSeqForward r = mlp_seq_forward(unit, on, rows, cols, tp, sequence);
      for (const std::string& e : r.errors) EXPECT_EQ(e, "");
      // Every rank keeps the same.
      for (const std::size_t n : r.bytes) EXPECT_EQ(n, r.bytes.front());
      return r.bytes.front();
    };
    EXPECT_EQ(bytes(column, batch, b, w, false), floats(b * w + 2 * b * w / p));
    EXPECT_EQ(bytes(column, batch, local, w, true), floats(b * w + 2 * b * w / p));
    EXPECT_EQ(bytes(row, batch, b, w / p, false), floats(b * w / p + 2 * b * w));
    EXPECT_EQ(bytes(row, batch, b, w / p, true), floats(b * w / p + 2 * local * w));
    EXPECT_EQ(bytes(gather, batch, b, w, false), floats(b * w + 2 * b * w / p + 2 * b * w));
    EXPECT_EQ(bytes(gather, batch, local, w, true), floats(b * w + 2 * b * w / p + local * w));
    EXPECT_EQ(bytes(head, batch, b, w, false), floats(b * w + b * kSeqClasses / p + b));
    EXPECT_EQ(bytes(head, batch, local, w, true), floats(b * w + b * kSeqClasses / p + b));
    EXPECT_EQ(bytes(replicated, odd, b, w, false), floats(b * (w + kSeqOddClasses + 1)));
    EXPECT_EQ(bytes(replicated, odd, local, w, true), floats(local * (w + kSeqOddClasses + 1)));
  }
}

TEST(MlpSequenceParallel, BatchSizeTheGroupDoesNotDivideIsRefused) {
  // 7 examples on 2 ranks: the first unit (a column layer, a head split by
  // classes or replicated) and a row layer refuse, naming both sizes.
  const Batch batch = mlp_seq_batch(kSeqClasses, 7);
  const Batch odd = mlp_seq_batch(kSeqOddClasses, 7);
  const DenseUnit first("layer0", kMlpTpInput, kMlpTpWidth, kernels::Activation::relu, true);
  const DenseUnit row("layer1", kMlpTpWidth, kMlpTpWidth, kernels::Activation::gelu, false,
                      DenseSplit::row);
  const ClassifierHead head("head", kMlpTpInput, kSeqClasses, true);
  const ClassifierHead replicated("head", kMlpTpInput, kSeqOddClasses, true);
  const auto expect_refused = [](const MlpSeqForward& r, const std::string& unit) {
    for (const std::string& e : r.errors) {
      EXPECT_NE(e.find("unit '" + unit +
                       "': the batch size (7) is not divisible by the tensor-parallel group "
                       "size 2, which sequence parallelism splits it by"),
                std::string::npos)
          << e;
    }
  };
  expect_refused(mlp_seq_forward(first, batch, 0, 0, 2, true), "layer0");
  expect_refused(mlp_seq_forward(row, batch, 7, kMlpTpWidth / 2, 2, true), "layer1");
  expect_refused(mlp_seq_forward(head, batch, 0, 0, 2, true), "head");
  expect_refused(mlp_seq_forward(replicated, odd, 0, 0, 2, true), "head");
  // Tensor mode takes the same batch.
  for (const std::string& e : mlp_seq_forward(first, batch, 0, 0, 2, false).errors) {
    EXPECT_EQ(e, "");
  }
}

TEST(MlpSequenceParallel, BackwardInTheOtherModeIsRefused) {
  // A forward with sequence parallelism, then backward_input in a group of
  // the same ranks without it: the rows no longer match, refused.
  const DenseUnit row("layer1", kMlpTpWidth, kMlpTpWidth, kernels::Activation::gelu, false,
                      DenseSplit::row);
  const ClassifierHead head("head", kMlpTpWidth, kSeqClasses, false);
  const Batch batch = mlp_seq_batch(kSeqClasses);
  const BatchView view = tessera::test::view_of(batch);
  for (const Unit* unit : {static_cast<const Unit*>(&row), static_cast<const Unit*>(&head)}) {
    const bool is_row = unit == &row;
    const int64_t rows = is_row ? kSeqExamples : kSeqExamples / 2;
    const int64_t cols = is_row ? kMlpTpWidth / 2 : kMlpTpWidth;
    std::vector<std::vector<float>> shards;
    for (const ParamSpec& s : unit->params()) {
      shards.emplace_back(s.split == SplitHint::none ? s.numel() : s.numel() / 2, 0.5f);
    }
    std::vector<const float*> p;
    p.reserve(shards.size());
    for (const auto& v : shards) p.push_back(v.data());
    const std::vector<float> x(static_cast<std::size_t>(rows * cols), 0.25f);
    testing::run_tp_ranks(
        2,
        [&](int /*rank*/, const tessera_tp_group& group) {
          auto ctx = unit->make_context();
          ctx->set_tp(&group);
          UnitInput in;
          in.batch = &view;
          in.tp = &group;
          in.x = {x.data(), rows, cols};
          const ConstView out = unit->forward(*ctx, p, in);
          const std::vector<float> dy(out.data, out.data + out.rows * out.cols);
          tessera_tp_group plain = group;
          plain.flags = 0;
          ctx->set_tp(&plain);
          try {
            (void)unit->backward_input(*ctx, p, {dy.data(), out.rows, out.cols});
            ADD_FAILURE() << unit->name() << ": backward_input without sequence parallelism ran";
          } catch (const Error& e) {
            EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
            EXPECT_NE(std::string(e.what()).find(
                          "unit '" + unit->name() +
                          "': backward without sequence parallelism after a forward with it"),
                      std::string::npos)
                << e.what();
          }
        },
        static_cast<uint32_t>(TESSERA_TP_SEQUENCE));
  }
}

}  // namespace
}  // namespace tessera::model
