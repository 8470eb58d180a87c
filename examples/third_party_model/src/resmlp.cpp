// The units of resmlp (see resmlp.hpp).
#include "resmlp.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include <tessera/sdk/error.hpp>
#include <tessera/sdk/rng.hpp>

namespace resmlp {
namespace {

using sdk::model::ConstView;
using sdk::model::ParamSpec;
using sdk::model::SplitHint;
using sdk::model::Unit;
using sdk::model::UnitContext;
using sdk::model::UnitCost;
using sdk::model::UnitInput;

// Throws an invalid-argument error naming the unit. (No source location:
// the message is for the user; the adapter adds the model and the call.)
template <typename... Args>
[[noreturn]] void fail(std::string_view unit, Args&&... args) {
  throw tessera::Error(TESSERA_ERR_INVALID_ARGUMENT,
                       tessera::detail::concat("unit '", unit, "': ", std::forward<Args>(args)...));
}

void check_count(std::string_view unit, const char* what, std::size_t got, std::size_t expected) {
  if (got != expected) fail(unit, "expected ", expected, " ", what, " pointers, got ", got);
}

// ---- initialisation --------------------------------------------------------

// FNV-1a of `text`, continuing from `h`.
uint64_t fnv1a(std::string_view text, uint64_t h = 0xCBF29CE484222325ULL) {
  for (const char ch : text) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001B3ULL;
  }
  return h;
}

// Normal(0, std²) values from a stream keyed by the seed, the unit's name and
// the parameter's name: a pure function of the three.
void fill_normal(float* out, int64_t count, double std, uint64_t seed, std::string_view unit,
                 std::string_view param) {
  const uint64_t key = fnv1a(param, fnv1a(".", fnv1a(unit)));
  tessera::KeyedRng rng(tessera::splitmix64(seed) ^ key);
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(std * rng.normal());
}

// ---- arithmetic (row-major, double accumulators) ---------------------------

// y[n, out] = x[n, in]·w[in, out] + b[out].
void linear_forward(const float* x, const float* w, const float* b, int64_t n, int64_t in,
                    int64_t out, float* y) {
  std::vector<double> buffer(static_cast<std::size_t>(out));
  double* acc = buffer.data();
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < out; ++o) acc[o] = b[o];
    for (int64_t i = 0; i < in; ++i) {
      const double xi = x[r * in + i];
      const float* wi = w + i * out;
      for (int64_t o = 0; o < out; ++o) acc[o] += xi * wi[o];
    }
    for (int64_t o = 0; o < out; ++o) y[r * out + o] = static_cast<float>(acc[o]);
  }
}

// For y = x·w + b with output gradient dy: dw += xᵀ·dy, db += Σ_rows dy and,
// unless dx is null, dx = dy·wᵀ.
void linear_backward(const float* x, const float* w, const float* dy, int64_t n, int64_t in,
                     int64_t out, float* dw, float* db, float* dx) {
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      double s = 0.0;
      for (int64_t r = 0; r < n; ++r) s += static_cast<double>(x[r * in + i]) * dy[r * out + o];
      dw[i * out + o] += static_cast<float>(s);
    }
  }
  for (int64_t o = 0; o < out; ++o) {
    double s = 0.0;
    for (int64_t r = 0; r < n; ++r) s += dy[r * out + o];
    db[o] += static_cast<float>(s);
  }
  if (dx == nullptr) return;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < in; ++i) {
      const float* wi = w + i * out;
      double s = 0.0;
      for (int64_t o = 0; o < out; ++o) s += static_cast<double>(dy[r * out + o]) * wi[o];
      dx[r * in + i] = static_cast<float>(s);
    }
  }
}

std::size_t bytes_of(std::initializer_list<const std::vector<float>*> buffers) {
  std::size_t total = 0;
  for (const auto* b : buffers) total += b->capacity() * sizeof(float);
  return total;
}

// The rows of the previous unit's output, checked against the width.
int64_t input_rows(std::string_view unit, const ConstView& x, int64_t width) {
  if (x.empty() || x.cols != width || x.rows < 0) {
    fail(unit, "input is ", x.rows, "x", x.cols, ", expected ", width, " columns");
  }
  return x.rows;
}

// ---- proj: h = x·Wp + bp ---------------------------------------------------

struct ProjContext final : UnitContext {
  int64_t rows = -1;
  std::vector<float> x, y;
  [[nodiscard]] std::size_t bytes() const noexcept override { return bytes_of({&x, &y}); }
};

class Proj final : public Unit {
 public:
  Proj(int64_t input, int64_t width) : Unit("proj", true, false), in_(input), out_(width) {
    specs_.push_back({"w", {in_, out_}, SplitHint::column, {}});
    specs_.push_back({"b", {out_}, SplitHint::column, {}});
  }

