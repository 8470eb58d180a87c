// The CUDA units of mlp, gpt and llama (plugins/models/common/cuda), built
// as the model plugins build them (cuda_mlp_units, cuda_gpt_units,
// cuda_llama_units over the module's factory) and run through a whole
// forward and backward pass on the emulated runtime, cuBLAS and kernels
// (see emulation.hpp), against the CPU units they wrap: the loss and every
// parameter's gradient. This checks each unit's wiring (which GEMM with
// which transposes and strides, which parameter, the residuals, the
// staging of host buffers and the in-place path of managed ones) where
// there is no GPU; the `gpu` tests check the same on a device.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda_host.hpp"
#include "emulation.hpp"
#include "gpt.hpp"
#include "llama.hpp"
#include "mlp.hpp"
#include "shards.hpp"
#include "tessera/c/host.h"
#include "tessera/models/cuda_units.hpp"
#include "tessera/sdk/error.hpp"
#include "thread_group.hpp"

extern "C" const tessera::model::cuda::UnitFactory* TESSERA_CUDA_UNITS_ENTRY();

namespace tessera::model {
namespace {

using Units = std::vector<std::unique_ptr<Unit>>;

// One buffer per parameter of every unit, in host memory or in (emulated)
// managed memory, which the CUDA units read in place.
// With `tp` > 1, a rank's shards of a tensor-parallel group of `tp`.
class Buffers {
 public:
  Buffers(const Units& units, bool managed, int tp = 1) : managed_(managed) {
    for (const auto& u : units) {
      auto& ps = params_.emplace_back();
      auto& gs = grads_.emplace_back();
      for (const ParamSpec& spec : u->params()) {
        const int64_t n = testing::held_whole(spec, tp) ? spec.numel() : spec.numel() / tp;
        ps.push_back(make(static_cast<std::size_t>(n)));
        gs.push_back(make(static_cast<std::size_t>(n)));
      }
    }
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    for (auto* group : {&params_, &grads_}) {
      for (auto& unit : *group) {
        for (const Buffer& b : unit) {
          if (managed_) (void)cudaFree(b.data);
        }
      }
    }
  }
  [[nodiscard]] std::vector<const float*> params(std::size_t unit) const {
    std::vector<const float*> out;
    for (const Buffer& b : params_[unit]) out.push_back(b.data);
    return out;
  }
  [[nodiscard]] std::vector<float*> grads(std::size_t unit) const {
    std::vector<float*> out;
    for (const Buffer& b : grads_[unit]) out.push_back(b.data);
    return out;
  }
  [[nodiscard]] std::vector<float*> mutable_params(std::size_t unit) const {
    std::vector<float*> out;
    for (const Buffer& b : params_[unit]) out.push_back(b.data);
    return out;
  }
  [[nodiscard]] std::span<const float> grad(std::size_t unit, std::size_t i) const {
    return {grads_[unit][i].data, grads_[unit][i].count};
  }
  [[nodiscard]] std::size_t count(std::size_t unit) const { return params_[unit].size(); }
  // Rank `rank`'s shards of the whole parameters in `whole` (tp ranks).
  void shard_params_from(const Buffers& whole, const Units& units, int rank, int tp) {
    for (std::size_t u = 0; u < params_.size(); ++u) {
      for (std::size_t i = 0; i < params_[u].size(); ++i) {
        const Buffer& w = whole.params_[u][i];
        const std::vector<float> shard =
            testing::shard_of(units[u]->params()[i], {w.data, w.count}, rank, tp);
        EXPECT_EQ(shard.size(), params_[u][i].count);
        std::copy_n(shard.data(), std::min(shard.size(), params_[u][i].count), params_[u][i].data);
      }
    }
  }
  // A copy of every gradient, by unit and parameter.
  [[nodiscard]] std::vector<std::vector<std::vector<float>>> all_grads() const {
    std::vector<std::vector<std::vector<float>>> out;
    for (const auto& unit : grads_) {
      auto& o = out.emplace_back();
      for (const Buffer& b : unit) o.emplace_back(b.data, b.data + b.count);
    }
    return out;
  }
  void copy_params_from(const Buffers& other) {
    for (std::size_t u = 0; u < params_.size(); ++u) {
      for (std::size_t i = 0; i < params_[u].size(); ++i) {
        std::copy_n(other.params_[u][i].data, params_[u][i].count, params_[u][i].data);
      }
    }
  }

