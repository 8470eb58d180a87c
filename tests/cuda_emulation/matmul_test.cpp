// The CUDA units' products (gemm in plugins/models/common/cuda/
// device_support.hpp) on the emulated cuBLASLt and cuBLAS: every
// transpose, epilogue, residual and accumulation the units use, through
// cuBLASLt's fused epilogues and, where it finds no algorithm, through
// cuBLAS and the units' kernels, against a direct evaluation in double;
// operands of every alignment (the emulated cuBLASLt refuses an operand
// less aligned than its heuristic was told); a kept plan reused with
// other pointers; and a product refused at the call.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda_host.hpp"
#include "device_support.hpp"

namespace tessera::model::cuda {
namespace {

// `count` floats of emulated managed memory starting `offset` floats into
// the allocation (offset 1: 4-byte aligned only).
class Managed {
 public:
  Managed(size_t count, size_t offset, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    EXPECT_EQ(cudaMallocManaged(&base_, (count + offset) * sizeof(float)), cudaSuccess);
    data_ = base_ + offset;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (size_t i = 0; i < count; ++i) data_[i] = dist(rng);
  }
  Managed(const Managed&) = delete;
  Managed& operator=(const Managed&) = delete;
  ~Managed() { (void)cudaFree(base_); }
  [[nodiscard]] float* get() const noexcept { return data_; }
  float& operator[](size_t i) const noexcept { return data_[i]; }