  [[nodiscard]] UnitCost cost() const override {
    const double gemm = 2.0 * static_cast<double>(in_ * out_);
    // Backward: the weight gradient only (the first unit has no input gradient).
    return {gemm, gemm, static_cast<double>(in_) * sizeof(float)};
  }

  void init(std::span<float* const> params, uint64_t seed) const override {
    check_count(name_, "parameter", params.size(), specs_.size());
    fill_normal(params[0], in_ * out_, 1.0 / std::sqrt(static_cast<double>(in_)), seed, name_, "w");
    std::fill_n(params[1], out_, 0.0f);
  }

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override {
    return std::make_unique<ProjContext>();
  }

  ConstView forward(UnitContext& base, std::span<const float* const> params,
                    const UnitInput& input) const override {
    check_count(name_, "parameter", params.size(), specs_.size());
    auto& ctx = dynamic_cast<ProjContext&>(base);
    ctx.rows = -1;  // until this forward succeeds
    const sdk::model::BatchView* batch = input.batch;
    if (batch == nullptr || batch->is_sequence() || batch->features != in_ ||
        static_cast<int64_t>(batch->inputs.size()) != batch->size * in_) {
      fail(name_, "needs a feature batch with ", in_, " features per example");
    }
    const int64_t n = batch->size;
    ctx.x.assign(batch->inputs.begin(), batch->inputs.end());
    ctx.y.resize(static_cast<std::size_t>(n * out_));
    linear_forward(ctx.x.data(), params[0], params[1], n, in_, out_, ctx.y.data());
    ctx.rows = n;
    return {ctx.y.data(), n, out_};
  }

  ConstView backward(UnitContext& base, std::span<const float* const> params,
                     std::span<float* const> grads, ConstView grad_output) const override {
    check_count(name_, "parameter", params.size(), specs_.size());
    check_count(name_, "gradient", grads.size(), specs_.size());
    auto& ctx = dynamic_cast<ProjContext&>(base);
    if (ctx.rows < 0) fail(name_, "backward without a forward on this context");
    if (grad_output.empty() || grad_output.rows != ctx.rows || grad_output.cols != out_) {
      fail(name_, "output gradient is ", grad_output.rows, "x", grad_output.cols, ", expected ",
           ctx.rows, "x", out_);
    }
    linear_backward(ctx.x.data(), params[0], grad_output.data, ctx.rows, in_, out_, grads[0],
                    grads[1], nullptr);
    return {};
  }

 private:
  int64_t in_;
  int64_t out_;
};

// ---- block: h + relu(h·W1 + b1)·W2 + b2 ------------------------------------

struct BlockContext final : UnitContext {
  int64_t rows = -1;
  std::vector<float> x, z, a, y, da, dx;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return bytes_of({&x, &z, &a, &y, &da, &dx});
  }
};

class Block final : public Unit {
 public:
  Block(std::string name, int64_t width, int64_t hidden, double residual_init)
      : Unit(std::move(name), false, false),
        width_(width),
        hidden_(hidden),
        residual_init_(residual_init) {
    // Tensor-parallel hints in the usual pairing: W1 by its output features
    // (with b1), W2 by its input features, b2 whole on every rank.
    specs_.push_back({"w1", {width_, hidden_}, SplitHint::column, {}});
    specs_.push_back({"b1", {hidden_}, SplitHint::column, {}});
    specs_.push_back({"w2", {hidden_, width_}, SplitHint::row, {}});
    specs_.push_back({"b2", {width_}, SplitHint::none, {}});
  }

  [[nodiscard]] UnitCost cost() const override {
    const double gemms = 2.0 * 2.0 * static_cast<double>(width_ * hidden_);
    // Backward: weight and input gradients of both GEMMs.
    const double saved = static_cast<double>(width_ + 2 * hidden_) * sizeof(float);  // x, z, a
    return {gemms, 2.0 * gemms, saved};
  }

  void init(std::span<float* const> params, uint64_t seed) const override {
    check_count(name_, "parameter", params.size(), specs_.size());
    const auto w = static_cast<double>(width_);
    const auto h = static_cast<double>(hidden_);
    fill_normal(params[0], width_ * hidden_, std::sqrt(2.0 / w), seed, name_, "w1");  // He
    std::fill_n(params[1], hidden_, 0.0f);
    fill_normal(params[2], hidden_ * width_, residual_init_ / std::sqrt(h), seed, name_, "w2");
    std::fill_n(params[3], width_, 0.0f);
  }

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override {
    return std::make_unique<BlockContext>();
  }

