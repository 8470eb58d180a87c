#include "engines.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "tessera/core/train/checkpointing.hpp"

#ifndef TESSERA_MP_TESSERA
#error "TESSERA_MP_TESSERA must name the tessera executable"
#endif
#ifndef TESSERA_MP_PLUGIN_DIR
#error "TESSERA_MP_PLUGIN_DIR must name the build tree's plugin directory"
#endif
#ifndef TESSERA_MP_MPIEXEC
#define TESSERA_MP_MPIEXEC ""
#endif
#ifndef TESSERA_MP_NCCL_RANK
#error "TESSERA_MP_NCCL_RANK must name tests/multiprocess/nccl_rank.sh"
#endif

namespace tessera::mptest {

const char* engine_name(Engine e) noexcept {
  switch (e) {
    case Engine::kInmemory:
      return "inmemory";
    case Engine::kMpi:
      return "mpi";
    case Engine::kGloo:
      return "gloo";
    case Engine::kNccl:
      return "nccl";
  }
  return "?";
}

std::string engine_unavailable(Engine e) {
  const std::filesystem::path plugin =
      std::filesystem::path(TESSERA_MP_PLUGIN_DIR) /
      (std::string("libtessera_backend_") + engine_name(e) + ".so");
  if (!std::filesystem::exists(plugin)) {
    return std::string("backend plugin '") + engine_name(e) + "' was not built (" +
           plugin.filename().string() + " missing: its engine was not found at configure time)";
  }
  if (e == Engine::kMpi && std::string(TESSERA_MP_MPIEXEC).empty()) {
    return "mpirun was not found at configure time";
  }
  if (e == Engine::kNccl && !std::filesystem::exists("/dev/nvidia0")) {
    return "no NVIDIA GPU here (/dev/nvidia0 missing): the nccl runs need one";
  }
  return {};
}

test::ChildOptions launched(const std::filesystem::path& log) {
  test::ChildOptions options;
  options.set = {{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
                 {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
                 {"OMPI_MCA_rmaps_base_oversubscribe", "1"},
                 {"TESSERA_PLUGIN_PATH", ""}};
  options.output = test::ChildOutput::kFile;
  options.log = log;
  options.own_group = true;
  return options;
}

const char* rank_env_key(Engine e) noexcept {
  return e == Engine::kMpi ? "OMPI_COMM_WORLD_RANK" : "RANK";
}

std::vector<std::string> train_command(Engine e, int ranks, const std::filesystem::path& config,
                                       const std::vector<std::string>& sets,
                                       const std::string& mark) {
  std::vector<std::string> cmd;
  const std::string n = std::to_string(ranks);
  switch (e) {
    case Engine::kInmemory:
      break;
    case Engine::kMpi:
      // --enable-recovery: a rank that dies does not make mpirun kill the
      // others, so they report the lost peer themselves.
      cmd = {TESSERA_MP_MPIEXEC,         "--oversubscribe", "--enable-recovery", "-np", n, "-x",
             "TESSERA_TEST_MARK=" + mark};
      break;
    case Engine::kGloo:
      cmd = {TESSERA_MP_TESSERA, "launch", "-n", n, "--run-id", mark, "--"};
      break;
    case Engine::kNccl:
      cmd = {TESSERA_MP_TESSERA,  "launch", "-n", n, "--run-id", mark, "--", "sh",
             TESSERA_MP_NCCL_RANK};
      break;
  }
  cmd.insert(cmd.end(), {TESSERA_MP_TESSERA, "train", config.string(), "--set",
                         std::string("backend.name=\"") + engine_name(e) + "\"", "--set",
                         "run.world_size=" + n});
  // The models compute on the host: nccl stages their buffers.
  if (e == Engine::kNccl) cmd.insert(cmd.end(), {"--set", "backend.options.stage_host=true"});
  for (const auto& s : sets) cmd.insert(cmd.end(), {"--set", s});
  return cmd;
}

std::filesystem::path write_gpt_config(const std::filesystem::path& dir, int steps,
                                       int checkpoint_every, double timeout_s,
                                       const std::string& strategy) {
  const auto path = dir / "run.toml";
  std::ofstream out(path);
  out << "[run]\nsteps = " << steps << "\nseed = 7\nlog_every = 1\n\n"
      << "[backend]\ntimeout_s = " << timeout_s << "\n\n"
      << "[strategy]\nname = \"" << strategy << "\"\n\n";
  if (strategy == "ddp" || strategy == "zero1") out << "[strategy.options]\nbucket_mb = 1\n\n";
  out << "[model]\nname = \"gpt\"\nlayers = 2\nd_model = 32\nheads = 2\nseq_len = 16\n"
      << "vocab = 256\n\n"
      << "[data]\nkind = \"text\"\npath = \"/usr/share/common-licenses/GPL-3\"\n"
      << "batch_size = 12\n\n"
      << "[optimizer]\nname = \"adamw\"\nlr = 3e-3\neps = 1e-5\nweight_decay = 0.01\n"
      << "grad_clip = 1.0\n\n"
      << "[checkpoint]\ndir = \"" << (dir / "ckpt").string() << "\"\nevery = " << checkpoint_every
      << "\n";
  if (!out) throw std::runtime_error("cannot write " + path.string());
  return path;
}

int64_t latest_step(const std::filesystem::path& ckpt) {
  const std::string text = read_text(ckpt / "latest");
  const auto step = train::parse_checkpoint_dir_name(text.substr(0, text.find('\n')));
  return step ? *step : -1;
}

TensorDiff tensor_diff(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) throw std::invalid_argument("tensor_diff: sizes differ");
  TensorDiff d;
  for (size_t i = 0; i < a.size(); ++i) {
    d.max_abs_diff = std::max(d.max_abs_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    d.max_abs_reference = std::max(d.max_abs_reference, std::fabs(static_cast<double>(b[i])));
  }
  return d;
}

}  // namespace tessera::mptest
