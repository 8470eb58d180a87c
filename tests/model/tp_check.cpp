// Checks of the in-tree units under tensor parallelism (see tp_check.hpp).
#include "tp_check.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <string>
#include <utility>

#include "../support/models.hpp"
#include "fd_check.hpp"
#include "tessera/core/comm.hpp"
#include "tessera/core/host_api.hpp"
#include "tessera/core/logging.hpp"
#include "tessera/core/rank_threads.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model::testing {
namespace {

float max_abs_of(std::span<const float> v) {
  float m = 0.0f;
  for (const float x : v) m = std::max(m, std::abs(x));
  return m;
}

// Per tensor: max |got − want| ≤ 1e-5 · max |want| (NaN fails).
void expect_near_rel(std::span<const float> got, std::span<const float> want,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float worst = 0.0f;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float diff = std::abs(got[i] - want[i]);
    if (!(diff <= worst)) worst = diff;
  }
  EXPECT_LE(worst, 1e-5f * max_abs_of(want)) << what;
}

std::vector<float> tp_copy(ConstView v) {
  return v.empty() ? std::vector<float>() : std::vector<float>(v.data, v.data + v.rows * v.cols);
}

// What one run of a unit produced.
struct UnitResult {
  std::vector<float> out;
  std::vector<float> dx;
  std::vector<std::vector<float>> grads;
};

struct UnitCase {
  BatchView view;
  int64_t rows = 0;
  std::vector<float> x;
  std::vector<float> grad_out;
  std::vector<std::vector<float>> params;  // whole
};

UnitCase make_case(const Unit& unit, const Batch& batch, int64_t input_cols, uint64_t seed) {
  UnitCase c;
  c.view = tessera::test::view_of(batch);
  c.rows = batch.is_sequence() ? batch.size * batch.seq_len : batch.size;  // tokens or examples
  for (const ParamSpec& s : unit.params()) {
    std::vector<float> p = random_values(s.numel(), 0.4f, seed++);
    // Norm gains near 1, as after init, keep the normalised values tame.
    if (s.name.size() > 2 && s.name.substr(s.name.size() - 2) == "_g") {
      for (float& v : p) v += 1.0f;
    }
    c.params.push_back(std::move(p));
  }
  if (!unit.is_first()) c.x = random_values(c.rows * input_cols, 1.0f, seed++);
  return c;
}

// Forward and backward of `unit` with `params` (whole or this rank's
// shards) and group `tp` (may be null).
// `x` (null: c.x) is the input of a unit that is not first; `slice` (null:
// none) cuts a rank's rows out of a whole [rows, width] activation.
using RowSlicer = std::function<std::vector<float>(std::span<const float>, int64_t width)>;
UnitResult run_unit(const Unit& unit, const UnitCase& c, int64_t input_cols,
                    const std::vector<std::vector<float>>& params, const tessera_tp_group* tp,
                    bool split_halves, uint64_t grad_seed, const RowSlicer& slice = nullptr) {
  UnitResult r;
  std::vector<const float*> p;
  std::vector<float*> g;
  p.reserve(params.size());
  g.reserve(params.size());
  r.grads.reserve(params.size());
  for (const auto& v : params) {
    p.push_back(v.data());
    r.grads.emplace_back(v.size(), 0.0f);
    g.push_back(r.grads.back().data());
  }
  auto ctx = unit.make_context();
  ctx->set_tp(tp);
  UnitInput in;
  in.batch = &c.view;
  in.loss_scale = 0.37f;
  in.tp = tp;
  const std::vector<float> x = slice != nullptr && !unit.is_first() ? slice(c.x, input_cols) : c.x;
  if (!unit.is_first()) {
    in.x = {x.data(), static_cast<int64_t>(x.size()) / std::max<int64_t>(input_cols, 1),
            input_cols};
  }
  const ConstView out = unit.forward(*ctx, p, in);
  r.out = tp_copy(out);
  std::vector<float> grad_out{0.7f};
  if (!unit.is_last()) {
    // The whole output's gradient (its rows: c.rows), or this rank's slice.
    grad_out = random_values(c.rows * out.cols, 1.0f, grad_seed);
    if (slice != nullptr) grad_out = slice(grad_out, out.cols);
  }
  const ConstView dy{grad_out.data(), unit.is_last() ? 1 : out.rows, unit.is_last() ? 1 : out.cols};
  if (split_halves) {
    r.dx = tp_copy(unit.backward_input(*ctx, p, dy));
    unit.backward_weight(*ctx, p, g);
  } else {
    r.dx = tp_copy(unit.backward(*ctx, p, g, dy));
  }
  return r;
}

