// Finite-difference checks of a unit's backward pass (see fd_check.hpp).
#include "fd_check.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../support/models.hpp"
#include "tessera/sdk/rng.hpp"

namespace tessera::model::testing {
namespace {

// Everything one evaluation of the unit needs.
struct Problem {
  const Unit& unit;
  BatchView batch;
  std::vector<std::vector<float>> params;
  std::vector<float> input;
  int64_t input_cols;
  std::vector<float> projection;  // R (or {r} for the last unit)

  [[nodiscard]] std::vector<const float*> param_ptrs() const {
    std::vector<const float*> out;
    for (const auto& p : params) out.push_back(p.data());
    return out;
  }
  [[nodiscard]] UnitInput unit_input() const {
    UnitInput in;
    in.batch = &batch;
    in.loss_scale = 0.37f;
    if (!unit.is_first()) {
      in.x = {input.data(), static_cast<int64_t>(input.size()) / input_cols, input_cols};
    }
    return in;
  }
  // J for the current parameters and input, in double.
  [[nodiscard]] double objective() const {
    auto ctx = unit.make_context();
    const auto ptrs = param_ptrs();
    const ConstView out = unit.forward(*ctx, ptrs, unit_input());
    double j = 0.0;
    for (int64_t i = 0; i < out.rows * out.cols; ++i) {
      j += static_cast<double>(out.data[i]) * projection[static_cast<std::size_t>(i)];
    }
    return j;
  }
};

double norm(const std::vector<double>& v) {
  double s = 0.0;
  for (const double x : v) s += x * x;
  return std::sqrt(s);
}

// Central differences of J with respect to every element of `values`.
std::vector<double> numeric(Problem& problem, std::vector<float>& values, float eps) {
  std::vector<double> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float saved = values[i];
    values[i] = saved + eps;
    const double plus = problem.objective();
    values[i] = saved - eps;
    const double minus = problem.objective();
    values[i] = saved;
    out[i] = (plus - minus) / (2.0 * static_cast<double>(eps));
  }
  return out;
}

void compare(const std::string& what, const std::vector<double>& analytic,
             const std::vector<double>& fd) {
  ASSERT_EQ(analytic.size(), fd.size()) << what;
  std::vector<double> diff(fd.size());
  for (std::size_t i = 0; i < fd.size(); ++i) diff[i] = analytic[i] - fd[i];
  const double err = norm(diff);
  const double scale = norm(fd);
  EXPECT_GT(scale, 1e-6) << what << ": gradient is zero, the check would prove nothing";
  EXPECT_LE(err, 1e-2 * scale + 1e-4)
      << what << ": analytic and finite-difference gradients differ (|diff| " << err << ", |fd| "
      << scale << ")";
}

}  // namespace

std::vector<float> random_values(int64_t count, float std, uint64_t seed) {
  KeyedRng rng(splitmix64(seed));
  std::vector<float> out(static_cast<std::size_t>(count));
  for (float& v : out) v = static_cast<float>(rng.normal()) * std;
  return out;
}

void expect_gradients_match(const Unit& unit, const Batch& batch, const std::vector<float>& input,
                            int64_t input_cols, float param_std, float eps, uint64_t seed) {
  Problem problem{unit, test::view_of(batch), {}, input, input_cols, {}};
  uint64_t key = seed;
  for (const ParamSpec& spec : unit.params()) {
    problem.params.push_back(random_values(spec.numel(), param_std, ++key));
  }
  // Output shape from one forward.
  int64_t out_count = 0;
  {
    auto ctx = unit.make_context();
    const ConstView out = unit.forward(*ctx, problem.param_ptrs(), problem.unit_input());
    out_count = out.rows * out.cols;
  }
  problem.projection = random_values(out_count, 1.0f, ++key);

  // Analytic gradients: backward with grad_output = R into zeroed buffers,
  // twice into the same buffers to check they accumulate.
  std::vector<std::vector<float>> grads;
  for (const auto& p : problem.params) grads.emplace_back(p.size(), 0.0f);
  std::vector<float*> grad_ptrs;
  for (auto& g : grads) grad_ptrs.push_back(g.data());
  std::vector<double> input_grad;
  for (int pass = 0; pass < 2; ++pass) {
    auto ctx = unit.make_context();
    const ConstView out = unit.forward(*ctx, problem.param_ptrs(), problem.unit_input());
    const ConstView grad_out{problem.projection.data(), out.rows, out.cols};
    const ConstView dx = unit.backward(*ctx, problem.param_ptrs(), grad_ptrs, grad_out);
    if (pass == 0 && !dx.empty()) input_grad.assign(dx.data, dx.data + dx.rows * dx.cols);
    EXPECT_EQ(dx.empty(), unit.is_first()) << unit.name() << ": input gradient presence";
  }

  const auto specs = unit.params();
  for (std::size_t t = 0; t < specs.size(); ++t) {
    std::vector<double> analytic(grads[t].begin(), grads[t].end());
    for (double& a : analytic) a *= 0.5;  // two accumulated passes
    const auto fd = numeric(problem, problem.params[t], eps);
    compare(unit.name() + "." + specs[t].name, analytic, fd);
  }
  if (!unit.is_first()) {
    const auto fd = numeric(problem, problem.input, eps);
    compare(unit.name() + " input", input_grad, fd);
  }
}

}  // namespace tessera::model::testing