 private:
  struct Buffer {
    float* data;
    std::size_t count;
  };
  Buffer make(std::size_t count) {
    float* data = nullptr;
    if (managed_) {
      EXPECT_EQ(cudaMallocManaged(&data, count * sizeof(float)), cudaSuccess);
    } else {
      data = storage_.emplace_back(count).data();
    }
    std::fill_n(data, count, 0.0f);
    return {data, count};
  }
  bool managed_;
  std::vector<std::vector<float>> storage_;
  std::vector<std::vector<Buffer>> params_, grads_;
};

// How the backward pass runs: whole, or split as a zero-bubble pipeline
// splits it (every unit's input half from the last unit to the first, then
// every weight half from the first to the last).
enum class Backward { whole, split };

// Forward through every unit, then backward from the loss; the loss. With
// `tp`, every call in that tensor-parallel group.
double forward_backward(const Units& units, const Buffers& b, const BatchView& batch,
                        float loss_scale, Backward mode = Backward::whole,
                        const tessera_tp_group* tp = nullptr) {
  std::vector<std::unique_ptr<UnitContext>> contexts;
  ConstView x;
  for (std::size_t u = 0; u < units.size(); ++u) {
    contexts.push_back(units[u]->make_context());
    contexts.back()->set_tp(tp);
    UnitInput in;
    in.batch = &batch;
    in.x = x;
    in.loss_scale = loss_scale;
    in.tp = tp;
    const std::vector<const float*> p = b.params(u);
    x = units[u]->forward(*contexts[u], p, in);
  }
  if (x.data == nullptr || x.rows * x.cols != 1) {
    ADD_FAILURE() << "the last unit returned no 1x1 loss";
    return std::nan("");
  }
  const double loss = x.data[0];
  ConstView grad;
  for (std::size_t u = units.size(); u-- > 0;) {
    const std::vector<const float*> p = b.params(u);
    const std::vector<float*> g = b.grads(u);
    grad = mode == Backward::whole ? units[u]->backward(*contexts[u], p, g, grad)
                                   : units[u]->backward_input(*contexts[u], p, grad);
  }
  if (mode == Backward::split) {
    for (std::size_t u = 0; u < units.size(); ++u) {
      units[u]->backward_weight(*contexts[u], b.params(u), b.grads(u));
    }
  }
  return loss;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
  std::vector<float> inputs;
  BatchView view;
};

Batch sequence_batch(int64_t examples, int64_t seq, int64_t vocab, uint32_t seed) {
  Batch b;
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  for (int64_t i = 0; i < examples * seq; ++i) {
    b.tokens.push_back(token(gen));
    b.targets.push_back(token(gen));
  }
  b.view.size = examples;
  b.view.seq_len = seq;
  b.view.tokens = b.tokens;
  b.view.targets = b.targets;
  return b;
}

Batch feature_batch(int64_t examples, int64_t features, int64_t classes, uint32_t seed) {
  Batch b;
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(classes - 1));
  for (int64_t i = 0; i < examples * features; ++i) b.inputs.push_back(normal(gen));
  for (int64_t i = 0; i < examples; ++i) b.targets.push_back(label(gen));
  b.view.size = examples;
  b.view.features = features;
  b.view.inputs = b.inputs;
  b.view.targets = b.targets;
  return b;
}

// `got` within `tolerance` of `want`'s largest value, which is not 0.
void expect_near_tensor(std::span<const float> got, std::span<const float> want, double tolerance,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double largest = 0.0;
  double worst = 0.0;
  for (std::size_t j = 0; j < want.size(); ++j) {
    largest = std::max(largest, std::fabs(static_cast<double>(want[j])));
    const double diff = std::fabs(static_cast<double>(got[j]) - want[j]);
    if (!(diff <= worst)) worst = diff;  // NaN too
  }
  EXPECT_GT(largest, 0.0) << what;
  EXPECT_LE(worst, tolerance * largest) << what << " (largest " << largest << ")";
}

// The CPU units and their CUDA versions run on the same parameters: the
// loss and every gradient within `tolerance` of the CPU's largest value
// per tensor.
void expect_same_training(const Units& cpu, const Units& cuda, const BatchView& batch, bool managed,
                          double tolerance) {
  // One thread per block (see emu::limit_block_threads): the same results;
  // the kernels' tests run their blocks' threads.
  const emu::BlockThreadLimit one_thread(1);
  Buffers cpu_buffers(cpu, false);
  for (std::size_t u = 0; u < cpu.size(); ++u) {
    cpu[u]->init(cpu_buffers.mutable_params(u), 1234 + u);
  }
  Buffers cuda_buffers(cuda, managed);
  cuda_buffers.copy_params_from(cpu_buffers);
  const double cpu_loss = forward_backward(cpu, cpu_buffers, batch, 0.75f);
  const double cuda_loss = forward_backward(cuda, cuda_buffers, batch, 0.75f);
  EXPECT_NEAR(cuda_loss, cpu_loss, tolerance * std::fabs(cpu_loss));
  for (std::size_t u = 0; u < cpu.size(); ++u) {
    for (std::size_t i = 0; i < cpu_buffers.count(u); ++i) {
      expect_near_tensor(cuda_buffers.grad(u, i), cpu_buffers.grad(u, i), tolerance,
                         cpu[u]->name() + "." + cpu[u]->params()[i].name);
    }
  }
}

// What one rank of a tensor-parallel group computed: the loss and its
// gradient shards, by unit and parameter.
struct RankResult {
  double loss = 0.0;
  std::vector<std::vector<std::vector<float>>> grads;
};

// Every rank of a group of `tp` (flags `flags`; `cuda_buffers`: the
// group's backend takes CUDA buffers, as nccl) runs `units` forward and
// backward on its shards of the parameters in `whole`.
// What went through a group: rank 0's collectives with a buffer in
// device-only memory, its allgathers and reduce-scatters, and those of
// them with a buffer there (not both staged through managed memory).
struct GroupTraffic {
  int64_t device_collectives = 0;
  int64_t exchanges = 0;
  int64_t device_exchanges = 0;
};

std::vector<RankResult> run_in_group(const Units& units, const Buffers& whole,
                                     const BatchView& batch, int tp, uint32_t flags, bool managed,
                                     bool cuda_buffers, Backward mode,
                                     GroupTraffic* traffic = nullptr) {
  emu::ThreadGroup group(tp, cuda_buffers);
  std::vector<RankResult> results(static_cast<std::size_t>(tp));
  group.run(
      [&](int32_t rank, const tessera_tp_group& g) {
        Buffers mine(units, managed, tp);
        mine.shard_params_from(whole, units, rank, tp);
        RankResult& r = results[static_cast<std::size_t>(rank)];
        r.loss = forward_backward(units, mine, batch, 0.75f, mode, &g);
        r.grads = mine.all_grads();
      },
      flags);
  EXPECT_GT(group.collectives(), 0);
  if (traffic != nullptr) {
    *traffic = {group.device_collectives(), group.exchanges(), group.device_exchanges()};
  }
  return results;
}

// How the CUDA units run in a tensor-parallel check.
struct GroupCase {
  int tp = 2;
  uint32_t flags = 0;         // TESSERA_TP_*
  bool managed = true;        // parameters and gradients in managed memory
  bool cuda_buffers = false;  // a backend that takes CUDA buffers
  Backward mode = Backward::whole;
  // Every collective of the CUDA units goes through managed memory (0), or
  // (1; a backend that takes CUDA buffers) some take device memory where it
  // is, every allgather and reduce-scatter among them; -1: not checked.
  int device_memory = -1;
};

// The CUDA units and the CPU units they wrap, each on every rank of a
// group, every rank on its shards of the same parameters: on every rank
// the same loss and the same gradient shards within `tolerance`. (The CPU
// units' own checks, tests/model, compare them with the whole model.)
void expect_same_training_in_group(const Units& cpu, const Units& cuda, const BatchView& batch,
                                   const GroupCase& c, double tolerance) {
  const emu::BlockThreadLimit one_thread(1);
  Buffers whole(cpu, false);
  for (std::size_t u = 0; u < cpu.size(); ++u) cpu[u]->init(whole.mutable_params(u), 4321 + u);
  const std::vector<RankResult> want =
      run_in_group(cpu, whole, batch, c.tp, c.flags, false, false, Backward::whole);
  GroupTraffic traffic;
  const std::vector<RankResult> got =
      run_in_group(cuda, whole, batch, c.tp, c.flags, c.managed, c.cuda_buffers, c.mode, &traffic);
  if (c.device_memory == 0) {
    EXPECT_EQ(traffic.device_collectives, 0);
  } else if (c.device_memory == 1) {
    EXPECT_GT(traffic.device_collectives, 0);
    EXPECT_EQ(traffic.device_exchanges, traffic.exchanges);
  }
  for (std::size_t r = 0; r < want.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r) + " of " + std::to_string(c.tp));
    EXPECT_NEAR(got[r].loss, want[r].loss, tolerance * std::fabs(want[r].loss));
    for (std::size_t u = 0; u < cpu.size(); ++u) {
      for (std::size_t i = 0; i < want[r].grads[u].size(); ++i) {
        expect_near_tensor(got[r].grads[u][i], want[r].grads[u][i], tolerance,
                           cpu[u]->name() + "." + cpu[u]->params()[i].name);
      }
    }
  }
}