// Aborts every attached communicator when a rank fails.
class AbortAll {
 public:
  void attach(Communicator* comm) {
    const std::lock_guard<std::mutex> lock(mu_);
    comms_.push_back(comm);
  }
  void detach(Communicator* comm) {
    const std::lock_guard<std::mutex> lock(mu_);
    comms_.erase(std::remove(comms_.begin(), comms_.end(), comm), comms_.end());
  }
  void abort(const std::string& why) {
    const std::lock_guard<std::mutex> lock(mu_);
    for (Communicator* c : comms_) c->abort(why);
  }

 private:
  std::mutex mu_;
  std::vector<Communicator*> comms_;
};

// Sums the ranks' gradients of a replicated parameter (sequence
// parallelism leaves each rank its rows' part).
std::vector<float> summed(const std::vector<const std::vector<float>*>& parts) {
  std::vector<float> total(parts.front()->size(), 0.0f);
  for (const auto* part : parts) {
    for (std::size_t i = 0; i < total.size(); ++i) total[i] += (*part)[i];
  }
  return total;
}

// Examples and rows per example of sequence parallelism's row split.
std::pair<int64_t, int64_t> row_groups(const Batch& batch) {
  return batch.is_sequence() ? std::pair<int64_t, int64_t>{batch.size, batch.seq_len}
                             : std::pair<int64_t, int64_t>{1, batch.size};
}

}  // namespace

std::vector<float> row_slice(const Batch& batch, std::span<const float> whole, int64_t width,
                             int rank, int size) {
  const auto [examples, rows] = row_groups(batch);
  const int64_t part = rows / size;
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(examples * part * width));
  for (int64_t e = 0; e < examples; ++e) {
    const float* from = whole.data() + (e * rows + rank * part) * width;
    out.insert(out.end(), from, from + part * width);
  }
  return out;
}

std::vector<float> join_row_slices(const Batch& batch,
                                   const std::vector<std::vector<float>>& slices, int64_t width) {
  const auto [examples, rows] = row_groups(batch);
  const auto size = static_cast<int64_t>(slices.size());
  const int64_t part = rows / size;
  std::vector<float> whole(static_cast<std::size_t>(examples * rows * width));
  for (int64_t k = 0; k < size; ++k) {
    for (int64_t e = 0; e < examples; ++e) {
      const float* from = slices[static_cast<std::size_t>(k)].data() + e * part * width;
      std::copy(from, from + part * width, whole.data() + (e * rows + k * part) * width);
    }
  }
  return whole;
}

ConstantParams constant_params(const Unit& unit, int size, float value) {
  ConstantParams c;
  for (const ParamSpec& s : unit.params()) {
    c.values.emplace_back(held_whole(s, size) ? s.numel() : s.numel() / size, value);
  }
  for (const auto& v : c.values) c.ptrs.push_back(v.data());
  return c;
}

ConstView forward_in_group(const Unit& unit, UnitContext& ctx, std::span<const float* const> params,
                           const BatchView& batch, const tessera_tp_group& group,
                           std::span<const float> x, int64_t rows) {
  ctx.set_tp(&group);
  UnitInput in;
  in.batch = &batch;
  in.tp = &group;
  if (!x.empty()) in.x = {x.data(), rows, static_cast<int64_t>(x.size()) / rows};
  return unit.forward(ctx, params, in);
}

