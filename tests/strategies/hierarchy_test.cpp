// Hierarchical gradient reduction (strategy option hierarchy = "node") of
// ddp and zero1: the same training as the flat collectives within the f32
// tolerance, replicas bit-identical, zero1's shards where the flat grid
// puts them; the bytes sent across nodes (the inter-node communicator)
// and in all follow the formulas exactly; ranks_per_node comes from the
// option or the environment and must divide the world; a 16-bit or
// compressed cross-node allreduce stays within its rounding.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "strategy_support.hpp"

namespace tessera::test {
namespace {

// One bucket holds these models, so a step's bytes are one bucket's.
constexpr const char* kOneBucketOptions = "first_bucket_mb = 64.0\nbucket_mb = 64.0";

std::string node_options(int ranks_per_node, const std::string& more = kOneBucketOptions) {
  return "hierarchy = \"node\"\nranks_per_node = " + std::to_string(ranks_per_node) + "\n" + more;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Ring allreduce volume of `bytes` over `p` ranks, in whole bytes as
// CommView::bytes_sent counts it.
int64_t ring_allreduce(int64_t bytes, int64_t p) { return p <= 1 ? 0 : 2 * (p - 1) * bytes / p; }

// (tensor, rank, offset, elements) of every piece the ranks wrote.
std::vector<std::tuple<std::string, int, uint64_t, size_t>> piece_layout(
    const train::RunResult& result) {
  std::vector<std::tuple<std::string, int, uint64_t, size_t>> pieces;
  for (size_t r = 0; r < result.final_state.size(); ++r) {
    for (const auto& [name, tensor] : result.final_state[r].tensors) {
      for (const auto& p : tensor.pieces) {
        pieces.emplace_back(name, static_cast<int>(r), p.offset, p.values.size());
      }
    }
  }
  return pieces;
}

// Sets an environment variable for the scope (the ranks are threads of
// this process, so they all read it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    ::setenv(name, value, 1);  // NOLINT(concurrency-mt-unsafe): no run in flight
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { ::unsetenv(name_); }  // NOLINT(concurrency-mt-unsafe)

 private:
  const char* name_;
};

// ddp on 4 ranks as 2 nodes of 2 and on 6 ranks as 2 nodes of 3: the sums
// are taken in another order than the flat allreduce's, so the parameters
// agree within the f32 tolerance, and the replicas agree bit for bit. mlp's
// Ψ is odd, so its bucket is padded into a COMM copy of L·ceil(Ψ/L)
// elements while in flight; gpt's (a multiple of 12) is reduced in place.
TEST(Hierarchy, DdpMatchesTheFlatAllreduce) {
  for (const auto& [model, world, per_node] :
       {std::tuple<std::string, int, int>{"gpt", 4, 2}, {"mlp", 4, 2}, {"gpt", 6, 3}}) {
    const std::string where = model + " on " + std::to_string(world) + " ranks";
    const train::RunResult& flat = cached(spec(model, "ddp", world, kOneBucketOptions));
    const train::RunResult& hier = cached(spec(model, "ddp", world, node_options(per_node)));
    ASSERT_EQ(hier.final_state.size(), static_cast<size_t>(world)) << where;
    std::string worst;
    EXPECT_LE(max_param_rel_diff(hier.final_state[0], flat.final_state[0], &worst), kTolerance)
        << where << ": " << worst;
    expect_params_identical(hier);
    const int64_t psi = hier.plan.parameters;
    const int64_t padded = per_node * ceil_div(psi, per_node);
    for (size_t r = 0; r < hier.memory.size(); ++r) {
      EXPECT_EQ(hier.memory[r].peak[TESSERA_MEM_COMM], padded == psi ? 0 : 4 * padded)
          << where << ", rank " << r;
    }
  }
}

// Many buckets of odd sizes (each padded into its own COMM copy), started
// during the backward or after it: the cross-node allreduces chained
// behind the node-level reduce-scatters give the same bits either way, and
// stay within the f32 tolerance of the flat run.
TEST(Hierarchy, DdpManyBucketsWithAndWithoutOverlap) {
  const std::string small = "bucket_mb = 0.002\nfirst_bucket_mb = 0.001";
  const train::RunResult& flat = cached(spec("mlp", "ddp", 4, small));
  const train::RunResult& on = cached(spec("mlp", "ddp", 4, node_options(2, small)));
  const train::RunResult& off =
      cached(spec("mlp", "ddp", 4, node_options(2, small + "\noverlap = false")));
  EXPECT_EQ(first_bit_difference(off.final_state[0], on.final_state[0]), "");
  std::string worst;
  EXPECT_LE(max_param_rel_diff(on.final_state[0], flat.final_state[0], &worst), kTolerance)
      << worst;
  expect_params_identical(on);
  // Per bucket of Ψ_b, the allreduce of ceil(Ψ_b/2) elements across the 2
  // nodes sends 4·ceil(Ψ_b/2) bytes: at least 4·ceil(Ψ/2) in all (Ψ is
  // odd, so some bucket is), and well under the flat 4·Ψ·3/2.
  const int64_t psi = on.plan.parameters;
  ASSERT_NE(psi % 2, 0);
  EXPECT_GE(on.logged.back().comm_bytes_cross_node, 4 * ceil_div(psi, 2));
  EXPECT_LT(on.logged.back().comm_bytes_cross_node, 4 * psi);
  EXPECT_EQ(flat.logged.back().comm_bytes_cross_node, 0);
  // The odd buckets' padded copies: tracked, and never more than the
  // gradients once over (plus their padding).
  for (size_t r = 0; r < on.memory.size(); ++r) {
    EXPECT_GT(on.memory[r].peak[TESSERA_MEM_COMM], 0) << "rank " << r;
    EXPECT_LT(on.memory[r].peak[TESSERA_MEM_COMM], 8 * psi) << "rank " << r;
  }
}

// zero1 on 4 ranks as 2 nodes of 2 (mlp: padded shards) and 6 as 2 of 3,
// with one bucket and with many: the parameters within the f32 tolerance
// of the flat grid, the replicas bit-identical, and every rank writes the
// same pieces of the parameters and the optimizer state as in the flat run
// (its shard is the flat grid's blocks).
TEST(Hierarchy, Zero1MatchesTheFlatGridAndKeepsItsShards) {
  const std::string small = "bucket_mb = 0.002\nfirst_bucket_mb = 0.001";
  for (const auto& [model, world, per_node, buckets] :
       {std::tuple<std::string, int, int, std::string>{"mlp", 4, 2, kOneBucketOptions},
        {"mlp", 4, 2, small},
        {"gpt", 6, 3, kOneBucketOptions}}) {
    std::string where = model;
    where += " on " + std::to_string(world) + " ranks, " + buckets;
    const train::RunResult& flat = cached(uneven_spec(model, "zero1", world, buckets));
    const train::RunResult& hier =
        cached(uneven_spec(model, "zero1", world, node_options(per_node, buckets)));
    ASSERT_EQ(hier.final_state.size(), static_cast<size_t>(world)) << where;
    std::string worst;
    EXPECT_LE(max_param_rel_diff(merged(hier), merged(flat), &worst), kTolerance)
        << where << ": " << worst;
    expect_params_identical(hier);
    EXPECT_EQ(piece_layout(hier), piece_layout(flat)) << where;
  }
}

// ddp, one bucket of Ψ on N = M·L ranks: the node's reduce-scatter and
// allgather of the bucket padded to L·b (b = ceil(Ψ/L)) send (L-1)·4b
// each per rank, and the allreduce of the rank's block across the M nodes
// 2(M-1)/M·4b: that alone is comm_bytes_cross_node. Flat, nothing is
// counted across nodes.
TEST(Hierarchy, DdpCrossNodeBytesAreTheBlockAllreduce) {
  for (const auto& [model, world, per_node] :
       {std::tuple<std::string, int, int>{"gpt", 4, 2}, {"mlp", 4, 2}, {"gpt", 6, 3}}) {
    const std::string where = model + " on " + std::to_string(world) + " ranks";
    const train::RunResult& hier = cached(spec(model, "ddp", world, node_options(per_node)));
    const train::RunResult& flat = cached(spec(model, "ddp", world, kOneBucketOptions));
    const int64_t psi = hier.plan.parameters;
    const int64_t nodes = world / per_node;
    const int64_t block = ceil_div(psi, per_node);
    ASSERT_FALSE(hier.logged.empty());
    const int64_t cross = ring_allreduce(4 * block, nodes);
    EXPECT_EQ(hier.logged.back().comm_bytes_cross_node, cross) << where;
    EXPECT_EQ(hier.logged.back().comm_bytes, 2 * int64_t{per_node - 1} * 4 * block + cross)
        << where;
    EXPECT_EQ(flat.logged.back().comm_bytes_cross_node, 0) << where;
    EXPECT_EQ(flat.logged.back().comm_bytes, ring_allreduce(4 * psi, world)) << where;
  }
}

// zero1 on N = M·L ranks, shard S = ceil(Ψ/N) per rank: across the nodes
// each rank reduce-scatters and allgathers its M blocks of S ((M-1)·4S
// each); inside the node the reduce-scatter and allgather of M·L blocks
// send (L-1)·4·M·S each; plus the world's norm allreduce.
TEST(Hierarchy, Zero1CrossNodeBytesAreOneLthOfTheGrid) {
  for (const auto& [world, per_node] : {std::pair{4, 2}, std::pair{6, 3}}) {
    const train::RunResult& hier =
        cached(uneven_spec("gpt", "zero1", world, node_options(per_node)));
    const int64_t psi = hier.plan.parameters;
    const int64_t nodes = world / per_node;
    const int64_t shard = ceil_div(psi, world);
    ASSERT_FALSE(hier.logged.empty());
    EXPECT_EQ(hier.logged.back().comm_bytes_cross_node, 2 * (nodes - 1) * 4 * shard)
        << world << " ranks";
    EXPECT_EQ(hier.logged.back().comm_bytes, 2 * int64_t{per_node - 1} * 4 * nodes * shard +
                                                 2 * (nodes - 1) * 4 * shard + norm_bytes(world))
        << world << " ranks";
  }
}

// ranks_per_node = 0 takes LOCAL_WORLD_SIZE, else OMPI_COMM_WORLD_LOCAL_SIZE:
// the same run as the option; a value that does not divide the world is
// refused naming the variable.
TEST(Hierarchy, RanksPerNodeFromTheEnvironment) {
  const train::RunResult& option = cached(spec("gpt", "ddp", 4, node_options(2)));
  {
    const ScopedEnv env("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    const train::RunResult from_env = run(spec("gpt", "ddp", 4, node_options(0)));
    EXPECT_EQ(first_bit_difference(from_env.final_state[0], option.final_state[0]), "");
    EXPECT_EQ(from_env.logged.back().comm_bytes_cross_node,
              option.logged.back().comm_bytes_cross_node);
  }
  const ScopedEnv env("LOCAL_WORLD_SIZE", "3");
  const std::string msg = refusal(spec("gpt", "ddp", 4, node_options(0)));
  EXPECT_NE(msg.find("LOCAL_WORLD_SIZE = 3 does not divide the world size 4"), std::string::npos)
      << msg;
}

// No local size anywhere: the world is one node, nothing crosses nodes,
// and the result is the node-level reduce-scatter and allgather's.
TEST(Hierarchy, OneNodeSendsNothingAcross) {
  const train::RunResult result = run(spec("gpt", "ddp", 2, node_options(0)));
  const train::RunResult& flat = cached(spec("gpt", "ddp", 2, kOneBucketOptions));
  ASSERT_FALSE(result.logged.empty());
  EXPECT_EQ(result.logged.back().comm_bytes_cross_node, 0);
  EXPECT_EQ(result.logged.back().comm_bytes, flat.logged.back().comm_bytes);
  std::string worst;
  EXPECT_LE(max_param_rel_diff(result.final_state[0], flat.final_state[0], &worst), kTolerance)
      << worst;
}

TEST(Hierarchy, RanksPerNodeMustDivideTheWorld) {
  for (const std::string strategy : {"ddp", "zero1"}) {
    std::string msg = refusal(spec("mlp", strategy, 4, node_options(3)));
    EXPECT_NE(msg.find(strategy + ": option 'ranks_per_node' = 3 does not divide the world size 4"),
              std::string::npos)
        << msg;
    msg = refusal(spec("mlp", strategy, 4, node_options(-1)));
    EXPECT_NE(msg.find("option 'ranks_per_node' = -1 must be >= 1"), std::string::npos) << msg;
    msg = refusal(spec("mlp", strategy, 4, "hierarchy = \"ring\""));
    EXPECT_NE(msg.find("option 'hierarchy' = 'ring' is not one of none, node"), std::string::npos)
        << msg;
    // Given with hierarchy = "none", it is checked all the same.
    msg = refusal(spec("mlp", strategy, 4, "ranks_per_node = 3"));
    EXPECT_NE(msg.find("option 'ranks_per_node' = 3"), std::string::npos) << msg;
  }
}

// reduce_dtype = "bf16" rounds only the cross-node allreduce of the node
// sums (the node-level phases stay f32): within bf16's tolerance of the
// f32 run (5e-2 relative after 20 steps, as for the flat bf16 run in
// ddp_options_test.cpp) but not equal to it, replicas bit-identical, and
// the cross-node bytes halved while comm_bytes_raw reports the f32 volume.
TEST(Hierarchy, SixteenBitCrossNodeAllreduce) {
  const train::RunResult& f32 = cached(spec("gpt", "ddp", 4, node_options(2)));
  const train::RunResult& bf16 =
      cached(spec("gpt", "ddp", 4, node_options(2) + "\nreduce_dtype = \"bf16\""));
  std::string worst;
  const double d = max_param_rel_diff(bf16.final_state[0], f32.final_state[0], &worst);
  EXPECT_LE(d, 5e-2) << worst;
  EXPECT_GT(d, 0.0);
  expect_params_identical(bf16);
  const int64_t block = ceil_div(f32.plan.parameters, 2);
  EXPECT_EQ(bf16.logged.back().comm_bytes_cross_node, ring_allreduce(2 * block, 2));
  EXPECT_EQ(bf16.logged.back().comm_bytes_raw, f32.logged.back().comm_bytes);
}

// The bf16 compressor plugin, when this tree builds it: hierarchical + bf16
// against flat + bf16, both rounding gradients to 8 significant bits at
// different points (each rank's gradient flat, the node sums here), so
// within 5e-2 relative of each other after 20 steps.
TEST(Hierarchy, CompressorOnTheCrossNodeAllreduce) {
  if (registry().find(TESSERA_KIND_COMPRESSOR, "bf16") == nullptr) {
    GTEST_SKIP() << "compressor 'bf16' is not built in this tree";
  }
  RunSpec flat = spec("gpt", "ddp", 4, kOneBucketOptions);
  RunSpec hier = spec("gpt", "ddp", 4, node_options(2));
  flat.extra_toml = hier.extra_toml = "[compression]\nname = \"bf16\"\n";
  const train::RunResult& a = cached(flat);
  const train::RunResult& b = cached(hier);
  std::string worst;
  EXPECT_LE(max_param_rel_diff(b.final_state[0], a.final_state[0], &worst), 5e-2) << worst;
  expect_params_identical(b);
  EXPECT_EQ(b.logged.back().comm_bytes_cross_node,
            ring_allreduce(2 * ceil_div(b.plan.parameters, 2), 2));
}

}  // namespace
}  // namespace tessera::test