const cuda::UnitFactory& factory() {
  const cuda::UnitFactory* f = TESSERA_CUDA_UNITS_ENTRY();
  EXPECT_EQ(f->version, cuda::kUnitFactoryVersion);
  return *f;
}

constexpr double kTolerance = 1e-4;

LlamaConfig small_llama() {
  LlamaConfig c;
  c.vocab = 40;
  c.layers = 2;
  c.d_model = 32;
  c.heads = 4;
  c.kv_heads = 2;  // grouped-query
  c.seq_len = 12;
  c.ffn = llama_default_ffn(c.d_model);
  return c;
}

// An untied gpt of `layers` blocks.
GptConfig small_gpt(int64_t layers) {
  GptConfig c;
  c.vocab = 40;
  c.layers = layers;
  c.d_model = 24;
  c.heads = 3;
  c.seq_len = 8;
  c.tied_head = false;
  return c;
}

// An mlp with GELU layers of `hidden` widths.
MlpConfig small_mlp(std::vector<int64_t> hidden) {
  MlpConfig c;
  c.input = 12;
  c.hidden = std::move(hidden);
  c.classes = 5;
  c.activation = kernels::Activation::gelu;
  return c;
}

class CudaUnitsEmulated : public ::testing::TestWithParam<bool> {};  // managed buffers or not

TEST_P(CudaUnitsEmulated, LlamaMatchesItsCpuUnits) {
  const CudaHost host;
  const LlamaConfig config = small_llama();
  const Units cpu = build_llama_units(config);
  const Units cuda = cuda_llama_units(factory(), host.api(), config, build_llama_units(config));
  const Batch batch = sequence_batch(3, 10, config.vocab, 7);  // shorter than seq_len
  expect_same_training(cpu, cuda, batch.view, GetParam(), kTolerance);
}

TEST_P(CudaUnitsEmulated, GptMatchesItsCpuUnits) {
  const CudaHost host;
  const GptConfig config = small_gpt(2);
  const Units cpu = build_gpt_units(config);
  const Units cuda = cuda_gpt_units(factory(), host.api(), config, build_gpt_units(config));
  const Batch batch = sequence_batch(2, 8, config.vocab, 8);
  expect_same_training(cpu, cuda, batch.view, GetParam(), kTolerance);
}

TEST_P(CudaUnitsEmulated, MlpMatchesItsCpuUnits) {
  const CudaHost host;
  const MlpConfig config = small_mlp({20, 16});
  const Units cpu = build_mlp_units(config);
  const Units cuda = cuda_mlp_units(factory(), host.api(), config, build_mlp_units(config));
  const Batch batch = feature_batch(6, config.input, config.classes, 9);
  expect_same_training(cpu, cuda, batch.view, GetParam(), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Buffers, CudaUnitsEmulated, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("Managed") : std::string("Host");
                         });