 private:
  float* base_ = nullptr;
  float* data_ = nullptr;
};

constexpr double kSqrtTwoOverPi = 0.7978845608028654;  // sqrt(2/pi)
double exact_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(kSqrtTwoOverPi * (x + 0.044715 * x * x * x)));
}
double exact_gelu_derivative(double x) {
  const double t = std::tanh(kSqrtTwoOverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * kSqrtTwoOverPi * (1.0 + 3.0 * 0.044715 * x * x);
}

struct Product {
  bool trans_a = false;
  bool trans_b = false;
  Fused kind = Fused::none;
  bool residual = false;
  bool accumulate = false;  // beta 1 into C
};

std::string describe(const Product& p, int64_t n, uintptr_t offset) {
  return "trans_a " + std::to_string(static_cast<int>(p.trans_a)) + " trans_b " +
         std::to_string(static_cast<int>(p.trans_b)) + " epilogue " +
         std::to_string(static_cast<int>(p.kind)) + " residual " +
         std::to_string(static_cast<int>(p.residual)) + " accumulate " +
         std::to_string(static_cast<int>(p.accumulate)) + " n " + std::to_string(n) + " offset " +
         std::to_string(offset);
}

// The operands of a product [m, n] over k, `offset` floats into their
// allocations, random; the GELU input in [-2, 2].
struct ProductArrays {
  ProductArrays(int64_t m, int64_t n, int64_t k, size_t offset, uint32_t seed)
      : a(static_cast<size_t>(m * k), offset, seed),
        b(static_cast<size_t>(k * n), offset, seed + 1),
        c(static_cast<size_t>(m * n), offset, seed + 2),
        bias(static_cast<size_t>(n), offset, seed + 3),
        residual(static_cast<size_t>(m * n), offset, seed + 4),
        aux(static_cast<size_t>(m * n), offset, seed + 5, -2.0f, 2.0f) {}
  Managed a, b, c, bias, residual, aux;
};

void check_product(Lane& l, const Product& p, int64_t m, int64_t n, int64_t k,
                   const ProductArrays& operands);

// Runs `p` as the units do, row-major C[m, n] = op(A)·op(B) (A [m, k] or
// its transpose, B [k, n] or its transpose), and checks C (and the GELU's
// input for gelu_bias) against the direct evaluation.
void check_product(Lane& l, const Product& p, int64_t m, int64_t n, int64_t k, size_t offset) {
  const ProductArrays arrays(m, n, k, offset, 1);
  check_product(l, p, m, n, k, arrays);
}

void check_product(Lane& l, const Product& p, int64_t m, int64_t n, int64_t k,
                   const ProductArrays& operands) {
  SCOPED_TRACE(describe(p, n, reinterpret_cast<uintptr_t>(operands.a.get()) % 16 / 4));
  const auto um = static_cast<size_t>(m);
  const auto un = static_cast<size_t>(n);
  const auto uk = static_cast<size_t>(k);
  const Managed& a = operands.a;
  const Managed& b = operands.b;
  const Managed& c = operands.c;
  const Managed& bias = operands.bias;
  const Managed& residual = operands.residual;
  const Managed& aux = operands.aux;
  std::vector<float> c_before(c.get(), c.get() + um * un);
  std::vector<float> aux_before(aux.get(), aux.get() + um * un);
  const bool biased = p.kind == Fused::bias || p.kind == Fused::gelu_bias;
  const Epilogue e{
      .kind = p.kind,
      .bias = biased ? bias.get() : nullptr,
      .aux = p.kind == Fused::gelu_bias || p.kind == Fused::dgelu ? aux.get() : nullptr,
      .residual = p.residual ? residual.get() : nullptr};
  // Row-major leading dimensions: the stored matrices' row lengths.
  const int64_t lda = p.trans_a ? m : k;
  const int64_t ldb = p.trans_b ? k : n;
  gemm(l, p.trans_a, p.trans_b, m, n, k, 1.0f, a.get(), lda, b.get(), ldb,
       p.accumulate ? 1.0f : 0.0f, c.get(), n, "matmul", e);
  ASSERT_EQ(cudaStreamSynchronize(l.stream), cudaSuccess);
  for (size_t i = 0; i < um; ++i) {
    for (size_t j = 0; j < un; ++j) {
      double v = 0.0;
      for (size_t t = 0; t < uk; ++t) {
        const double x = p.trans_a ? a[t * um + i] : a[i * uk + t];
        const double y = p.trans_b ? b[j * uk + t] : b[t * un + j];
        v += x * y;
      }
      const size_t at = i * un + j;
      if (p.accumulate) v += c_before[at];
      if (p.residual) v += residual[at];
      if (biased) v += bias[j];
      if (p.kind == Fused::gelu_bias) {
        EXPECT_NEAR(aux[at], v, 1e-5) << "aux " << i << "," << j;
        v = exact_gelu(v);
      } else if (p.kind == Fused::dgelu) {
        v *= exact_gelu_derivative(aux_before[at]);
      }
      EXPECT_NEAR(c[at], v, 1e-5) << i << "," << j;
    }
  }
}

std::vector<Product> every_product() {
  std::vector<Product> products;
  for (const bool trans_a : {false, true}) {
    for (const bool trans_b : {false, true}) {
      for (const Fused kind : {Fused::none, Fused::bias, Fused::gelu_bias, Fused::dgelu}) {
        products.push_back({trans_a, trans_b, kind, false, false});
      }
      products.push_back({trans_a, trans_b, Fused::none, true, false});
      products.push_back({trans_a, trans_b, Fused::bias, true, false});
      products.push_back({trans_a, trans_b, Fused::none, false, true});
    }
  }
  return products;
}

TEST(CudaMatmulEmulated, EveryProductAndEpilogueThroughCublasLt) {
  on_a_fresh_lane([] {
    const CudaHost host;
    Lane& l = lane(sdk::Host(host.api()), "matmul");
    const auto fused = [] {
      return emu::lt_matmuls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS) +
             emu::lt_matmuls(CUBLASLT_EPILOGUE_DGELU) + emu::lt_matmuls(CUBLASLT_EPILOGUE_BIAS);
    };
    const size_t fused_before = fused();
    const size_t refused_before = emu::lt_refusals();
    const size_t sgemm_before = emu::sgemm_calls();
    for (const size_t offset : {size_t{0}, size_t{1}, size_t{2}}) {
      for (const Product& p : every_product()) check_product(l, p, 5, 8, 7, offset);
    }
    // Every product found an algorithm, the epilogues fused.
    EXPECT_EQ(emu::lt_refusals(), refused_before);
    EXPECT_EQ(emu::sgemm_calls(), sgemm_before);
    EXPECT_EQ(fused(), fused_before + 3 * 4 * 4);
  });
}

