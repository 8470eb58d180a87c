// The launcher's parts on their own: line reassembly with prefixes, the
// environment merge, the rank variables and the exit descriptions.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <string>
#include <vector>

#include "launch_env.hpp"
#include "launch_output.hpp"
#include "launch_process.hpp"

namespace tessera::cli {
namespace {

// Everything written to an anonymous in-memory file, read back piece by
// piece.
class Capture {
 public:
  Capture() : fd_(::memfd_create("launch-test", MFD_CLOEXEC)) { EXPECT_GE(fd_, 0); }
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;
  ~Capture() { ::close(fd_); }
  [[nodiscard]] int fd() const { return fd_; }
  // What was written since the last call.
  std::string take() {
    std::string text;
    std::array<char, 65536> buffer{};
    ssize_t n = 0;
    while ((n = ::pread(fd_, buffer.data(), buffer.size(), read_)) > 0) {
      text.append(buffer.data(), static_cast<std::size_t>(n));
      read_ += n;
    }
    return text;
  }

 private:
  int fd_;
  off_t read_ = 0;
};

TEST(LinePrefixer, JoinsFragmentsIntoPrefixedLines) {
  Capture pipe;
  LinePrefixer lines("[rank 2] ", pipe.fd());
  const std::string stream = "alpha\nbe";
  lines.feed(stream.data(), stream.size());
  EXPECT_EQ(pipe.take(), "[rank 2] alpha\n");
  EXPECT_EQ(lines.pending(), 2U);
  const std::string more = "ta\n\ngamma\ndel";
  lines.feed(more.data(), more.size());
  EXPECT_EQ(pipe.take(), "[rank 2] beta\n[rank 2] \n[rank 2] gamma\n");
  lines.finish();
  EXPECT_EQ(pipe.take(), "[rank 2] del\n");
  lines.finish();  // nothing pending: writes nothing
  EXPECT_EQ(pipe.take(), "");
}

TEST(LinePrefixer, SplitsAnEndlessLine) {
  Capture pipe;
  LinePrefixer lines("> ", pipe.fd());
  const std::string chunk(LinePrefixer::kMaxLine / 2 + 10, 'x');
  lines.feed(chunk.data(), chunk.size());
  EXPECT_EQ(pipe.take(), "");
  // Two chunks exceed the limit: one full piece is written; the rest waits.
  lines.feed(chunk.data(), chunk.size());
  const std::string written = pipe.take();
  const std::string expected = "> " + std::string(LinePrefixer::kMaxLine, 'x') + "\n";
  EXPECT_EQ(written.size(), expected.size());
  EXPECT_TRUE(written == expected) << "the first piece is not the prefixed first 1 MiB";
  EXPECT_EQ(lines.pending(), 20U);
  lines.finish();
  EXPECT_EQ(pipe.take(), "> " + std::string(20, 'x') + "\n");
}

TEST(LaunchEnvironment, RankVariablesFollowTheTopology) {
  LaunchTopology t;
  t.nproc_per_node = 4;
  t.nnodes = 3;
  t.node_rank = 2;
  t.master_addr = "node0";
  t.master_port = 29500;
  t.run_id = "r1";
  const auto vars = rank_variables(t, 1);
  const std::vector<std::pair<std::string, std::string>> expected = {{"RANK", "9"},
                                                                     {"WORLD_SIZE", "12"},
                                                                     {"LOCAL_RANK", "1"},
                                                                     {"LOCAL_WORLD_SIZE", "4"},
                                                                     {"GROUP_RANK", "2"},
                                                                     {"MASTER_ADDR", "node0"},
                                                                     {"MASTER_PORT", "29500"},
                                                                     {"TESSERA_RUN_ID", "r1"}};
  EXPECT_EQ(vars, expected);
  t.rendezvous_dir = "/some/dir";
  EXPECT_EQ(rank_variables(t, 0).back(),
            (std::pair<std::string, std::string>{"TESSERA_RENDEZVOUS_DIR", "/some/dir"}));
}

TEST(LaunchEnvironment, MergeReplacesOnlyNamedVariables) {
  const std::vector<std::string> base = {"PATH=/bin", "RANK=7", "RANKING=x", "EMPTY=", "NOEQ"};
  const auto merged = merge_environment(base, {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(merged, (std::vector<std::string>{"PATH=/bin", "RANKING=x", "EMPTY=", "NOEQ", "RANK=0",
                                              "WORLD_SIZE=2"}));
}

TEST(LaunchEnvironment, FreePortCanBeBound) {
  const int port = find_free_port("127.0.0.1");
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
  EXPECT_THROW((void)find_free_port("no-such-host.invalid"), std::exception);
}

TEST(LaunchEnvironment, RunIdsAreHexAndDiffer) {
  const std::string a = random_run_id();
  const std::string b = random_run_id();
  EXPECT_EQ(a.size(), 16U);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

TEST(ExitDescription, NamesStatusAndSignal) {
  int status = 0;
  const pid_t exited = fork();
  if (exited == 0) _exit(3);
  ASSERT_EQ(waitpid(exited, &status, 0), exited);
  EXPECT_EQ(describe_exit(status), "exited with status 3");
  EXPECT_EQ(short_exit(status), "exit 3");
  EXPECT_FALSE(exited_cleanly(status));

  const pid_t killed = fork();
  if (killed == 0) {
    ::raise(SIGKILL);
    _exit(0);
  }
  ASSERT_EQ(waitpid(killed, &status, 0), killed);
  EXPECT_EQ(describe_exit(status), "was killed by signal 9 (SIGKILL)");
  EXPECT_EQ(short_exit(status), "SIGKILL");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
}

}  // namespace
}  // namespace tessera::cli