// The products' epilogues: gpt's fc with its bias and GELU and their
// gradient, its q|k|v with the bias, the mlp's GELU layers (the one whose
// width is a multiple of 8 fused, the other through the kernels) and its
// head; and every model through cuBLAS and the kernels where cuBLASLt
// finds no algorithm at all.
TEST(CudaUnitsEmulatedEpilogues, FusedOrNotTheUnitsMatchTheirCpuUnits) {
  on_a_fresh_lane([] {
    const emu::BlockThreadLimit one_thread(1);
    const CudaHost host;
    const GptConfig gpt = small_gpt(1);
    const MlpConfig mlp = small_mlp({20, 16});
    const LlamaConfig llama = small_llama();
    const Batch tokens = sequence_batch(2, 8, gpt.vocab, 8);
    const Batch features = feature_batch(6, mlp.input, mlp.classes, 9);
    const auto train_all = [&] {
      expect_same_training(build_gpt_units(gpt),
                           cuda_gpt_units(factory(), host.api(), gpt, build_gpt_units(gpt)),
                           tokens.view, false, kTolerance);
      expect_same_training(build_mlp_units(mlp),
                           cuda_mlp_units(factory(), host.api(), mlp, build_mlp_units(mlp)),
                           features.view, false, kTolerance);
      expect_same_training(build_llama_units(llama),
                           cuda_llama_units(factory(), host.api(), llama, build_llama_units(llama)),
                           tokens.view, false, kTolerance);
    };
    const size_t gelu = emu::lt_matmuls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    const size_t dgelu = emu::lt_matmuls(CUBLASLT_EPILOGUE_DGELU);
    const size_t bias = emu::lt_matmuls(CUBLASLT_EPILOGUE_BIAS);
    const size_t refused = emu::lt_refusals();
    train_all();
    // gpt's fc and the mlp's second layer; gpt's MLP backward; gpt's q|k|v
    // and two projections, and the mlp's head.
    EXPECT_GE(emu::lt_matmuls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), gelu + 2);
    EXPECT_GE(emu::lt_matmuls(CUBLASLT_EPILOGUE_DGELU), dgelu + 1);
    EXPECT_GE(emu::lt_matmuls(CUBLASLT_EPILOGUE_BIAS), bias + 4);
    EXPECT_GT(emu::lt_refusals(), refused);  // the mlp's 20-wide GELU layer
    // Said once, in the log.
    std::size_t said = 0;
    for (const std::string& line : host.lines()) {
      if (line.find("cuBLASLt has no algorithm for a [20 x 12]") != std::string::npos &&
          line.find("GELU_AUX_BIAS") != std::string::npos) {
        ++said;
      }
    }
    EXPECT_EQ(said, 1U);
    emu::lt_refuse_all(true);
    const size_t sgemm = emu::sgemm_calls();
    const size_t lt_gelu = emu::lt_matmuls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
    on_a_fresh_lane(train_all);  // no plan kept from the products above
    emu::lt_refuse_all(false);
    EXPECT_GT(emu::sgemm_calls(), sgemm);
    EXPECT_EQ(emu::lt_matmuls(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), lt_gelu);
  });
}

// TESSERA_CUBLASLT=0: a lane made then sends every product through cuBLAS
// and the kernels, which compute the same, and says so once.
TEST(CudaUnitsEmulatedEpilogues, CublasLtOffSendsEveryProductThroughCublas) {
  ASSERT_EQ(setenv("TESSERA_CUBLASLT", "0", 1), 0);
  const CudaHost host;
  on_a_fresh_lane([&] {
    const emu::BlockThreadLimit one_thread(1);
    const GptConfig gpt = small_gpt(1);
    const Batch tokens = sequence_batch(2, 8, gpt.vocab, 8);
    // Every cuBLASLt product of an f32 run, whatever its epilogue.
    const std::size_t lt = emu::lt_inputs(CUDA_R_32F);
    const std::size_t sgemm = emu::sgemm_calls();
    expect_same_training(build_gpt_units(gpt),
                         cuda_gpt_units(factory(), host.api(), gpt, build_gpt_units(gpt)),
                         tokens.view, false, kTolerance);
    EXPECT_EQ(emu::lt_inputs(CUDA_R_32F), lt);
    EXPECT_GT(emu::sgemm_calls(), sgemm);
  });
  ASSERT_EQ(unsetenv("TESSERA_CUBLASLT"), 0);
  std::size_t said = 0;
  for (const std::string& line : host.lines()) {
    if (line.find("TESSERA_CUBLASLT=0") != std::string::npos) ++said;
  }
  EXPECT_EQ(said, 1U);
}