  ConstView forward(UnitContext& base, std::span<const float* const> params,
                    const UnitInput& input) const override {
    check_count(name_, "parameter", params.size(), specs_.size());
    auto& ctx = dynamic_cast<BlockContext&>(base);
    ctx.rows = -1;  // until this forward succeeds
    const int64_t n = input_rows(name_, input.x, width_);
    ctx.x.assign(input.x.data, input.x.data + n * width_);
    ctx.z.resize(static_cast<std::size_t>(n * hidden_));
    ctx.a.resize(ctx.z.size());
    ctx.y.resize(ctx.x.size());
    linear_forward(ctx.x.data(), params[0], params[1], n, width_, hidden_, ctx.z.data());
    for (std::size_t i = 0; i < ctx.z.size(); ++i) ctx.a[i] = std::max(ctx.z[i], 0.0f);
    linear_forward(ctx.a.data(), params[2], params[3], n, hidden_, width_, ctx.y.data());
    for (std::size_t i = 0; i < ctx.y.size(); ++i) ctx.y[i] += ctx.x[i];
    ctx.rows = n;
    return {ctx.y.data(), n, width_};
  }

  ConstView backward(UnitContext& base, std::span<const float* const> params,
                     std::span<float* const> grads, ConstView grad_output) const override {
    check_count(name_, "parameter", params.size(), specs_.size());
    check_count(name_, "gradient", grads.size(), specs_.size());
    auto& ctx = dynamic_cast<BlockContext&>(base);
    if (ctx.rows < 0) fail(name_, "backward without a forward on this context");
    const int64_t n = ctx.rows;
    if (grad_output.empty() || grad_output.rows != n || grad_output.cols != width_) {
      fail(name_, "output gradient is ", grad_output.rows, "x", grad_output.cols, ", expected ", n,
           "x", width_);
    }
    const float* dy = grad_output.data;
    // Second linear: dW2 += aᵀ·dy, db2 += Σ dy, da = dy·W2ᵀ; then through relu.
    ctx.da.resize(static_cast<std::size_t>(n * hidden_));
    linear_backward(ctx.a.data(), params[2], dy, n, hidden_, width_, grads[2], grads[3],
                    ctx.da.data());
    for (std::size_t i = 0; i < ctx.da.size(); ++i) {
      if (!(ctx.z[i] > 0.0f)) ctx.da[i] = 0.0f;
    }
    // First linear: dW1 += xᵀ·dz, db1 += Σ dz, dx = dz·W1ᵀ; plus the skip path.
    ctx.dx.resize(static_cast<std::size_t>(n * width_));
    linear_backward(ctx.x.data(), params[0], ctx.da.data(), n, width_, hidden_, grads[0], grads[1],
                    ctx.dx.data());
    for (std::size_t i = 0; i < ctx.dx.size(); ++i) ctx.dx[i] += dy[i];
    return {ctx.dx.data(), n, width_};
  }

 private:
  int64_t width_;
  int64_t hidden_;
  double residual_init_;
};

// ---- head: softmax cross-entropy -------------------------------------------

struct HeadContext final : UnitContext {
  int64_t rows = -1;
  float scale = 1.0f;
  float loss = 0.0f;
  std::vector<int32_t> targets;
  std::vector<float> x, probs, dlogits, dx;
  [[nodiscard]] std::size_t bytes() const noexcept override {
    return bytes_of({&x, &probs, &dlogits, &dx}) + targets.capacity() * sizeof(int32_t);
  }
};

class Head final : public Unit {
 public:
  Head(int64_t width, int64_t classes) : Unit("head", false, true), in_(width), classes_(classes) {
    specs_.push_back({"w", {in_, classes_}, SplitHint::column, {}});
    specs_.push_back({"b", {classes_}, SplitHint::column, {}});
  }

  [[nodiscard]] UnitCost cost() const override {
    const double gemm = 2.0 * static_cast<double>(in_ * classes_);
    const double softmax = 5.0 * static_cast<double>(classes_);
    const double saved = static_cast<double>(in_ + classes_) * sizeof(float);  // x, probs
    return {gemm + softmax, 2.0 * gemm + static_cast<double>(classes_), saved};
  }

  void init(std::span<float* const> params, uint64_t seed) const override {
    check_count(name_, "parameter", params.size(), specs_.size());
    fill_normal(params[0], in_ * classes_, 1.0 / std::sqrt(static_cast<double>(in_)), seed, name_,
                "w");
    std::fill_n(params[1], classes_, 0.0f);
  }

  [[nodiscard]] std::unique_ptr<UnitContext> make_context() const override {
    return std::make_unique<HeadContext>();
  }