ContextBytes model_context_bytes(std::span<const std::unique_ptr<Unit>> units, const Batch& batch,
                                 int tp, bool sequence) {
  const BatchView view = tessera::test::view_of(batch);
  ContextBytes result;
  result.context.assign(units.size(), 0);
  result.output.assign(units.size(), 0);
  run_tp_ranks(
      tp,
      [&](int rank, const tessera_tp_group& group) {
        std::vector<std::unique_ptr<UnitContext>> ctx;
        std::vector<ConstantParams> params;
        std::vector<ConstantParams> grads;
        std::vector<float> x;
        int64_t rows = 0;
        for (const auto& unit : units) {
          ctx.push_back(unit->make_context());
          params.push_back(constant_params(*unit, tp, 0.01f));
          grads.push_back(constant_params(*unit, tp, 0.0f));
          const ConstView out =
              forward_in_group(*unit, *ctx.back(), params.back().ptrs, view, group, x, rows);
          if (rank == 0 && !unit->is_last()) {
            result.output[ctx.size() - 1] = out.rows * out.cols * 4;
          }
          x.assign(out.data, out.data + out.rows * out.cols);
          rows = out.rows;
        }
        std::vector<float> grad;
        ConstView g;
        for (std::size_t u = units.size(); u-- > 0;) {
          std::vector<float*> gp;
          for (auto& v : grads[u].values) gp.push_back(v.data());
          const ConstView dx = units[u]->backward(*ctx[u], params[u].ptrs, gp, g);
          grad.assign(dx.data, dx.data + dx.rows * dx.cols);
          g = dx.data == nullptr ? ConstView{} : ConstView{grad.data(), dx.rows, dx.cols};
          if (rank == 0) result.context[u] = static_cast<int64_t>(ctx[u]->bytes());
        }
      },
      sequence ? static_cast<uint32_t>(TESSERA_TP_SEQUENCE) : 0U);
  return result;
}

void run_tp_ranks(int size, const std::function<void(int rank, const tessera_tp_group& tp)>& body,
                  uint32_t flags) {
  BackendSettings settings;
  settings.world_size = size;
  settings.timeout = std::chrono::milliseconds(20000);
  const auto backend =
      open_backend(tessera::test::model_plugins(), "inmemory", nullptr, "test", settings);
  AbortAll board;
  run_rank_threads(
      size,
      [&](int rank) {
        const ThreadRankGuard guard(rank);
        const std::unique_ptr<Communicator> comm = backend->connect(rank);
        board.attach(comm.get());
        struct Detach {
          AbortAll& b;
          Communicator* c;
          ~Detach() { b.detach(c); }
        } const detach{board, comm.get()};
        tessera_tp_group tp{};
        tp.struct_size = sizeof tp;
        tp.rank = rank;
        tp.size = size;
        tp.flags = flags;
        tp.backend = comm->c_api();
        tp.comm = comm->c_handle();
        body(rank, tp);
      },
      [&](int rank, const std::string& message) {
        board.abort("rank " + std::to_string(rank) + " failed: " + message);
      });
}

