// Gradient compression ([compression], compressor plugins) through the
// strategies' one reduction path: `none` is no compression at all, the
// bf16 compressor is the reduce_dtype option, fp16 stays within its
// rounding of f32 on ddp and zero1, the bytes sent follow each encoding's
// formula with the f32 volume reported beside them, and strategies that
// cannot use a compressor refuse it by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "strategy_support.hpp"

namespace tessera::test {
namespace {

// Skips unless the compressor plugin `name` is in the build tree.
#define TESSERA_REQUIRE_COMPRESSOR(name)                                       \
  do {                                                                         \
    if (registry().find(TESSERA_KIND_COMPRESSOR, name) == nullptr) {           \
      GTEST_SKIP() << "compressor '" << name << "' is not built in this tree"; \
    }                                                                          \
  } while (false)

// gpt on `world` ranks under `strategy`, its gradients in one bucket (so a
// bucket's encoding is the whole model's) unless `options` says otherwise.
RunSpec compressed(const std::string& strategy, int world, const std::string& compressor,
                   const std::string& compressor_options = "", const std::string& options = "") {
  RunSpec s = spec("gpt", strategy, world, options);
  if (!compressor.empty()) {
    s.extra_toml = "[compression]\nname = \"" + compressor + "\"\n";
    if (!compressor_options.empty()) {
      s.extra_toml += "[compression.options]\n" + compressor_options + "\n";
    }
  }
  return s;
}

const std::string kOneBucket = "first_bucket_mb = 64.0\nbucket_mb = 64.0";

void expect_replicas_agree(const train::RunResult& result) {
  for (size_t r = 1; r < result.final_state.size(); ++r) {
    EXPECT_EQ(first_bit_difference(result.final_state[r], result.final_state[0]), "")
        << "rank " << r << " differs from rank 0";
  }
}

TEST(Compression, NoneIsBitIdenticalToNoSection) {
  const train::RunResult plain = run(compressed("ddp", 2, ""));
  const train::RunResult none = run(compressed("ddp", 2, "none"));
  EXPECT_EQ(first_bit_difference(none.final_state[0], plain.final_state[0]), "");
  EXPECT_TRUE(none.plan.compressor.empty());
}

// The bf16 compressor is the SDK's cast, as reduce_dtype = "bf16" is: the
// same bits.
TEST(Compression, Bf16CompressorIsTheReduceDtypeOption) {
  TESSERA_REQUIRE_COMPRESSOR("bf16");
  const train::RunResult option = run(compressed("ddp", 2, "", "", "reduce_dtype = \"bf16\""));
  const train::RunResult plugin = run(compressed("ddp", 2, "bf16"));
  EXPECT_EQ(plugin.plan.compressor, "bf16");
  EXPECT_EQ(first_bit_difference(plugin.final_state[0], option.final_state[0]), "");
}

// f16 keeps 11 significant bits: after 20 AdamW steps the parameters stay
// within 1e-2 relative difference of the f32 run (as ddp's reduce_dtype =
// "f16" does), differ from it, and the replicas agree bit for bit.
TEST(Compression, Fp16StaysWithinItsRoundingOnDdpAndZero1) {
  TESSERA_REQUIRE_COMPRESSOR("fp16");
  for (const std::string strategy : {"ddp", "zero1"}) {  // NOLINT(performance-for-range-copy)
    const train::RunResult f32 = cached(compressed(strategy, 2, ""));
    const train::RunResult f16 = run(compressed(strategy, 2, "fp16"));
    std::string worst;
    const double d = max_param_rel_diff(merged(f16), merged(f32), &worst);
    EXPECT_LE(d, 1e-2) << strategy << ": " << worst;
    EXPECT_GT(d, 0.0) << strategy;
    if (strategy == "ddp") expect_replicas_agree(f16);
  }
}

// On 2 ranks with one bucket of Ψ gradients: a ring allreduce sends Ψ
// elements (4Ψ bytes in f32, 2Ψ as f16), an allgather of an encoding of E
// bytes sends E. top-k: k = ceil(ratio·Ψ) (index, value) pairs of 8 bytes;
// int8 with chunks of c: Ψ + 4·ceil(Ψ/c) bytes. The f32 volume is reported
// beside it, and the compressor's time.
TEST(Compression, BytesSentFollowEachEncoding) {
  const train::RunResult f32 = cached(compressed("ddp", 2, "", "", kOneBucket));
  const int64_t psi = f32.plan.parameters;
  ASSERT_GT(psi, 0);
  ASSERT_FALSE(f32.logged.empty());
  EXPECT_EQ(f32.logged.back().comm_bytes, 4 * psi);
  EXPECT_EQ(f32.logged.back().comm_bytes_raw, 4 * psi);
  struct Case {
    std::string name;
    std::string options;
    int64_t bytes;
  };
  const auto k = static_cast<int64_t>(std::ceil(0.01 * static_cast<double>(psi)));
  const Case cases[] = {
      {"fp16", "", 2 * psi},
      {"bf16", "", 2 * psi},
      {"topk", "ratio = 0.01", 8 * k},
      {"int8", "chunk = 64", psi + 4 * ((psi + 63) / 64)},
  };
  for (const Case& c : cases) {
    if (registry().find(TESSERA_KIND_COMPRESSOR, c.name) == nullptr) continue;
    const train::RunResult r = run(compressed("ddp", 2, c.name, c.options, kOneBucket));
    ASSERT_FALSE(r.logged.empty()) << c.name;
    EXPECT_EQ(r.logged.back().comm_bytes, c.bytes) << c.name;
    EXPECT_EQ(r.logged.back().comm_bytes_raw, 4 * psi) << c.name;
    EXPECT_GT(r.logged.back().compress_seconds, 0.0) << c.name;
  }
}

// Sharded gradients: fp16 reduce-scatters its encoding under zero2, zero3
// and fsdp and stays within its rounding of f32 there too.
TEST(Compression, Fp16StaysWithinItsRoundingWhenShardingGradients) {
  TESSERA_REQUIRE_COMPRESSOR("fp16");
  for (const char* strategy : {"zero2", "zero3", "fsdp"}) {
    const train::RunResult f32 = cached(compressed(strategy, 2, ""));
    const train::RunResult f16 = run(compressed(strategy, 2, "fp16"));
    std::string worst;
    const double d = max_param_rel_diff(merged(f16), merged(f32), &worst);
    EXPECT_LE(d, 1e-2) << strategy << ": " << worst;
    EXPECT_GT(d, 0.0) << strategy;
    ASSERT_FALSE(f16.logged.empty()) << strategy;
    EXPECT_LT(f16.logged.back().comm_bytes, f16.logged.back().comm_bytes_raw) << strategy;
  }
}

// Gather and collective compressors under the strategies that take them
// (zero2 allreduces each unit and keeps its piece): training goes on, the
// replicas' parameters agree bit for bit (every rank decodes the same sum),
// fewer bytes go out than f32 would send, and the loss falls.
TEST(Compression, GatherAndCollectiveKindsTrainUnderDdpZero1AndZero2) {
  TESSERA_REQUIRE_COMPRESSOR("topk");
  TESSERA_REQUIRE_COMPRESSOR("powersgd");
  for (const char* strategy : {"ddp", "zero1", "zero2"}) {
    for (const char* compressor : {"topk", "powersgd"}) {
      RunSpec s = compressed(strategy, 2, compressor,
                             std::string(compressor) == "topk" ? "ratio = 0.1" : "rank = 2");
      s.steps = 30;
      const train::RunResult r = run(s);
      RunSpec first = s;
      first.steps = 1;
      ASSERT_FALSE(r.logged.empty()) << strategy << " " << compressor;
      EXPECT_LT(r.final_loss, run(first).final_loss) << strategy << " " << compressor;
      EXPECT_LT(r.logged.back().comm_bytes, r.logged.back().comm_bytes_raw)
          << strategy << " " << compressor;
      expect_params_identical(r);
    }
  }
}

TEST(Compression, ZeroThreeAndFsdpRefuseCompressorsThatDoNotSum) {
  TESSERA_REQUIRE_COMPRESSOR("topk");
  for (const char* strategy : {"zero3", "fsdp"}) {
    const std::string msg = run_error(compressed(strategy, 2, "topk"));
    EXPECT_NE(msg.find("takes only summable compressors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("compressor 'topk' is of kind 'gather'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find(".hpp:"), std::string::npos) << "no source location: " << msg;
  }
}

TEST(Compression, StrategiesWithoutAGradientReductionRefuseIt) {
  TESSERA_REQUIRE_COMPRESSOR("fp16");
  for (const std::string strategy : {"none", "tensor"}) {  // NOLINT(performance-for-range-copy)
    const std::string msg = run_error(compressed(strategy, strategy == "none" ? 1 : 2, "fp16"));
    EXPECT_NE(msg.find("takes no gradient compressor ([compression] name = 'fp16')"),
              std::string::npos)
        << strategy << ": " << msg;
    EXPECT_NE(msg.find("strategy '" + strategy + "'"), std::string::npos) << msg;
  }
}

TEST(Compression, ReduceDtypeAndACompressorTogetherAreRefused) {
  TESSERA_REQUIRE_COMPRESSOR("fp16");
  const std::string msg = run_error(compressed("ddp", 2, "fp16", "", "reduce_dtype = \"bf16\""));
  EXPECT_NE(msg.find("option 'reduce_dtype' = 'bf16' and [compression] name = 'fp16' both "
                     "compress the gradients"),
            std::string::npos)
      << msg;
}

TEST(Compression, UnknownCompressorOptionIsNamed) {
  TESSERA_REQUIRE_COMPRESSOR("topk");
  const std::string msg = refusal(compressed("ddp", 2, "topk", "ratoi = 0.1"));
  EXPECT_NE(msg.find("[compression.options]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ratoi"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tessera::test