  ConstView forward(UnitContext& base, std::span<const float* const> params,
                    const UnitInput& input) const override {
    check_count(name_, "parameter", params.size(), specs_.size());
    auto& ctx = dynamic_cast<HeadContext&>(base);
    ctx.rows = -1;  // until this forward succeeds
    const int64_t n = input_rows(name_, input.x, in_);
    const sdk::model::BatchView* batch = input.batch;
    if (batch == nullptr || batch->is_sequence() ||
        static_cast<int64_t>(batch->targets.size()) != n) {
      fail(name_, "needs a feature batch with one target per row (", n, " rows)");
    }
    ctx.x.assign(input.x.data, input.x.data + n * in_);
    ctx.targets.assign(batch->targets.begin(), batch->targets.end());
    ctx.probs.resize(static_cast<std::size_t>(n * classes_));
    linear_forward(ctx.x.data(), params[0], params[1], n, in_, classes_, ctx.probs.data());
    // Per row: loss = log Σ exp(logit) - logit[target]; probs = softmax.
    double loss = 0.0;
    for (int64_t r = 0; r < n; ++r) {
      const int32_t t = ctx.targets[static_cast<std::size_t>(r)];
      if (t < 0 || t >= classes_) {
        fail(name_, "target ", t, " of row ", r, " is outside [0, ", classes_, ")");
      }
      float* p = ctx.probs.data() + r * classes_;
      const double top = *std::max_element(p, p + classes_);
      const double target_logit = p[t];
      double sum = 0.0;
      for (int64_t c = 0; c < classes_; ++c) sum += std::exp(p[c] - top);
      for (int64_t c = 0; c < classes_; ++c) p[c] = static_cast<float>(std::exp(p[c] - top) / sum);
      loss += std::log(sum) + top - target_logit;
    }
    ctx.rows = n;
    ctx.scale = input.loss_scale;
    ctx.loss = static_cast<float>(loss * input.loss_scale);
    return {&ctx.loss, 1, 1};
  }

  ConstView backward(UnitContext& base, std::span<const float* const> params,
                     std::span<float* const> grads, ConstView grad_output) const override {
    check_count(name_, "parameter", params.size(), specs_.size());
    check_count(name_, "gradient", grads.size(), specs_.size());
    auto& ctx = dynamic_cast<HeadContext&>(base);
    if (ctx.rows < 0) fail(name_, "backward without a forward on this context");
    const int64_t n = ctx.rows;
    // d(objective)/d(logit) = (softmax - onehot(target)) × loss_scale × g.
    const float g = grad_output.empty() ? 1.0f : grad_output.data[0];
    const float scale = ctx.scale * g;
    ctx.dlogits.resize(ctx.probs.size());
    for (int64_t r = 0; r < n; ++r) {
      const float* p = ctx.probs.data() + r * classes_;
      float* d = ctx.dlogits.data() + r * classes_;
      for (int64_t c = 0; c < classes_; ++c) d[c] = p[c] * scale;
      d[ctx.targets[static_cast<std::size_t>(r)]] -= scale;
    }
    ctx.dx.resize(static_cast<std::size_t>(n * in_));
    linear_backward(ctx.x.data(), params[0], ctx.dlogits.data(), n, in_, classes_, grads[0],
                    grads[1], ctx.dx.data());
    return {ctx.dx.data(), n, in_};
  }

 private:
  int64_t in_;
  int64_t classes_;
};

[[noreturn]] void bad_key(std::string_view key, const std::string& what) {
  throw tessera::Error(TESSERA_ERR_INVALID_ARGUMENT,
                       tessera::detail::concat("key '", key, "' ", what));
}

}  // namespace

void check_config(const Config& config) {
  if (config.input < 1)
    bad_key("input", tessera::detail::concat("must be >= 1, got ", config.input));
  if (config.width < 1)
    bad_key("width", tessera::detail::concat("must be >= 1, got ", config.width));
  for (std::size_t i = 0; i < config.hidden.size(); ++i) {
    if (config.hidden[i] < 1) {
      bad_key("hidden",
              tessera::detail::concat("item ", i, " must be >= 1, got ", config.hidden[i]));
    }
  }
  if (config.classes < 2) {
    bad_key("classes", tessera::detail::concat("must be >= 2, got ", config.classes));
  }
  if (!std::isfinite(config.residual_init) || config.residual_init < 0.0) {
    bad_key("residual_init",
            tessera::detail::concat("must be >= 0 and finite, got ", config.residual_init));
  }
}

std::vector<std::unique_ptr<Unit>> build_units(const Config& config) {
  check_config(config);
  std::vector<std::unique_ptr<Unit>> units;
  units.push_back(std::make_unique<Proj>(config.input, config.width));
  for (std::size_t i = 0; i < config.hidden.size(); ++i) {
    units.push_back(std::make_unique<Block>("block" + std::to_string(i), config.width,
                                            config.hidden[i], config.residual_init));
  }
  units.push_back(std::make_unique<Head>(config.width, config.classes));
  return units;
}

}  // namespace resmlp
