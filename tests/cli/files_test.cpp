// `tessera train` and the files of a run: a FIFO given as the config is
// refused instead of blocking. Every command runs with a deadline.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifndef TESSERA_CLI_EXE
#error "TESSERA_CLI_EXE must name the built tessera executable"
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

}  // namespace
}  // namespace tessera