void expect_unit_tp_matches(const Unit& unit, const Batch& batch, int64_t input_cols, int tp,
                            uint64_t seed, bool split_halves, bool sequence) {
  SCOPED_TRACE("unit '" + unit.name() + "', tp = " + std::to_string(tp) +
               (split_halves ? ", split halves" : "") + (sequence ? ", sequence" : ""));
  EXPECT_NE(unit.flags() & TESSERA_UNIT_TENSOR_PARALLEL, 0u);
  if (sequence) {
    EXPECT_NE(unit.flags() & TESSERA_UNIT_SEQUENCE_PARALLEL, 0u);
  }
  const UnitCase c = make_case(unit, batch, input_cols, seed);
  const uint64_t grad_seed = seed + 1000;
  const UnitResult want = run_unit(unit, c, input_cols, c.params, nullptr, false, grad_seed);
  const auto specs = unit.params();

  std::vector<UnitResult> got(static_cast<std::size_t>(tp));
  run_tp_ranks(
      tp,
      [&](int rank, const tessera_tp_group& group) {
        std::vector<std::vector<float>> shards;
        for (std::size_t i = 0; i < specs.size(); ++i) {
          shards.push_back(shard_of(specs[i], c.params[i], rank, tp));
        }
        RowSlicer slice;
        if (sequence) {
          slice = [&batch, rank, tp](std::span<const float> whole, int64_t width) {
            return row_slice(batch, whole, width, rank, tp);
          };
        }
        got[static_cast<std::size_t>(rank)] =
            run_unit(unit, c, input_cols, shards, &group, split_halves, grad_seed, slice);
      },
      sequence ? static_cast<uint32_t>(TESSERA_TP_SEQUENCE) : 0U);

  for (int rank = 0; rank < tp; ++rank) {
    const UnitResult& r = got[static_cast<std::size_t>(rank)];
    const std::string where = "rank " + std::to_string(rank) + ": ";
    const auto want_of = [&](const std::vector<float>& whole, int64_t width) {
      return sequence ? row_slice(batch, whole, width, rank, tp) : whole;
    };
    const int64_t out_cols = unit.is_last() ? 1 : static_cast<int64_t>(want.out.size()) / c.rows;
    expect_near_rel(r.out, unit.is_last() ? want.out : want_of(want.out, out_cols),
                    where + "output");
    expect_near_rel(r.dx, unit.is_first() ? want.dx : want_of(want.dx, input_cols),
                    where + "input gradient");
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string what = "gradient of " + specs[i].name;
    if (held_whole(specs[i], tp) && sequence) {
      std::vector<const std::vector<float>*> parts;
      for (const UnitResult& r : got) parts.push_back(&r.grads[i]);
      expect_near_rel(summed(parts), want.grads[i], what + " (replicated, summed over ranks)");
      continue;
    }
    if (held_whole(specs[i], tp)) {
      for (int rank = 0; rank < tp; ++rank) {
        expect_near_rel(got[static_cast<std::size_t>(rank)].grads[i], want.grads[i],
                        "rank " + std::to_string(rank) + ": " + what + " (replicated)");
      }
      continue;
    }
    std::vector<float> whole(want.grads[i].size(), 0.0f);
    for (int rank = 0; rank < tp; ++rank) {
      place_shard(specs[i], got[static_cast<std::size_t>(rank)].grads[i], whole, rank, tp);
    }
    expect_near_rel(whole, want.grads[i], what + " (reassembled)");
  }
}