// bf16 and f16 products: every GEMM's inputs rounded to bfloat16 or
// float16 (cuBLASLt on 16BF or 16F inputs), so the result is the f32 run's
// to that precision (f16 has 3 more mantissa bits); TF32 is a compute type
// of the same f32 products (and cuBLAS's math mode).
TEST(CudaUnitsEmulatedPrecision, SixteenBitProductsAndTf32MathMode) {
  const LlamaConfig config = small_llama();
  const Batch batch = sequence_batch(2, 12, config.vocab, 10);
  const CudaHost bf16(TESSERA_BF16);
  const std::size_t before = emu::lt_inputs(CUDA_R_16BF);
  expect_same_training(build_llama_units(config),
                       cuda_llama_units(factory(), bf16.api(), config, build_llama_units(config)),
                       batch.view, false, 3e-2);
  EXPECT_GT(emu::lt_inputs(CUDA_R_16BF), before);
  EXPECT_EQ(emu::last_lt_compute(), CUBLAS_COMPUTE_32F);
  EXPECT_EQ(emu::last_math_mode(), CUBLAS_DEFAULT_MATH);
  const CudaHost f16(TESSERA_F16);
  const std::size_t before_f16 = emu::lt_inputs(CUDA_R_16F);
  expect_same_training(build_llama_units(config),
                       cuda_llama_units(factory(), f16.api(), config, build_llama_units(config)),
                       batch.view, false, 1e-2);
  EXPECT_GT(emu::lt_inputs(CUDA_R_16F), before_f16);
  const CudaHost tf32(TESSERA_F32, true);
  expect_same_training(build_llama_units(config),
                       cuda_llama_units(factory(), tf32.api(), config, build_llama_units(config)),
                       batch.view, false, kTolerance);
  EXPECT_EQ(emu::last_lt_compute(), CUBLAS_COMPUTE_32F_FAST_TF32);
  EXPECT_EQ(emu::last_math_mode(), CUBLAS_TF32_TENSOR_OP_MATH);
  const CudaHost f32;
  const std::size_t before_f32 = emu::lt_inputs(CUDA_R_32F);
  expect_same_training(build_llama_units(config),
                       cuda_llama_units(factory(), f32.api(), config, build_llama_units(config)),
                       batch.view, false, kTolerance);
  EXPECT_GT(emu::lt_inputs(CUDA_R_32F), before_f32);
  EXPECT_EQ(emu::last_lt_compute(), CUBLAS_COMPUTE_32F);
  EXPECT_EQ(emu::last_math_mode(), CUBLAS_PEDANTIC_MATH);
  // Where cuBLASLt finds no algorithm the products go through cuBLAS, in
  // 16 bits too.
  emu::lt_refuse_all(true);
  const std::size_t before_ex = emu::gemm_ex_calls(CUDA_R_16BF);
  on_a_fresh_lane([&] {
    expect_same_training(build_llama_units(config),
                         cuda_llama_units(factory(), bf16.api(), config, build_llama_units(config)),
                         batch.view, false, 3e-2);
  });
  emu::lt_refuse_all(false);
  EXPECT_GT(emu::gemm_ex_calls(CUDA_R_16BF), before_ex);
}

// Split into its halves (as zero-bubble pipelines run it), a CUDA unit's
// backward gives the whole one's gradients bit for bit; a weight half
// without an input half before it is refused.
TEST(CudaUnitsEmulatedSplit, TheHalvesGiveTheWholeBackwardsGradients) {
  const emu::BlockThreadLimit one_thread(1);
  const CudaHost host;
  const LlamaConfig llama = small_llama();
  const GptConfig gpt = small_gpt(1);
  const MlpConfig mlp = small_mlp({20});
  const Batch tokens = sequence_batch(2, 8, 40, 12);
  const Batch features = feature_batch(4, mlp.input, mlp.classes, 13);
  struct Case {
    std::string name;
    Units units;
    const BatchView* batch;
  };
  std::vector<Case> cases;
  cases.push_back({"llama",
                   cuda_llama_units(factory(), host.api(), llama, build_llama_units(llama)),
                   &tokens.view});
  cases.push_back(
      {"gpt", cuda_gpt_units(factory(), host.api(), gpt, build_gpt_units(gpt)), &tokens.view});
  cases.push_back(
      {"mlp", cuda_mlp_units(factory(), host.api(), mlp, build_mlp_units(mlp)), &features.view});
  for (const Case& c : cases) {
    for (const auto& u : c.units) {
      EXPECT_NE(u->flags() & TESSERA_UNIT_SPLIT_BACKWARD, 0U) << c.name << " " << u->name();
    }
    Buffers whole(c.units, false);
    for (std::size_t u = 0; u < c.units.size(); ++u) {
      c.units[u]->init(whole.mutable_params(u), 99 + u);
    }
    Buffers split(c.units, false);
    split.copy_params_from(whole);
    const double loss_whole = forward_backward(c.units, whole, *c.batch, 1.0f, Backward::whole);
    const double loss_split = forward_backward(c.units, split, *c.batch, 1.0f, Backward::split);
    EXPECT_EQ(loss_whole, loss_split) << c.name;
    for (std::size_t u = 0; u < c.units.size(); ++u) {
      for (std::size_t i = 0; i < whole.count(u); ++i) {
        const std::span<const float> a = whole.grad(u, i);
        const std::span<const float> b = split.grad(u, i);
        EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin()))
            << c.name << " " << c.units[u]->name() << "." << c.units[u]->params()[i].name;
      }
    }
    auto ctx = c.units.back()->make_context();
    try {
      c.units.back()->backward_weight(*ctx, whole.params(c.units.size() - 1),
                                      whole.grads(c.units.size() - 1));
      ADD_FAILURE() << c.name << ": a weight half without an input half ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("backward_weight without backward_input"),
                std::string::npos)
          << e.what();
    }
  }
}

// Contexts made and dropped return their device memory: nothing is left
// in use once the units' contexts are gone (the lanes' scratch aside).
TEST(CudaUnitsEmulatedMemory, DroppedContextsReturnTheirDeviceMemory) {
  const CudaHost host;
  const LlamaConfig config = small_llama();
  const Units cpu = build_llama_units(config);
  const Units cuda = cuda_llama_units(factory(), host.api(), config, build_llama_units(config));
  const Batch batch = sequence_batch(2, 12, config.vocab, 11);
  // The lane's own memory (cuBLASLt's workspace) is made by its first
  // product and kept: a first pass makes it.
  expect_same_training(cpu, cuda, batch.view, false, kTolerance);
  const std::size_t device_before = emu::device_bytes_in_use();
  const std::size_t managed_before = emu::managed_bytes_in_use();
  expect_same_training(cpu, cuda, batch.view, false, kTolerance);
  EXPECT_EQ(emu::device_bytes_in_use(), device_before);
  EXPECT_EQ(emu::managed_bytes_in_use(), managed_before);
}