// An epilogue cuBLASLt does not take here (the GELU input's leading
// dimension not a multiple of 8), or no algorithm at all: cuBLAS and the
// kernels compute the same.
TEST(CudaMatmulEmulated, WithoutAnAlgorithmThroughCublasAndTheKernels) {
  on_a_fresh_lane([] {
    const CudaHost host;
    Lane& l = lane(sdk::Host(host.api()), "matmul");
    const size_t refused_before = emu::lt_refusals();
    for (const Product& p : every_product()) {
      if (p.kind == Fused::gelu_bias || p.kind == Fused::dgelu) check_product(l, p, 4, 6, 3, 0);
    }
    EXPECT_GT(emu::lt_refusals(), refused_before);
    emu::lt_refuse_all(true);
    const size_t sgemm_before = emu::sgemm_calls();
    for (const size_t offset : {size_t{0}, size_t{1}}) {
      for (const Product& p : every_product()) check_product(l, p, 3, 8, 9, offset);
    }
    emu::lt_refuse_all(false);
    EXPECT_GT(emu::sgemm_calls(), sgemm_before);
  });
}

// A product cuBLASLt refuses at the call although its heuristic offered
// an algorithm: it goes through cuBLAS and the kernels, then and from then
// on, its plan no longer offered to cuBLASLt.
TEST(CudaMatmulEmulated, RefusedAtTheCallThroughCublasFromThenOn) {
  on_a_fresh_lane([] {
    const CudaHost host;
    Lane& l = lane(sdk::Host(host.api()), "matmul");
    const Product fused{false, false, Fused::gelu_bias, false, false};
    const ProductArrays arrays(4, 16, 5, 0, 31);  // the same operands, so the same plan
    emu::lt_refuse_calls(true);
    const size_t sgemm = emu::sgemm_calls();
    check_product(l, fused, 4, 16, 5, arrays);
    emu::lt_refuse_calls(false);
    EXPECT_GT(emu::sgemm_calls(), sgemm);
    const size_t lt = emu::lt_matmuls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    const size_t sgemm_after = emu::sgemm_calls();
    check_product(l, fused, 4, 16, 5, arrays);
    EXPECT_EQ(emu::lt_matmuls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), lt);
    EXPECT_GT(emu::sgemm_calls(), sgemm_after);
    std::size_t said = 0;
    for (const std::string& line : host.lines()) {
      if (line.find("CUBLAS_STATUS_NOT_SUPPORTED") != std::string::npos) ++said;
    }
    EXPECT_EQ(said, 1U);
  });
}

// A kept plan serves the next product of the same shape with its own
// bias, GELU input and operands.
TEST(CudaMatmulEmulated, AKeptPlanTakesEachCallsPointers) {
  on_a_fresh_lane([] {
    const CudaHost host;
    Lane& l = lane(sdk::Host(host.api()), "matmul");
    // Two sets of operands alive at once: different addresses, the same alignment.
    const ProductArrays first(4, 16, 5, 0, 11);
    const ProductArrays second(4, 16, 5, 0, 21);
    for (const ProductArrays* operands : {&first, &second, &first}) {
      check_product(l, {false, false, Fused::gelu_bias, false, false}, 4, 16, 5, *operands);
      check_product(l, {false, true, Fused::dgelu, false, false}, 4, 16, 5, *operands);
      check_product(l, {true, false, Fused::bias, true, false}, 4, 16, 5, *operands);
    }
  });
}

}  // namespace
}  // namespace tessera::model::cuda
