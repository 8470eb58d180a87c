// The ways of starting the same `tessera train` run that the multi-process
// tests compare: in-memory ranks as threads, Open MPI under mpirun, Gloo
// and NCCL under `tessera launch` (NCCL with stage_host, its ranks through
// nccl_rank.sh, which puts several on one GPU when there are fewer GPUs).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../support/child_process.hpp"
#include "../support/temp_dir.hpp"

namespace tessera::mptest {

using test::ChildExit;
using test::ChildProcess;
using test::eventually;
using test::processes_with_env;
using test::read_text;
using test::TempDir;

enum class Engine { kInmemory, kMpi, kGloo, kNccl };

const char* engine_name(Engine e) noexcept;

// Test-name suffix of a parameterised test over engines.
template <typename ParamInfo>
std::string engine_param_name(const ParamInfo& p) {
  return engine_name(p.param);
}

// Empty when `e` can run here; else why not (plugin not built, mpirun
// missing, no GPU for nccl), for GTEST_SKIP.
std::string engine_unavailable(Engine e);

// The command line that runs `tessera train config` with `ranks` ranks on
// `e`, followed by `sets` as --set overrides (backend.name and, for
// inmemory, run.world_size are added here). `mark` is put into every rank's
// environment as TESSERA_TEST_MARK so a test can find the rank processes.
std::vector<std::string> train_command(Engine e, int ranks, const std::filesystem::path& config,
                                       const std::vector<std::string>& sets,
                                       const std::string& mark);

// How a test starts a launcher (or the tessera command): with the
// environment it needs here (Open MPI as root, oversubscription, no
// TESSERA_PLUGIN_PATH), stdout and stderr both to `log`, in a process group
// of its own so that a kill reaches every rank it started.
test::ChildOptions launched(const std::filesystem::path& log);

// The environment key holding a rank's number for `e` (RANK for the
// launcher, OMPI_COMM_WORLD_RANK under mpirun).
const char* rank_env_key(Engine e) noexcept;

// Writes a small gpt training config (`strategy`, with 1 MB buckets for ddp
// and zero1; AdamW with eps 1e-5, synthetic text from the GPL, a checkpoint
// every `checkpoint_every` steps into `dir`/ckpt) to `dir`/run.toml and
// returns its path.
std::filesystem::path write_gpt_config(const std::filesystem::path& dir, int steps,
                                       int checkpoint_every, double timeout_s,
                                       const std::string& strategy = "ddp");

// The step `latest` names in the checkpoint directory `ckpt` (the last
// complete checkpoint), or -1 when there is none yet.
int64_t latest_step(const std::filesystem::path& ckpt);

// The largest |a[i] - b[i]| and the largest |b[i]|, for a relative
// comparison of a tensor with its reference (sizes must be equal).
struct TensorDiff {
  double max_abs_diff = 0;
  double max_abs_reference = 0;
};
TensorDiff tensor_diff(std::span<const float> a, std::span<const float> b);

// How close a multi-process result must be to its reference: max |a - b| /
// max |b| per tensor.
inline constexpr double kTolerance = 1e-5;

}  // namespace tessera::mptest