// Each unit's context bytes after a forward pass of `units` on `batch`
// and, with `input_half`, after every unit's backward_input then.
std::vector<std::size_t> bytes_after_forward(const Units& units, const BatchView& batch,
                                             bool input_half = false) {
  const emu::BlockThreadLimit one_thread(1);
  Buffers buffers(units, true);
  for (std::size_t u = 0; u < units.size(); ++u) {
    units[u]->init(buffers.mutable_params(u), 77 + u);
  }
  std::vector<std::unique_ptr<UnitContext>> contexts;
  std::vector<std::size_t> bytes;
  ConstView x;
  for (std::size_t u = 0; u < units.size(); ++u) {
    contexts.push_back(units[u]->make_context());
    UnitInput in;
    in.batch = &batch;
    in.x = x;
    const std::vector<const float*> p = buffers.params(u);
    x = units[u]->forward(*contexts[u], p, in);
    bytes.push_back(contexts[u]->bytes());
  }
  if (!input_half) return bytes;
  ConstView grad;
  for (std::size_t u = units.size(); u-- > 0;) {
    grad = units[u]->backward_input(*contexts[u], buffers.params(u), grad);
    bytes[u] = contexts[u]->bytes();
  }
  return bytes;
}

// What a context keeps after the forward: the logits are given back once
// the cross-entropy has its probabilities, and under bf16 (f16) the
// activations the backward reads only as a product's input are kept in 16
// bits, half the bytes: gpt's and llama's norm outputs and MLP activation,
// the heads' norm output, the mlp's layer inputs; and so are the
// attention's q, k, v and output.
TEST(CudaUnitsEmulatedMemory, SixteenBitPrecisionKeepsActivationsInHalfTheBytes) {
  const CudaHost f32;
  const CudaHost bf16(TESSERA_BF16);
  const CudaHost f16(TESSERA_F16);
  const GptConfig gpt = small_gpt(1);
  const int64_t examples = 2;
  const Batch tokens = sequence_batch(examples, gpt.seq_len, gpt.vocab, 5);
  const int64_t n = examples * gpt.seq_len;
  const int64_t d = gpt.d_model;
  const std::vector<std::size_t> whole = bytes_after_forward(
      cuda_gpt_units(factory(), f32.api(), gpt, build_gpt_units(gpt)), tokens.view);
  ASSERT_EQ(whole.size(), 3U);  // embedding, block, head
  // The head: x and h [n, d], the LayerNorm's mean and rstd, the
  // probabilities [n, vocab], the targets and the rows' losses (double);
  // no logits.
  const auto f = static_cast<std::size_t>(sizeof(float));
  const auto un = static_cast<std::size_t>(n);
  const auto ud = static_cast<std::size_t>(d);
  EXPECT_EQ(whole[2], un * (2 * ud * f + 2 * f + static_cast<std::size_t>(gpt.vocab) * f + 4 + 8));
  for (const CudaHost* half : {&bf16, &f16}) {
    const std::vector<std::size_t> rounded = bytes_after_forward(
        cuda_gpt_units(factory(), half->api(), gpt, build_gpt_units(gpt)), tokens.view);
    EXPECT_EQ(rounded[0], whole[0]);
    // h1, h2 [n, d], the GELU's output [n, 4d], q|k|v [n, 3d] and the
    // attention's output [n, d]: 2 bytes each fewer.
    EXPECT_EQ(whole[1] - rounded[1], un * (2 * ud + 4 * ud + 3 * ud + ud) * 2);
    EXPECT_EQ(whole[2] - rounded[2], un * ud * 2);
  }
  const LlamaConfig llama = small_llama();
  const Batch llama_tokens = sequence_batch(examples, llama.seq_len, llama.vocab, 6);
  const auto ln = static_cast<std::size_t>(examples * llama.seq_len);
  const std::vector<std::size_t> llama_f32 = bytes_after_forward(
      cuda_llama_units(factory(), f32.api(), llama, build_llama_units(llama)), llama_tokens.view);
  const std::vector<std::size_t> llama_bf16 = bytes_after_forward(
      cuda_llama_units(factory(), bf16.api(), llama, build_llama_units(llama)), llama_tokens.view);
  ASSERT_EQ(llama_f32.size(), 4U);  // embedding, two blocks, head
  const auto llama_d = static_cast<std::size_t>(llama.d_model);
  const auto llama_kvd = static_cast<std::size_t>(llama.d_model / llama.heads * llama.kv_heads);
  for (std::size_t b = 1; b <= 2; ++b) {
    // h1, h2 [n, d], SwiGLU's inputs and output [n, ffn], q and the
    // attention's output [n, d], k and v [n, kv_heads·head_dim].
    EXPECT_EQ(
        llama_f32[b] - llama_bf16[b],
        ln * (2 * llama_d + 3 * static_cast<std::size_t>(llama.ffn) + 2 * llama_d + 2 * llama_kvd) *
            2);
  }
  EXPECT_EQ(llama_f32[3] - llama_bf16[3], ln * static_cast<std::size_t>(llama.d_model) * 2);
  const MlpConfig mlp = small_mlp({20, 16});
  const Batch features = feature_batch(6, mlp.input, mlp.classes, 7);
  const std::vector<std::size_t> mlp_f32 = bytes_after_forward(
      cuda_mlp_units(factory(), f32.api(), mlp, build_mlp_units(mlp)), features.view);
  const std::vector<std::size_t> mlp_bf16 = bytes_after_forward(
      cuda_mlp_units(factory(), bf16.api(), mlp, build_mlp_units(mlp)), features.view);
  ASSERT_EQ(mlp_f32.size(), 3U);  // two layers and the head
  const std::size_t inputs[] = {12, 20, 16};
  for (std::size_t u = 0; u < 3; ++u) {
    EXPECT_EQ(mlp_f32[u] - mlp_bf16[u], 6 * inputs[u] * 2) << "unit " << u;
  }
}

