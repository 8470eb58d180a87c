// `tessera train` and the files of a run: a FIFO given as the config is
// refused instead of blocking; a second run on a checkpoint.dir that a run
// in progress holds exits 1 naming that run's pid; --dry-run checks
// checkpoint.dir without creating it. Every command runs with a deadline.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/line_hook.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/train/trainer.hpp"

#ifndef TESSERA_CLI_EXE
#error "TESSERA_CLI_EXE must name the built tessera executable"
#endif
#ifndef TESSERA_CLI_PLUGIN_DIR
#error "TESSERA_CLI_PLUGIN_DIR must name the build tree's plugin directory"
#endif

extern char** environ;

namespace tessera {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed at the end of the test.
class Scratch {
 public:
  Scratch() {
    std::random_device rd;
    path_ = fs::temp_directory_path() /
            ("tessera_cli_files_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }
  [[nodiscard]] fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct CliResult {
  int exit_code = -1;  // -1: killed at the deadline or by a signal
  std::string out;
  std::string err;
};

// Runs the tessera executable with `args`, its output in files under `dir`;
// kills it after `seconds`.
CliResult run_cli(const std::vector<std::string>& args, const fs::path& dir, int seconds) {
  static int serial = 0;
  const std::string tag = std::to_string(serial++);
  const fs::path out = dir / ("out" + tag + ".txt");
  const fs::path err = dir / ("err" + tag + ".txt");
  std::vector<std::string> argv_text = {TESSERA_CLI_EXE};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  CliResult result;
  if (spawned != 0) {
    ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(spawned);
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "tessera did not finish within " << seconds << " s (blocked?)";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  result.out = slurp(out);
  result.err = slurp(err);
  return result;
}

TEST(CliFiles, FifoConfigIsRefusedWithoutBlocking) {
  Scratch dir;
  const fs::path fifo = dir / "run.toml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const CliResult r = run_cli({"train", fifo.string()}, dir.path(), 20);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err,
            "tessera: error: config file '" + fifo.string() + "' is a FIFO, not a regular file\n");
}

// A tiny mlp run of `steps` steps checkpointing every 2 into `ckpt`.
std::string mlp_config(const fs::path& ckpt, int steps) {
  std::ostringstream t;
  t << "[run]\nworld_size = 1\nsteps = " << steps << "\nseed = 3\nlog_every = 1\n"
    << "[strategy]\nname = \"none\"\n"
    << "[model]\nname = \"mlp\"\ninput = 8\nhidden = [16]\nclasses = 4\n"
    << "[data]\nkind = \"synthetic\"\nbatch_size = 16\n"
    << "[optimizer]\nname = \"adamw\"\nlr = 0.01\n"
    << "[checkpoint]\ndir = \"" << ckpt.string() << "\"\nevery = 2\n";
  return t.str();
}

const PluginRegistry& registry() {
  static const std::unique_ptr<PluginRegistry> r = [] {
    auto p = std::make_unique<PluginRegistry>();
    p->scan({TESSERA_CLI_PLUGIN_DIR});
    return p;
  }();
  return *r;
}

// Run A trains in this process; between its steps 2 and 3 the CLI starts
// run B on the same checkpoint.dir: B exits 1 naming A's pid before any
// step, and A ends with only its own checkpoints.
TEST(CliFiles, SecondRunOnAHeldCheckpointDirExitsOneNamingTheHolder) {
  if (registry().find(TESSERA_KIND_STRATEGY, "none") == nullptr) {
    GTEST_SKIP() << "strategy plugin 'none' is not built";
  }
  Scratch dir;
  const fs::path ckpt = dir / "ckpt";
  const fs::path config_file = dir / "b.toml";
  std::ofstream(config_file) << mlp_config(ckpt, 4);
  std::optional<CliResult> b;
  test::LineHook sink([&](const std::string& line) {
    if (line.rfind("step 2/", 0) == 0 && !b) {
      b = run_cli({"train", config_file.string()}, dir.path(), 60);
    }
  });
  std::ostream a_out(&sink);
  train::RunOptions options;
  options.out = &a_out;
  const train::RunResult a =
      train::run_training(parse_config(mlp_config(ckpt, 6), "a.toml"), registry(), options);

  ASSERT_TRUE(b.has_value()) << "run B never started";
  EXPECT_EQ(b->exit_code, 1) << b->err;
  EXPECT_EQ(b->err.rfind("tessera: error: checkpoint.dir '" + ckpt.string() +
                             "' is in use by another run (pid " + std::to_string(::getpid()) +
                             " on host ",
                         0),
            0U)
      << b->err;
  EXPECT_EQ(b->out.find("step "), std::string::npos) << b->out;
  EXPECT_EQ(a.last_step, 6);
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(ckpt)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".lock", "latest", "step-00000002", "step-00000004",
                                             "step-00000006"}));
}

TEST(CliFiles, DryRunChecksCheckpointDirWithoutCreatingIt) {
  Scratch dir;
  const fs::path config_file = dir / "run.toml";
  std::ofstream(config_file) << mlp_config(dir / "new" / "ckpt", 2);
  const CliResult ok = run_cli({"train", config_file.string(), "--dry-run"}, dir.path(), 60);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_FALSE(fs::exists(dir / "new"));

  std::ofstream(dir / "plain") << "x";
  const CliResult refused = run_cli({"train", config_file.string(), "--dry-run", "--set",
                                     "checkpoint.dir=" + (dir / "plain" / "ckpt").string()},
                                    dir.path(), 60);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.err, "tessera: error: checkpoint.dir '" + (dir / "plain" / "ckpt").string() +
                             "' cannot be created: '" + (dir / "plain").string() +
                             "' is a regular file, not a directory\n");
}

}  // namespace
}  // namespace tessera
