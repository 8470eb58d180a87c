// The `pipeline` strategy with one process per rank: activations and their
// gradients cross process boundaries through the backend's point-to-point
// send and recv (Open MPI under mpirun, Gloo under `tessera launch`). Each
// case trains 20 AdamW steps with gradient clipping and compares the final
// full checkpoint, parameters and optimizer state, with the same config
// under `none` on one in-memory rank, within 1e-5 relative difference per
// tensor: gpipe, 1f1b with data-parallel replicas and a parameter tied
// across the first and last stage (gpt), interleaved chunks (llama), zb1 on
// four stages, and 1f1b on three stages with an uneven unit count. The
// `tensor` strategy the same way, its units' collectives between processes,
// and the `hybrid` strategy's meshes (dp x tp x pp) the same way.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoint_tensors.hpp"
#include "engines.hpp"
#include "tessera/core/train/checkpointing.hpp"

namespace tessera::mptest {
namespace {

constexpr int kPipeSteps = 20;
constexpr auto kPipeRunLimit = std::chrono::minutes(1);

// The tiny models of tests/strategies (gpt's head reuses the embedding's
// table, llama uses grouped-query attention); the unit counts are what the
// stages split.
const char* const kMlp3Units =
    "name = \"mlp\"\ninput = 16\nhidden = [32, 24]\nclasses = 5\nactivation = \"gelu\"\n";
const char* const kMlp4Units =
    "name = \"mlp\"\ninput = 16\nhidden = [32, 24, 16]\nclasses = 5\nactivation = \"gelu\"\n";
const char* const kGpt4Units =
    "name = \"gpt\"\nlayers = 2\nd_model = 32\nheads = 2\nseq_len = 16\nvocab = 64\n";
const char* const kGpt5Units =
    "name = \"gpt\"\nlayers = 3\nd_model = 32\nheads = 2\nseq_len = 16\nvocab = 64\n";
const char* const kLlama4Units =
    "name = \"llama\"\nlayers = 2\nd_model = 16\nheads = 4\nkv_heads = 2\nseq_len = 8\n"
    "vocab = 32\n";

struct PipeCase {
  std::string name;  // test-name suffix
  const char* model_table;
  std::string schedule;
  int stages;
  int processes;
  int micro_batches;
  int virtual_stages = 0;  // interleaved only
};

void PrintTo(const PipeCase& c, std::ostream* os) { *os << c.name; }

// The run's config: synthetic data, a batch of 12, AdamW with clipping
// (eps 1e-5, as tests/strategies explains), one full checkpoint at the last
// step. Strategy, backend and checkpoint directory are set per run.
std::filesystem::path write_pipe_config(const std::filesystem::path& dir, const PipeCase& c) {
  auto path = dir / "run.toml";
  std::ofstream out(path);
  out << "[run]\nsteps = " << kPipeSteps << "\nseed = 7\nlog_every = " << kPipeSteps << "\n\n"
      << "[backend]\ntimeout_s = 30\n\n"
      << "[strategy]\nname = \"none\"\n\n"
      << "[model]\n"
      << c.model_table << "\n"
      << "[data]\nkind = \"synthetic\"\nbatch_size = 12\nmicro_batches = " << c.micro_batches
      << "\n\n"
      << "[optimizer]\nname = \"adamw\"\nlr = 3e-3\neps = 1e-5\nweight_decay = 0.01\n"
      << "grad_clip = 1.0\nwarmup_steps = 2\n\n"
      << "[checkpoint]\nevery = " << kPipeSteps << "\n";
  if (!out) throw std::runtime_error("cannot write " + path.string());
  return path;
}

// Runs the config with `strategy` (and its inline options table) on
// `ranks` ranks of `e`, checkpoints into `dir`/<tag>; returns the final
// checkpoint, which must be a full one of step 20 written by `strategy` on
// `ranks` ranks (a test failure with the log and nullopt otherwise: mpirun
// with --enable-recovery exits 0 whatever its ranks did).
std::optional<std::filesystem::path> train_to_checkpoint(
    Engine e, int ranks, const std::string& strategy, const std::string& options,
    const std::filesystem::path& config, const std::filesystem::path& dir, const std::string& tag) {
  const auto ckpt = dir / tag;
  const auto log = dir / (tag + ".log");
  ChildProcess child(
      train_command(e, ranks, config,
                    {"strategy.name=\"" + strategy + "\"", "strategy.options=" + options,
                     "checkpoint.dir=\"" + ckpt.string() + "\""},
                    tag),
      launched(log));
  const ChildExit exit = child.wait(kPipeRunLimit);
  EXPECT_TRUE(exit.ok()) << tag << " run " << exit.describe() << ":\n" << read_text(log);
  if (!exit.ok()) return std::nullopt;
  const auto latest = train::find_latest_checkpoint(ckpt);
  if (!latest) {
    ADD_FAILURE() << tag << ": no checkpoint in " << ckpt << ":\n" << read_text(log);
    return std::nullopt;
  }
  const bool as_expected = latest->step == kPipeSteps &&
                           latest->format == train::CheckpointFormat::full &&
                           latest->metadata.at("strategy") == strategy &&
                           latest->metadata.at("world_size") == std::to_string(ranks);
  EXPECT_TRUE(as_expected) << latest->file << ": step " << latest->step << ", strategy "
                           << latest->metadata.at("strategy") << ", world_size "
                           << latest->metadata.at("world_size") << "; expected a full checkpoint "
                           << "of step " << kPipeSteps << " by " << strategy << " on " << ranks
                           << " ranks";
  if (!as_expected) return std::nullopt;
  return latest->file;
}

class PipelineProcesses : public ::testing::TestWithParam<std::tuple<Engine, PipeCase>> {};

TEST_P(PipelineProcesses, MatchesNoneOnOneRank) {
  const auto& [engine, c] = GetParam();
  if (const std::string why = engine_unavailable(engine); !why.empty()) GTEST_SKIP() << why;
  const std::string name = std::string(engine_name(engine)) + "-" + c.name;
  const TempDir dir("pipeline-" + name);
  const auto config = write_pipe_config(dir.path(), c);

  const auto expected =
      train_to_checkpoint(Engine::kInmemory, 1, "none", "{}", config, dir.path(), "none");
  std::string options =
      "{stages = " + std::to_string(c.stages) + ", schedule = \"" + c.schedule + "\"";
  if (c.virtual_stages != 0) options += ", virtual_stages = " + std::to_string(c.virtual_stages);
  options += "}";
  const auto actual = train_to_checkpoint(engine, c.processes, "pipeline", options, config,
                                          dir.path(), "pipeline-" + name);
  if (!expected || !actual) return;
  expect_close(tensors_of_file(*actual), tensors_of_file(*expected),
               "pipeline " + options + " on " + std::to_string(c.processes) + " " +
                   engine_name(engine) + " processes");
}

// 2-4 processes, every schedule; keep each case small: the whole suite runs
// twice (mpi and gloo) on a two-core machine.
INSTANTIATE_TEST_SUITE_P(
    Backends, PipelineProcesses,
    ::testing::Combine(
        ::testing::Values(Engine::kMpi, Engine::kGloo),
        ::testing::Values(PipeCase{"mlp_gpipe_2stages", kMlp3Units, "gpipe", 2, 2, 2},
                          // The embedding (stage 0) and the head (stage 1) share wte.
                          PipeCase{"gpt_1f1b_2stages_2replicas", kGpt4Units, "1f1b", 2, 4, 2},
                          // 2 stages x 2 chunks over the 4 units.
                          PipeCase{"llama_interleaved_2stages_v2", kLlama4Units, "interleaved", 2,
                                   2, 4, 2},
                          PipeCase{"mlp_zb1_4stages_8micro", kMlp4Units, "zb1", 4, 4, 8},
                          // 5 units on 3 stages.
                          PipeCase{"gpt_1f1b_3stages_uneven", kGpt5Units, "1f1b", 3, 3, 3})),
    [](const ::testing::TestParamInfo<std::tuple<Engine, PipeCase>>& p) {
      return std::string(engine_name(std::get<0>(p.param))) + "_" + std::get<1>(p.param).name;
    });

// The `tensor` strategy with one process per rank: the units' allreduces
// (and mlp's allgather) inside forward and backward go through the backend
// between processes. tp 2 on mlp, gpt with 2 replicas of tp 2 (its
// vocabulary-parallel embedding and tied head), llama's grouped key/value
// heads split over tp 2; and the same in sequence mode (allgathers and
// reduce-scatters of the token rows, the replicated gradients summed).
struct TensorCase {
  std::string name;
  const char* model_table;
  int tp;
  int processes;
  bool sequence = false;
};

void PrintTo(const TensorCase& c, std::ostream* os) { *os << c.name; }

class TensorProcesses : public ::testing::TestWithParam<std::tuple<Engine, TensorCase>> {};

TEST_P(TensorProcesses, MatchesNoneOnOneRank) {
  const auto& [engine, c] = GetParam();
  if (const std::string why = engine_unavailable(engine); !why.empty()) GTEST_SKIP() << why;
  const std::string name = std::string(engine_name(engine)) + "-" + c.name;
  const TempDir dir("tensor-" + name);
  const auto config = write_pipe_config(dir.path(), PipeCase{c.name, c.model_table, "", 0, 0, 1});
  const auto expected =
      train_to_checkpoint(Engine::kInmemory, 1, "none", "{}", config, dir.path(), "none");
  const std::string options =
      "{size = " + std::to_string(c.tp) + (c.sequence ? ", mode = \"sequence\"}" : "}");
  const auto actual = train_to_checkpoint(engine, c.processes, "tensor", options, config,
                                          dir.path(), "tensor-" + name);
  if (!expected || !actual) return;
  expect_close(tensors_of_file(*actual), tensors_of_file(*expected),
               "tensor " + options + " on " + std::to_string(c.processes) + " " +
                   engine_name(engine) + " processes");
}

INSTANTIATE_TEST_SUITE_P(
    Backends, TensorProcesses,
    ::testing::Combine(
        ::testing::Values(Engine::kMpi, Engine::kGloo),
        ::testing::Values(TensorCase{"mlp_tp2", kMlp3Units, 2, 2},
                          TensorCase{"gpt_tp2_2replicas", kGpt4Units, 2, 4},
                          TensorCase{"llama_gqa_tp2", kLlama4Units, 2, 2},
                          TensorCase{"mlp_sequence_tp2", kMlp3Units, 2, 2, true},
                          TensorCase{"gpt_sequence_tp2_2replicas", kGpt4Units, 2, 4, true},
                          TensorCase{"llama_gqa_sequence_tp2", kLlama4Units, 2, 2, true})),
    [](const ::testing::TestParamInfo<std::tuple<Engine, TensorCase>>& p) {
      return std::string(engine_name(std::get<0>(p.param))) + "_" + std::get<1>(p.param).name;
    });

// The `hybrid` strategy with one process per rank: gpt on a dp x tp x pp
// mesh of 4 processes, 2 replicas of tp 2 on one stage and tp 2 inside each
// of 2 stages (activations between the stages, the tied embedding's
// gradient summed across them, the units' collectives inside each stage).
struct HybridCase {
  std::string name;
  int dp;
  int tp;
  int pp;
};

void PrintTo(const HybridCase& c, std::ostream* os) { *os << c.name; }

class HybridProcesses : public ::testing::TestWithParam<std::tuple<Engine, HybridCase>> {};

TEST_P(HybridProcesses, MatchesNoneOnOneRank) {
  const auto& [engine, c] = GetParam();
  if (const std::string why = engine_unavailable(engine); !why.empty()) GTEST_SKIP() << why;
  const std::string name = std::string(engine_name(engine)) + "-" + c.name;
  const TempDir dir("hybrid-" + name);
  const auto config = write_pipe_config(dir.path(), PipeCase{c.name, kGpt4Units, "", 0, 0, 2});
  const auto expected =
      train_to_checkpoint(Engine::kInmemory, 1, "none", "{}", config, dir.path(), "none");
  const std::string options = "{dp = " + std::to_string(c.dp) + ", tp = " + std::to_string(c.tp) +
                              ", pp = " + std::to_string(c.pp) + "}";
  const int processes = c.dp * c.tp * c.pp;
  const auto actual = train_to_checkpoint(engine, processes, "hybrid", options, config, dir.path(),
                                          "hybrid-" + name);
  if (!expected || !actual) return;
  expect_close(tensors_of_file(*actual), tensors_of_file(*expected),
               "hybrid " + options + " on " + std::to_string(processes) + " " +
                   engine_name(engine) + " processes");
}

INSTANTIATE_TEST_SUITE_P(
    Backends, HybridProcesses,
    ::testing::Combine(::testing::Values(Engine::kMpi, Engine::kGloo),
                       ::testing::Values(HybridCase{"gpt_dp2_tp2_pp1", 2, 2, 1},
                                         HybridCase{"gpt_dp1_tp2_pp2", 1, 2, 2})),
    [](const ::testing::TestParamInfo<std::tuple<Engine, HybridCase>>& p) {
      return std::string(engine_name(std::get<0>(p.param))) + "_" + std::get<1>(p.param).name;
    });

}  // namespace
}  // namespace tessera::mptest