// What a context waiting for its weight half keeps (zero-bubble
// pipelines run the weight halves later): its products' inputs and output
// gradients, the norms' parameter gradients, and what it handed on; the
// rest went back to the pool at the end of backward_input.
TEST(CudaUnitsEmulatedMemory, AWaitingWeightHalfKeepsOnlyWhatItReads) {
  const CudaHost host;
  const GptConfig gpt = small_gpt(1);
  const int64_t examples = 2;
  const Batch tokens = sequence_batch(examples, gpt.seq_len, gpt.vocab, 5);
  const auto n = static_cast<std::size_t>(examples * gpt.seq_len);
  const auto d = static_cast<std::size_t>(gpt.d_model);
  const auto vocab = static_cast<std::size_t>(gpt.vocab);
  const std::size_t hid = 4 * d;
  const std::vector<std::size_t> waiting = bytes_after_forward(
      cuda_gpt_units(factory(), host.api(), gpt, build_gpt_units(gpt)), tokens.view, true);
  ASSERT_EQ(waiting.size(), 3U);
  const std::size_t f = sizeof(float);
  // The block: h1, h2, attn, dy, dx2, y and dx [n, d], act and du [n, hid],
  // dqkv [n, 3d], the LayerNorms' four gradients [d].
  EXPECT_EQ(waiting[1], f * (n * (7 * d + 2 * hid + 3 * d) + 4 * d));
  // The head: h and dx [n, d], dlogits [n, vocab], the norm's gradients.
  EXPECT_EQ(waiting[2], f * (n * (2 * d + vocab) + 2 * d));
  // Under bf16 the block's h1, h2, attn and act in 2 bytes.
  const CudaHost bf16(TESSERA_BF16);
  const std::vector<std::size_t> waiting_bf16 = bytes_after_forward(
      cuda_gpt_units(factory(), bf16.api(), gpt, build_gpt_units(gpt)), tokens.view, true);
  EXPECT_EQ(waiting[1] - waiting_bf16[1], n * (3 * d + hid) * 2);
  // A llama block: h1, h2, attn, dy, dx2, dq, y and dx [n, d], act, dgate
  // and dup [n, ffn], dk and dv [n, kv_heads·head_dim], the RMSNorms' two
  // gradients [d].
  const LlamaConfig llama = small_llama();
  const Batch llama_tokens = sequence_batch(examples, llama.seq_len, llama.vocab, 6);
  const auto ln = static_cast<std::size_t>(examples * llama.seq_len);
  const auto ld = static_cast<std::size_t>(llama.d_model);
  const auto kvd = static_cast<std::size_t>(llama.d_model / llama.heads * llama.kv_heads);
  const auto ffn = static_cast<std::size_t>(llama.ffn);
  const std::vector<std::size_t> llama_waiting =
      bytes_after_forward(cuda_llama_units(factory(), host.api(), llama, build_llama_units(llama)),
                          llama_tokens.view, true);
  ASSERT_EQ(llama_waiting.size(), 4U);
  for (std::size_t b = 1; b <= 2; ++b) {
    EXPECT_EQ(llama_waiting[b], f * (ln * (8 * ld + 3 * ffn + 2 * kvd) + 2 * ld)) << "block " << b;
  }
  const MlpConfig mlp = small_mlp({20, 16});
  const Batch features = feature_batch(6, mlp.input, mlp.classes, 7);
  const std::vector<std::size_t> mlp_waiting = bytes_after_forward(
      cuda_mlp_units(factory(), host.api(), mlp, build_mlp_units(mlp)), features.view, true);
  // A layer: x [6, in], dz and y [6, out], dx [6, in] but the first's; the
  // head: x and dx [6, 16], dlogits [6, 5].
  EXPECT_EQ(mlp_waiting[0], f * 6 * (12 + 2 * 20));
  EXPECT_EQ(mlp_waiting[1], f * 6 * (20 + 2 * 16 + 20));
  EXPECT_EQ(mlp_waiting[2], f * 6 * (16 + 5 + 16));
}

// The mlp's CUDA units under tensor parallelism against its CPU units on
// the same ranks: column and row layers, the last hidden layer gathering
// its output (a column one), the head split by classes (6 over 2 and 3
// ranks) or whole (5), with and without sequence parallelism (the
// examples split between the pairs), each backward whole or in halves.
TEST(CudaUnitsEmulatedTensorParallel, MlpMatchesItsCpuUnitsOnEveryRank) {
  const CudaHost host;
  for (const std::vector<int64_t>& hidden :
       {std::vector<int64_t>{12}, std::vector<int64_t>{12, 18}, std::vector<int64_t>{12, 18, 6}}) {
    for (const int64_t classes : {int64_t{6}, int64_t{5}}) {
      MlpConfig config = small_mlp(hidden);
      config.classes = classes;
      const Units cpu = build_mlp_units(config);
      const Units cuda = cuda_mlp_units(factory(), host.api(), config, build_mlp_units(config));
      const Batch batch = feature_batch(6, config.input, classes, 12);
      for (const int tp : {2, 3}) {
        for (const uint32_t flags : {0U, static_cast<uint32_t>(TESSERA_TP_SEQUENCE)}) {
          GroupCase c;
          c.tp = tp;
          c.flags = flags;
          c.mode = tp == 3 ? Backward::split : Backward::whole;
          SCOPED_TRACE(::testing::Message() << "hidden " << hidden.size() << ", classes " << classes
                                            << ", tp " << tp << ", flags " << flags);
          expect_same_training_in_group(cpu, cuda, batch.view, c, kTolerance);
        }
      }
    }
  }
}