void expect_model_tp_matches(std::span<const std::unique_ptr<Unit>> units, const Batch& batch,
                             int tp, uint64_t seed, const tessera::model::Model* plugin,
                             bool sequence) {
  SCOPED_TRACE("whole model, tp = " + std::to_string(tp) +
               (plugin != nullptr ? ", ranks through the plugin's table" : "") +
               (sequence ? ", sequence" : ""));
  if (plugin != nullptr) {
    ASSERT_EQ(plugin->size(), units.size());
  }
  // Owned parameters (whole) and where each slot's storage is.
  std::vector<std::vector<std::vector<float>>> whole(units.size());
  std::vector<std::vector<std::pair<std::size_t, std::size_t>>> owner(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    const auto specs = units[u]->params();
    for (std::size_t j = 0; j < specs.size(); ++j) {
      std::vector<float> p;
      std::pair<std::size_t, std::size_t> o{u, j};
      if (specs[j].tied_to.empty()) {
        p = random_values(specs[j].numel(), 0.4f, seed++);
        if (specs[j].name.size() > 2 && specs[j].name.substr(specs[j].name.size() - 2) == "_g") {
          for (float& v : p) v += 1.0f;
        }
      } else {
        const std::string& t = specs[j].tied_to;
        const std::string unit_name = t.substr(0, t.find('.'));
        const std::string param_name = t.substr(t.find('.') + 1);
        for (std::size_t k = 0; k < units.size(); ++k) {
          if (units[k]->name() != unit_name) continue;
          for (std::size_t m = 0; m < units[k]->params().size(); ++m) {
            if (units[k]->params()[m].name == param_name) o = {k, m};
          }
        }
        EXPECT_NE(o.first, u) << "tie of " << specs[j].name << " not found";
      }
      whole[u].push_back(std::move(p));
      owner[u].push_back(o);
    }
  }
  const BatchView view = tessera::test::view_of(batch);

  // One pass over the model with `params` (owned slots; tied ones empty)
  // and group `group`, by calling the units or `table`'s C functions: the
  // loss and the owned slots' gradients.
  const auto run_model = [&](const std::vector<std::vector<std::vector<float>>>& params,
                             const tessera_tp_group* group, const tessera::model::Model* table,
                             std::vector<std::vector<std::vector<float>>>& grads) {
    grads.assign(units.size(), {});
    for (std::size_t u = 0; u < units.size(); ++u) {
      for (const auto& p : params[u]) grads[u].emplace_back(p.size(), 0.0f);
    }
    const auto slots = [&](std::size_t u, auto& store) {
      using Ptr = decltype(store[0][0].data());
      std::vector<Ptr> out;
      for (std::size_t j = 0; j < owner[u].size(); ++j) {
        out.push_back(store[owner[u][j].first][owner[u][j].second].data());
      }
      return out;
    };
    std::vector<std::unique_ptr<UnitContext>> ctx;
    std::vector<tessera::model::Model::Context> table_ctx;
    const auto check = [](tessera_status status, const char* what) {
      throw_if_failed(status, what);  // with the plugin's message
    };
    ConstView x;
    float loss = 0.0f;
    for (std::size_t u = 0; u < units.size(); ++u) {
      const std::vector<const float*> p = slots(u, params);
      if (table != nullptr) {
        table_ctx.push_back(table->make_context(u));
        tessera_unit_call call{};
        call.struct_size = sizeof call;
        call.loss_scale = 0.5f;
        call.batch = reinterpret_cast<const tessera_batch*>(&batch);
        call.params = p.data();
        call.tp = group;
        tessera_matrix out{};
        check(table->api()->forward(table->handle(), static_cast<int32_t>(u),
                                    table_ctx.back().raw(), &call, {x.data, x.rows, x.cols}, &out),
              "forward");
        x = {out.data, out.rows, out.cols};
      } else {
        ctx.push_back(units[u]->make_context());
        ctx.back()->set_tp(group);
        UnitInput in;
        in.batch = &view;
        in.loss_scale = 0.5f;
        in.tp = group;
        in.x = x;
        x = units[u]->forward(*ctx.back(), p, in);
      }
      if (units[u]->is_last()) loss = x.data[0];
    }
    ConstView dy;
    for (std::size_t u = units.size(); u-- > 0;) {
      const std::vector<const float*> p = slots(u, params);
      const std::vector<float*> g = slots(u, grads);
      if (table != nullptr) {
        tessera_unit_call call{};
        call.struct_size = sizeof call;
        call.loss_scale = 0.5f;
        call.params = p.data();
        call.grads = g.data();
        call.tp = group;
        tessera_matrix grad_in{};
        check(table->api()->backward(table->handle(), static_cast<int32_t>(u), table_ctx[u].raw(),
                                     &call, {dy.data, dy.rows, dy.cols}, &grad_in),
              "backward");
        dy = {grad_in.data, grad_in.rows, grad_in.cols};
      } else {
        dy = units[u]->backward(*ctx[u], p, g, dy);
      }
    }
    return loss;
  };

  std::vector<std::vector<std::vector<float>>> want_grads;
  const float want_loss = run_model(whole, nullptr, nullptr, want_grads);

  std::vector<float> losses(static_cast<std::size_t>(tp));
  std::vector<std::vector<std::vector<std::vector<float>>>> got(static_cast<std::size_t>(tp));
  run_tp_ranks(
      tp,
      [&](int rank, const tessera_tp_group& group) {
        std::vector<std::vector<std::vector<float>>> shards(units.size());
        for (std::size_t u = 0; u < units.size(); ++u) {
          const auto specs = units[u]->params();
          for (std::size_t j = 0; j < specs.size(); ++j) {
            // A tied slot has no storage of its own: it reads its owner's shard.
            shards[u].push_back(specs[j].tied_to.empty() ? shard_of(specs[j], whole[u][j], rank, tp)
                                                         : std::vector<float>());
          }
        }
        const auto r = static_cast<std::size_t>(rank);
        losses[r] = run_model(shards, &group, plugin, got[r]);
      },
      sequence ? static_cast<uint32_t>(TESSERA_TP_SEQUENCE) : 0U);

  for (int rank = 0; rank < tp; ++rank) {
    EXPECT_NEAR(losses[static_cast<std::size_t>(rank)], want_loss, 1e-5 * std::abs(want_loss))
        << "rank " << rank << ": loss";
  }
  for (std::size_t u = 0; u < units.size(); ++u) {
    const auto specs = units[u]->params();
    for (std::size_t j = 0; j < specs.size(); ++j) {
      if (!specs[j].tied_to.empty()) continue;
      const std::string what = "gradient of " + units[u]->name() + "." + specs[j].name;
      if (held_whole(specs[j], tp) && sequence) {
        std::vector<const std::vector<float>*> parts;
        for (const auto& r : got) parts.push_back(&r[u][j]);
        expect_near_rel(summed(parts), want_grads[u][j], what + " (replicated, summed over ranks)");
        continue;
      }
      if (held_whole(specs[j], tp)) {
        for (int rank = 0; rank < tp; ++rank) {
          expect_near_rel(got[static_cast<std::size_t>(rank)][u][j], want_grads[u][j],
                          "rank " + std::to_string(rank) + ": " + what + " (replicated)");
        }
        continue;
      }
      std::vector<float> assembled(want_grads[u][j].size(), 0.0f);
      for (int rank = 0; rank < tp; ++rank) {
        place_shard(specs[j], got[static_cast<std::size_t>(rank)][u][j], assembled, rank, tp);
      }
      expect_near_rel(assembled, want_grads[u][j], what + " (reassembled)");
    }
  }
}

