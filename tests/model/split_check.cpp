// Checks of a unit's split backward (see split_check.hpp).
#include "split_check.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../support/models.hpp"
#include "fd_check.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model::testing {
namespace {

// One micro-batch: its batch, input x and output gradient, and the buffers
// the gradients are added into.
struct MicroBatch {
  BatchView view;
  std::vector<float> x;
  int64_t rows = 0;
  std::vector<float> grad_out;  // the last unit: one multiplier
  std::vector<std::vector<float>> grads;
  std::vector<float> dx;
};

std::vector<float*> pointers(std::vector<std::vector<float>>& buffers) {
  std::vector<float*> out;
  out.reserve(buffers.size());
  for (auto& b : buffers) out.push_back(b.data());
  return out;
}

std::vector<const float*> const_pointers(const std::vector<std::vector<float>>& buffers) {
  std::vector<const float*> out;
  out.reserve(buffers.size());
  for (const auto& b : buffers) out.push_back(b.data());
  return out;
}

UnitInput input_of(const Unit& unit, const MicroBatch& m, int64_t input_cols) {
  UnitInput in;
  in.batch = &m.view;
  in.loss_scale = 0.37f;
  if (!unit.is_first()) in.x = {m.x.data(), m.rows, input_cols};
  return in;
}

ConstView grad_of(const Unit& unit, const MicroBatch& m, ConstView out) {
  if (unit.is_last()) return {m.grad_out.data(), 1, 1};
  return {m.grad_out.data(), out.rows, out.cols};
}

std::vector<float> copy_of(ConstView v) {
  return v.empty() ? std::vector<float>() : std::vector<float>(v.data, v.data + v.rows * v.cols);
}

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (const float x : v) m = std::max(m, std::abs(x));
  return m;
}

// Per tensor: max |got − want| ≤ 1e-6 · max |want|.
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float worst = 0.0f;  // NaN once any difference is NaN
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float diff = std::abs(got[i] - want[i]);
    if (!(diff <= worst)) worst = diff;
  }
  EXPECT_LE(worst, 1e-6f * max_abs(want)) << what << ": split and whole backward differ";
}

void expect_refused(const std::function<void()>& call, const std::string& expected,
                    const std::string& when) {
  try {
    call();
    ADD_FAILURE() << when << ": accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << when << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << when << ": " << e.what();
  }
}

}  // namespace