// What goes through the group is what a backend on a device can take:
// managed memory the host reads (a CPU backend) and, on a backend that
// takes CUDA buffers (nccl), buffers handed as CUDA ones; parameters and
// gradients in host memory are staged at their shards' sizes.
TEST(CudaUnitsEmulatedTensorParallel, BuffersABackendOnADeviceTakes) {
  const CudaHost host;
  const MlpConfig config = small_mlp({12, 18, 6});
  const Units cpu = build_mlp_units(config);
  const Units cuda = cuda_mlp_units(factory(), host.api(), config, build_mlp_units(config));
  const Batch batch = feature_batch(6, config.input, config.classes, 13);
  for (const uint32_t flags : {0U, static_cast<uint32_t>(TESSERA_TP_SEQUENCE)}) {
    GroupCase on_device;
    on_device.flags = flags;
    on_device.cuda_buffers = true;
    expect_same_training_in_group(cpu, cuda, batch.view, on_device, kTolerance);
    GroupCase host_buffers;
    host_buffers.flags = flags;
    host_buffers.managed = false;
    expect_same_training_in_group(cpu, cuda, batch.view, host_buffers, kTolerance);
  }
}

// gpt's and llama's CUDA units against their CPU units on the same ranks,
// in tensor and sequence mode (the token rows split between the column and
// row pairs: 6 positions over 2 and 3 ranks): the embedding and the head
// split by vocabulary (gpt's head w [vocab, d] by rows, as a tied head's
// table; llama's w [d, vocab] by columns), the blocks' attention by heads
// and their MLP by columns; llama's key/value heads split, or replicated,
// among them a rank whose query heads read two of them (6 heads on 2 over
// 3 ranks).
TEST(CudaUnitsEmulatedTensorParallel, GptAndLlamaMatchTheirCpuUnitsOnEveryRank) {
  const CudaHost host;
  const auto each_mode = [](const Units& cpu, const Units& cuda, const BatchView& batch, int tp,
                            const std::string& what) {
    for (const uint32_t flags : {0U, static_cast<uint32_t>(TESSERA_TP_SEQUENCE)}) {
      for (const bool on_device : {false, true}) {
        GroupCase c;
        c.tp = tp;
        c.flags = flags;
        c.cuda_buffers = on_device;
        c.mode = on_device ? Backward::split : Backward::whole;
        // nccl sums and exchanges the units' device memory where it is.
        c.device_memory = on_device ? 1 : 0;
        SCOPED_TRACE(::testing::Message() << what << ", tp " << tp << ", flags " << flags
                                          << ", cuda buffers " << on_device);
        expect_same_training_in_group(cpu, cuda, batch, c, kTolerance);
      }
    }
  };
  {
    GptConfig config = small_gpt(2);  // untied: every unit's parameters its own
    config.heads = 6;
    config.vocab = 42;
    const Units cpu = build_gpt_units(config);
    const Units cuda = cuda_gpt_units(factory(), host.api(), config, build_gpt_units(config));
    const Batch batch = sequence_batch(2, 6, config.vocab, 15);
    for (const int tp : {2, 3}) each_mode(cpu, cuda, batch.view, tp, "gpt");
  }
  struct LlamaCase {
    int64_t d_model, heads, kv_heads;
    bool kv_replicated;
    int tp;
  };
  for (const LlamaCase& lc : {LlamaCase{32, 4, 2, false, 2}, LlamaCase{32, 4, 2, true, 2},
                              LlamaCase{36, 6, 2, true, 3}}) {
    LlamaConfig config = small_llama();
    config.vocab = 42;
    config.d_model = lc.d_model;
    config.heads = lc.heads;
    config.kv_heads = lc.kv_heads;
    config.kv_replicated = lc.kv_replicated;
    config.ffn = 48;
    const Units cpu = build_llama_units(config);
    const Units cuda = cuda_llama_units(factory(), host.api(), config, build_llama_units(config));
    const Batch batch = sequence_batch(3, 6, config.vocab, 16);
    each_mode(cpu, cuda, batch.view, lc.tp,
              "llama, " + std::to_string(lc.heads) + " heads on " + std::to_string(lc.kv_heads) +
                  (lc.kv_replicated ? " replicated" : " split"));
  }
}

// Every CUDA unit declares the tensor and sequence parallelism its twin
// does (so the tensor strategy takes it), and checks a group's size as
// the twin does.
TEST(CudaUnitsEmulatedTensorParallel, WhatTheUnitsDeclare) {
  const CudaHost host;
  const MlpConfig mlp = small_mlp({12, 18});
  const GptConfig gpt = small_gpt(1);
  const LlamaConfig llama = small_llama();
  const Units cuda_mlp = cuda_mlp_units(factory(), host.api(), mlp, build_mlp_units(mlp));
  const Units cuda_gpt = cuda_gpt_units(factory(), host.api(), gpt, build_gpt_units(gpt));
  const Units cuda_llama = cuda_llama_units(factory(), host.api(), llama, build_llama_units(llama));
  for (const Units* units : {&cuda_mlp, &cuda_gpt, &cuda_llama}) {
    for (const auto& u : *units) {
      EXPECT_EQ(u->flags(), TESSERA_UNIT_SPLIT_BACKWARD | TESSERA_UNIT_TENSOR_PARALLEL |
                                TESSERA_UNIT_SEQUENCE_PARALLEL)
          << u->name();
    }
  }
  const auto expect_check_refuses = [](const Unit& unit, int32_t size, const std::string& key) {
    try {
      unit.check_tensor_parallel(size, 0);
      ADD_FAILURE() << unit.name() << " took a group of " << size;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  expect_check_refuses(*cuda_mlp[0], 5, "hidden[0]");
  expect_check_refuses(*cuda_gpt[1], 2, "heads");       // 3 heads
  expect_check_refuses(*cuda_llama[1], 4, "kv_heads");  // 2 key/value heads, not replicated
}

}  // namespace
}  // namespace tessera::model