void expect_tp_one_is_identical(const Unit& unit, const Batch& batch, int64_t input_cols,
                                uint64_t seed) {
  SCOPED_TRACE("unit '" + unit.name() + "', a group of one rank");
  const UnitCase c = make_case(unit, batch, input_cols, seed);
  const UnitResult want = run_unit(unit, c, input_cols, c.params, nullptr, false, seed + 1000);
  UnitResult got;
  run_tp_ranks(1, [&](int /*rank*/, const tessera_tp_group& group) {
    got = run_unit(unit, c, input_cols, c.params, &group, false, seed + 1000);
  });
  EXPECT_EQ(got.out, want.out);
  EXPECT_EQ(got.dx, want.dx);
  EXPECT_EQ(got.grads, want.grads);
}

std::string tp_forward_error(const Unit& unit, const Batch& batch, int64_t input_cols, int tp,
                             tessera_status status, uint32_t flags) {
  const UnitCase c = make_case(unit, batch, input_cols, 7);
  std::string message;
  std::mutex mu;
  run_tp_ranks(
      tp,
      [&](int rank, const tessera_tp_group& group) {
        try {
          (void)run_unit(unit, c, input_cols, c.params, &group, false, 8);
          ADD_FAILURE() << "rank " << rank << ": the forward with a group of " << tp
                        << " ranks was accepted";
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), status) << e.what();
          const std::lock_guard<std::mutex> lock(mu);
          if (rank == 0) message = e.what();
        }
      },
      flags);
  return message;
}

}  // namespace tessera::model::testing