void expect_split_matches_backward(const Unit& unit, const Batch& a, const Batch& b,
                                   int64_t input_cols, int64_t kept_per_row, uint64_t seed) {
  EXPECT_EQ(unit.flags() & TESSERA_UNIT_SPLIT_BACKWARD, TESSERA_UNIT_SPLIT_BACKWARD);
  const auto specs = unit.params();
  std::vector<std::vector<float>> params;
  std::vector<std::vector<float>> start;  // where every gradient buffer starts
  for (const ParamSpec& s : specs) {
    params.push_back(random_values(s.numel(), 0.4f, seed++));
    start.push_back(random_values(s.numel(), 0.1f, seed++));
  }
  const std::vector<const float*> p = const_pointers(params);

  MicroBatch mb[2];
  const Batch* batches[2] = {&a, &b};
  for (int i = 0; i < 2; ++i) {
    mb[i].view = tessera::test::view_of(*batches[i]);
    mb[i].rows = batches[i]->size * batches[i]->seq_len;
    if (!unit.is_first()) mb[i].x = random_values(mb[i].rows * input_cols, 1.0f, seed++);
  }

  // The whole backward of each micro-batch alone: the reference.
  MicroBatch whole[2];
  for (int i = 0; i < 2; ++i) {
    auto ctx = unit.make_context();
    const ConstView out = unit.forward(*ctx, p, input_of(unit, mb[i], input_cols));
    mb[i].grad_out = unit.is_last() ? std::vector<float>{i == 0 ? 0.7f : 1.3f}
                                    : random_values(out.rows * out.cols, 1.0f, seed++);
    whole[i].grads = start;
    const auto g = pointers(whole[i].grads);
    whole[i].dx = copy_of(unit.backward(*ctx, p, g, grad_of(unit, mb[i], out)));
  }

  // The halves, interleaved over two live contexts.
  std::unique_ptr<UnitContext> ctx[2] = {unit.make_context(), unit.make_context()};
  ConstView out[2];
  std::size_t forward_bytes[2] = {};
  for (int i = 0; i < 2; ++i) {
    out[i] = unit.forward(*ctx[i], p, input_of(unit, mb[i], input_cols));
    forward_bytes[i] = ctx[i]->bytes();
  }
  for (const int i : {1, 0}) {
    mb[i].dx = copy_of(unit.backward_input(*ctx[i], p, grad_of(unit, mb[i], out[i])));
    EXPECT_GE(
        ctx[i]->bytes(),
        forward_bytes[i] + static_cast<std::size_t>(kept_per_row * mb[i].rows) * sizeof(float))
        << "micro-batch " << i << ": bytes() after the input half";
  }
  // The caller's inputs and output gradients may be gone by the weight half.
  for (MicroBatch& m : mb) {
    std::fill(m.x.begin(), m.x.end(), std::nanf(""));
    std::fill(m.grad_out.begin(), m.grad_out.end(), std::nanf(""));
  }
  for (const int i : {0, 1}) {
    mb[i].grads = start;
    const auto g = pointers(mb[i].grads);
    unit.backward_weight(*ctx[i], p, g);
  }

  for (int i = 0; i < 2; ++i) {
    const std::string which = unit.name() + " micro-batch " + (i == 0 ? "a" : "b");
    EXPECT_EQ(mb[i].dx.empty(), unit.is_first()) << which;
    expect_close(mb[i].dx, whole[i].dx, which + " input gradient");
    for (std::size_t k = 0; k < specs.size(); ++k) {
      expect_close(mb[i].grads[k], whole[i].grads[k], which + " gradient of " + specs[k].name);
      EXPECT_NE(mb[i].grads[k], start[k]) << which << ": no gradient for " << specs[k].name;
    }
  }
}

void expect_weight_half_refused(const Unit& unit, const Batch& batch, int64_t input_cols,
                                uint64_t seed) {
  std::vector<std::vector<float>> params;
  std::vector<std::vector<float>> grads;
  for (const ParamSpec& s : unit.params()) {
    params.push_back(random_values(s.numel(), 0.4f, seed++));
    grads.emplace_back(static_cast<std::size_t>(s.numel()), 0.0f);
  }
  const std::vector<const float*> p = const_pointers(params);
  const auto g = pointers(grads);
  MicroBatch m;
  m.view = tessera::test::view_of(batch);
  m.rows = batch.size * batch.seq_len;
  if (!unit.is_first()) m.x = random_values(m.rows * input_cols, 1.0f, seed++);
  const std::string unit_named = "unit '" + unit.name() + "': ";
  const std::string refused = unit_named + "backward_weight without backward_input on this context";

  auto ctx = unit.make_context();
  expect_refused([&] { (void)unit.backward_input(*ctx, p, {}); },
                 unit_named + "backward without a forward on this context",
                 "backward_input before any forward");
  const ConstView out = unit.forward(*ctx, p, input_of(unit, m, input_cols));
  m.grad_out =
      unit.is_last() ? std::vector<float>{1.0f} : random_values(out.rows * out.cols, 1.0f, seed++);
  const ConstView grad = grad_of(unit, m, out);
  expect_refused([&] { unit.backward_weight(*ctx, p, g); }, refused,
                 "backward_weight after a forward alone");
  (void)unit.backward_input(*ctx, p, grad);
  unit.backward_weight(*ctx, p, g);
  expect_refused([&] { unit.backward_weight(*ctx, p, g); }, refused,
                 "a second backward_weight after one input half");
  (void)unit.backward_input(*ctx, p, grad);
  (void)unit.forward(*ctx, p, input_of(unit, m, input_cols));
  expect_refused([&] { unit.backward_weight(*ctx, p, g); }, refused,
                 "backward_weight after a new forward");
}

