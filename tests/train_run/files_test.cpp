// The files of a run: a FIFO given as model.init refused without blocking;
// a data file truncated during the run named in the error; checkpoint.dir
// checked before any rank starts and held by one run at a time (a second
// run on it is refused naming the first's pid, the first finishes with only
// its own steps), stale temporary files removed and logged.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "../support/bounded.hpp"
#include "../support/line_hook.hpp"
#include "run_fixture.hpp"

namespace tessera::test {
namespace {

namespace fs = std::filesystem;
using train::run_training;
using train::RunOptions;

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST(RunFiles, ModelInitFifoIsRefusedWithoutBlocking) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  const fs::path init = dir / "weights.safetensors";
  ASSERT_EQ(::mkfifo(init.c_str(), 0600), 0) << std::strerror(errno);
  const Config config = make_config(mlp_toml("none", 1, 2), {"model.init=" + init.string()});
  const std::string message = error_within(20, [&] { (void)train::plan_run(config, plugins()); });
  EXPECT_MENTIONS(message,
                  "model.init: file '" + init.string() + "' is a FIFO, not a regular file");
}

// The data file cut to nothing after step 2 (from rank 0's log): the next
// step's batch is an error naming the file, not a SIGBUS.
TEST(RunFiles, DataFileTruncatedDuringTheRunIsAnErrorNamingIt) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  ScratchDir dir;
  const fs::path data = dir / "train.bin";
  {
    std::ofstream file(data, std::ios::binary);
    for (int i = 0; i < 4096; ++i) {
      const char id[2] = {static_cast<char>(i % 32), 0};  // u16 ids below vocab 32
      file.write(id, 2);
    }
  }
  LineHook hook([&](const std::string& line) {
    if (line.rfind("step 2/", 0) == 0) fs::resize_file(data, 0);
  });
  std::ostream out(&hook);
  RunOptions options;
  options.out = &out;
  const std::string message = error_of([&] {
    (void)run_training(
        make_config(gpt_toml("ddp", 2, 6),
                    {"data.kind=tokens", "data.path=" + data.string(), "run.log_every=1"}),
        plugins(), options);
  });
  EXPECT_MENTIONS(message, "data file '" + data.string() +
                               "' was truncated while in use: it had 8192 bytes when opened, 0 "
                               "bytes now");
  EXPECT_MENTIONS(hook.text(), "step 2/6");
}

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(RunFiles, CheckpointDirProblemsAreFoundBeforeAnyRankAndNothingIsCreated) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  std::ofstream(dir / "plain") << "x";
  const std::string message = error_of([&] {
    (void)train::plan_run(
        make_config(mlp_toml("none", 1, 2), {"checkpoint.dir=" + (dir / "plain").string()}),
        plugins());
  });
  EXPECT_MENTIONS(message, "checkpoint.dir '" + (dir / "plain").string() +
                               "' is a regular file, not a directory");
  const std::string nested = error_of([&] {
    (void)run_training(make_config(mlp_toml("none", 1, 2),
                                   {"checkpoint.dir=" + (dir / "plain" / "ckpt").string()}),
                       plugins());
  });
  EXPECT_MENTIONS(nested, "checkpoint.dir '" + (dir / "plain" / "ckpt").string() +
                              "' cannot be created: '" + (dir / "plain").string() +
                              "' is a regular file, not a directory");
  EXPECT_EQ(nested.find("rank "), std::string::npos) << "found after the ranks started: " << nested;

  // plan_run (and so --dry-run) checks a missing directory without creating it.
  (void)train::plan_run(
      make_config(mlp_toml("none", 1, 2), {"checkpoint.dir=" + (dir / "new" / "ckpt").string()}),
      plugins());
  EXPECT_FALSE(fs::exists(dir / "new"));
}

// Run A holds the directory; run B, started while A is between steps 2 and
// 3 (from A's log), is refused naming A's pid before it runs a step, and A
// ends with only its own checkpoints in the directory.
TEST(RunFiles, ASecondRunOnTheSameCheckpointDirIsRefusedNamingTheFirst) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  ScratchDir dir;
  const std::vector<std::string> overrides = {"checkpoint.dir=" + dir.path().string(),
                                              "checkpoint.every=2"};
  std::optional<std::string> refused;
  std::ostringstream b_out;
  LineHook hook([&](const std::string& line) {
    if (line.rfind("step 2/", 0) != 0 || refused) return;
    RunOptions b_options;
    b_options.out = &b_out;
    refused = error_of([&] {
      (void)run_training(make_config(mlp_toml("ddp", 2, 6), overrides), plugins(), b_options);
    });
  });
  std::ostream a_out(&hook);
  RunOptions a_options;
  a_options.out = &a_out;
  const train::RunResult a =
      run_training(make_config(mlp_toml("ddp", 2, 6), overrides), plugins(), a_options);

  ASSERT_TRUE(refused.has_value()) << "run B never started:\n" << hook.text();
  EXPECT_MENTIONS(*refused, "checkpoint.dir '" + dir.path().string() +
                                "' is in use by another run (pid " + std::to_string(::getpid()) +
                                " on host " + this_host() + ")");
  EXPECT_EQ(b_out.str().find("step "), std::string::npos) << "run B ran steps:\n" << b_out.str();
  EXPECT_EQ(a.last_step, 6);
  EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{".lock", "latest", "step-00000002",
                                                            "step-00000004", "step-00000006"}));
  EXPECT_EQ(read_text(dir / "latest"), "step-00000006\n");
  // Free again once A has ended.
  std::ostringstream c_out;
  RunOptions c_options;
  c_options.out = &c_out;
  EXPECT_EQ(
      run_training(make_config(mlp_toml("ddp", 2, 2), overrides), plugins(), c_options).last_step,
      2);
}

// A writer killed mid-write left temporary files; the next run to lock the
// directory removes them and says so.
TEST(RunFiles, StaleTemporaryFilesAreRemovedWhenARunLocksTheDirectory) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  fs::create_directories(dir / "step-00000001");
  const std::vector<std::string> stale = {
      "latest.tmp.31337.0123456789abcdef",
      "step-00000001/model.safetensors.tmp.31337.fedcba9876543210"};
  for (const auto& name : stale) std::ofstream(dir / name) << "partial";
  std::ostringstream out;
  RunOptions options;
  options.out = &out;
  (void)run_training(make_config(mlp_toml("none", 1, 2), {"checkpoint.dir=" + dir.path().string()}),
                     plugins(), options);
  for (const auto& name : stale) EXPECT_FALSE(fs::exists(dir / name)) << name;
  EXPECT_MENTIONS(out.str(), "checkpoint: removed 2 temporary files left in '" +
                                 dir.path().string() + "' by an interrupted write: ");
  EXPECT_MENTIONS(out.str(), "latest.tmp.31337.0123456789abcdef");
}

}  // namespace
}  // namespace tessera::test
