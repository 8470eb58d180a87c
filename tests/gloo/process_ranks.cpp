#include "process_ranks.hpp"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "tessera/core/options.hpp"
#include "tessera/core/plugin_registry.hpp"

#ifndef TESSERA_GLOO_TEST_PLUGIN_DIR
#error "TESSERA_GLOO_TEST_PLUGIN_DIR must name the build tree's plugin directory"
#endif

namespace tessera::glootest {
namespace {

std::string read_all(int fd) {
  std::string out;
  std::array<char, 4096> buf{};
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n <= 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
  }
  return out;
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// A fresh private directory, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera-gloo-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

[[noreturn]] void run_child(int rank, int world_size, const std::string& dir,
                            const std::map<std::string, std::string>& env, const Scenario& scenario,
                            int out_fd) {
  ::setenv("RANK", std::to_string(rank).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
  ::setenv("TESSERA_RENDEZVOUS_DIR", dir.c_str(), 1);
  ::setenv("TESSERA_RUN_ID", ("test-" + std::to_string(::getppid())).c_str(), 1);
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  std::string text;
  int code = 1;
  try {
    code = scenario(rank, text);
  } catch (const std::exception& e) {
    text = std::string("uncaught exception: ") + e.what();
  }
  write_all(out_fd, text);
  ::close(out_fd);
  std::fflush(nullptr);
  ::_exit(code);
}

}  // namespace

std::vector<RankOutcome> run_ranks(int world_size, const std::vector<int>& ranks,
                                   const std::map<std::string, std::string>& env,
                                   const Scenario& scenario, std::chrono::milliseconds limit) {
  const TempDir dir;
  struct Child {
    pid_t pid = -1;
    int fd = -1;
    bool done = false;
    RankOutcome outcome;
  };
  std::vector<Child> children(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::array<int, 2> pipe_fds{};
    if (::pipe2(pipe_fds.data(), O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::close(pipe_fds[0]);
      run_child(ranks[i], world_size, dir.path(), env, scenario, pipe_fds[1]);
    }
    ::close(pipe_fds[1]);
    children[i].pid = pid;
    children[i].fd = pipe_fds[0];
    children[i].outcome.rank = ranks[i];
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  size_t running = children.size();
  while (running > 0) {
    for (auto& c : children) {
      if (c.done) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.done = true;
      --running;
      c.outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    }
    if (running > 0 && std::chrono::steady_clock::now() > deadline) {
      for (auto& c : children) {
        if (c.done) continue;
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
        c.done = true;
        c.outcome.exit_code = -SIGKILL;
        c.outcome.text = "still running after the test's limit: killed";
      }
      running = 0;
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<RankOutcome> outcomes;
  for (auto& c : children) {
    const std::string text = read_all(c.fd);
    ::close(c.fd);
    if (c.outcome.text.empty()) c.outcome.text = text;
    outcomes.push_back(c.outcome);
  }
  return outcomes;
}

std::unique_ptr<Backend> open_gloo(const std::vector<std::string>& options,
                                   std::chrono::milliseconds timeout, int world_size) {
  PluginRegistry registry;
  registry.scan(PluginRegistry::search_path({TESSERA_GLOO_TEST_PLUGIN_DIR}));
  const toml::table table = parse_option_overrides(options);
  BackendSettings settings;
  settings.world_size = world_size;
  settings.timeout = timeout;
  return open_backend(registry, "gloo", &table, "test options", settings);
}

}  // namespace tessera::glootest