void expect_model_split_matches_backward(std::span<const std::unique_ptr<Unit>> units,
                                         const Batch& a, const Batch& b, uint64_t seed) {
  // Owned buffers per [unit][param]; a tied slot stays empty and points at
  // its owner.
  const std::size_t count = units.size();
  std::vector<std::vector<std::vector<float>>> params(count), start(count);
  for (std::size_t u = 0; u < count; ++u) {
    for (const ParamSpec& s : units[u]->params()) {
      const bool tied = !s.tied_to.empty();
      params[u].push_back(tied ? std::vector<float>() : random_values(s.numel(), 0.4f, seed++));
      start[u].push_back(tied ? std::vector<float>() : random_values(s.numel(), 0.1f, seed++));
    }
  }
  const auto owner = [&](std::size_t u, std::size_t k) -> std::pair<std::size_t, std::size_t> {
    const std::string& tied = units[u]->params()[k].tied_to;
    if (tied.empty()) return {u, k};
    for (std::size_t v = 0; v < count; ++v) {
      const auto specs = units[v]->params();
      for (std::size_t j = 0; j < specs.size(); ++j) {
        if (units[v]->name() + "." + specs[j].name == tied) return {v, j};
      }
    }
    ADD_FAILURE() << "no owner for " << tied;
    return {u, k};
  };
  std::vector<std::vector<const float*>> p(count);
  for (std::size_t u = 0; u < count; ++u) {
    for (std::size_t k = 0; k < params[u].size(); ++k) {
      const auto [ou, ok] = owner(u, k);
      p[u].push_back(params[ou][ok].data());
    }
  }
  const auto grad_pointers = [&](std::vector<std::vector<std::vector<float>>>& grads) {
    std::vector<std::vector<float*>> g(count);
    for (std::size_t u = 0; u < count; ++u) {
      for (std::size_t k = 0; k < grads[u].size(); ++k) {
        const auto [ou, ok] = owner(u, k);
        g[u].push_back(grads[ou][ok].data());
      }
    }
    return g;
  };
  const BatchView views[2] = {tessera::test::view_of(a), tessera::test::view_of(b)};
  const auto forward_all = [&](std::vector<std::unique_ptr<UnitContext>>& ctx, const BatchView& v) {
    ConstView x;
    for (std::size_t u = 0; u < count; ++u) {
      ctx.push_back(units[u]->make_context());
      x = units[u]->forward(*ctx[u], p[u], {&v, x, 0.37f});
    }
  };

  // Reference: the whole backward of a, then of b.
  auto whole = start;
  const auto wg = grad_pointers(whole);
  for (const BatchView& v : views) {
    std::vector<std::unique_ptr<UnitContext>> ctx;
    forward_all(ctx, v);
    ConstView grad;
    for (std::size_t u = count; u-- > 0;) grad = units[u]->backward(*ctx[u], p[u], wg[u], grad);
  }

  // Split: both micro-batches in flight.
  auto split = start;
  const auto sg = grad_pointers(split);
  std::vector<std::unique_ptr<UnitContext>> ctx[2];
  forward_all(ctx[0], views[0]);
  forward_all(ctx[1], views[1]);
  for (const int m : {1, 0}) {
    ConstView grad;
    for (std::size_t u = count; u-- > 0;) grad = units[u]->backward_input(*ctx[m][u], p[u], grad);
  }
  for (const int m : {0, 1}) {
    for (std::size_t u = count; u-- > 0;) units[u]->backward_weight(*ctx[m][u], p[u], sg[u]);
  }

  for (std::size_t u = 0; u < count; ++u) {
    for (std::size_t k = 0; k < whole[u].size(); ++k) {
      if (whole[u][k].empty()) continue;  // tied: checked at the owner
      const std::string what = units[u]->name() + "." + units[u]->params()[k].name;
      expect_close(split[u][k], whole[u][k], what);
      EXPECT_NE(split[u][k], start[u][k]) << "no gradient for " << what;
    }
  }
}

}  // namespace tessera::model::testing
