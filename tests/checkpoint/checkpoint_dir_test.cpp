// checkpoint.dir: the dry check (nothing created), the run's lock (held
// against a second holder in this process and in another process, naming
// the holder's pid and host), the probe, and the removal of an interrupted
// writer's temporary files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>

#include "../support/bounded.hpp"
#include "file_bytes.hpp"
#include "tessera/core/train/checkpoint_dir.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using test::write_bytes;

#define EXPECT_NAMES(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)

std::string this_host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

template <typename Body>
std::string error_text(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(CheckpointDirCheck, AcceptsAnExistingOrCreatableDirectoryAndCreatesNothing) {
  TempDir dir;
  check_checkpoint_dir(dir.path());
  check_checkpoint_dir(dir / "a" / "b" / "c");
  EXPECT_FALSE(fs::exists(dir / "a"));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{});
}

TEST(CheckpointDirCheck, RefusesAFileOrAFileAsParent) {
  TempDir dir;
  write_bytes(dir / "plain", "x");
  EXPECT_NAMES(
      error_text([&] { check_checkpoint_dir(dir / "plain"); }),
      "checkpoint.dir '" + (dir / "plain").string() + "' is a regular file, not a directory");
  EXPECT_NAMES(error_text([&] { check_checkpoint_dir(dir / "plain" / "ckpt" / "x"); }),
               "checkpoint.dir '" + (dir / "plain" / "ckpt" / "x").string() +
                   "' cannot be created: '" + (dir / "plain").string() +
                   "' is a regular file, not a directory");
}

TEST(CheckpointDirCheck, RefusesAReadOnlyDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into directories whatever their mode";
  TempDir dir;
  fs::create_directory(dir / "ro");
  fs::permissions(dir / "ro", fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_NAMES(
      error_text([&] { check_checkpoint_dir(dir / "ro"); }),
      "checkpoint.dir '" + (dir / "ro").string() + "' is not writable: " + std::strerror(EACCES));
  EXPECT_NAMES(error_text([&] { check_checkpoint_dir(dir / "ro" / "ckpt"); }),
               "cannot be created: '" + (dir / "ro").string() + "' is not writable");
  EXPECT_NAMES(error_text([&] { const CheckpointDirLock lock(dir / "ro"); }),
               "checkpoint.dir '" + (dir / "ro").string() + "' is not writable");
  fs::permissions(dir / "ro", fs::perms::owner_all);
}

TEST(CheckpointDirLock, CreatesTheDirectoryAndRecordsTheHolder) {
  TempDir dir;
  const fs::path ckpt = dir / "runs" / "ckpt";
  const CheckpointDirLock lock(ckpt);
  EXPECT_TRUE(fs::is_directory(ckpt));
  EXPECT_EQ(test::read_bytes(ckpt / kLockFile),
            std::to_string(::getpid()) + " " + this_host() + "\n");
  EXPECT_TRUE(lock.removed_files().empty());
  EXPECT_EQ(lock.removed_files_message(), "");
  // Nothing but the lock file is left (the probe is gone).
  EXPECT_EQ(fs::directory_iterator(ckpt)->path().filename(), kLockFile);
  EXPECT_EQ(std::distance(fs::directory_iterator(ckpt), fs::directory_iterator{}), 1);
}

TEST(CheckpointDirLock, ASecondHolderInThisProcessIsRefusedNamingTheFirst) {
  TempDir dir;
  std::optional<CheckpointDirLock> first(std::in_place, dir.path());
  EXPECT_NAMES(error_text([&] { const CheckpointDirLock second(dir.path()); }),
               "checkpoint.dir '" + dir.path().string() + "' is in use by another run (pid " +
                   std::to_string(::getpid()) + " on host " + this_host() + ")");
  first.reset();
  const CheckpointDirLock again(dir.path());  // released with the first
}

// The lock held by another process: refused naming its pid; free again once
// that process is gone.
TEST(CheckpointDirLock, ASecondProcessIsRefusedNamingTheHoldersPid) {
  TempDir dir;
  int to_child[2];
  int from_child[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(from_child), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(20);
    char byte = 0;
    try {
      const CheckpointDirLock lock(dir.path());
      byte = 1;
      (void)!::write(from_child[1], &byte, 1);
      (void)!::read(to_child[0], &byte, 1);  // hold it until told
    } catch (...) {
      (void)!::write(from_child[1], &byte, 1);
    }
    ::_exit(0);
  }
  char held = 0;
  ASSERT_EQ(::read(from_child[0], &held, 1), 1);
  ASSERT_EQ(held, 1) << "the child could not take the lock";
  EXPECT_NAMES(error_text([&] { const CheckpointDirLock lock(dir.path()); }),
               "is in use by another run (pid " + std::to_string(child) + " on host " +
                   this_host() + "); wait for it to end or give this run another checkpoint.dir");
  const char go = 0;
  ASSERT_EQ(::write(to_child[1], &go, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  for (const int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
  const CheckpointDirLock lock(dir.path());
  EXPECT_EQ(test::read_bytes(dir / kLockFile),
            std::to_string(::getpid()) + " " + this_host() + "\n");
}

TEST(CheckpointDirLock, RemovesAnInterruptedWritersTemporaryFiles) {
  TempDir dir;
  fs::create_directories(dir / "step-00000004");
  fs::create_directories(dir / "notes");
  const std::vector<std::string> stale = {
      "latest.tmp.4242.0123456789abcdef",
      "step-00000004/model.safetensors.tmp.4242.00000000deadbeef",
      "step-00000004/index.json.tmp.99.fedcba9876543210"};
  const std::vector<std::string> kept = {"latest", "step-00000004/model.safetensors",
                                         "notes.tmp.txt", "notes/a.tmp.1.0123456789abcdef"};
  for (const auto& name : stale) write_bytes(dir / name, "partial");
  for (const auto& name : kept) write_bytes(dir / name, "keep");
  const CheckpointDirLock lock(dir.path());
  for (const auto& name : stale) EXPECT_FALSE(fs::exists(dir / name)) << name;
  for (const auto& name : kept) EXPECT_TRUE(fs::exists(dir / name)) << name;
  EXPECT_EQ(lock.removed_files().size(), 3U);
  const std::string message = lock.removed_files_message();
  EXPECT_NAMES(message, "checkpoint: removed 3 temporary files left in '" + dir.path().string() +
                            "' by an interrupted write: ");
  EXPECT_NAMES(message, "latest.tmp.4242.0123456789abcdef");
  EXPECT_NAMES(message, "step-00000004/model.safetensors.tmp.4242.00000000deadbeef");
}

TEST(CheckpointDirLock, RefusesAFileAndAFifoAsLockFile) {
  TempDir dir;
  write_bytes(dir / "plain", "x");
  EXPECT_NAMES(
      error_text([&] { const CheckpointDirLock lock(dir / "plain"); }),
      "checkpoint.dir '" + (dir / "plain").string() + "' is a regular file, not a directory");
  EXPECT_NAMES(error_text([&] { const CheckpointDirLock lock(dir / "plain" / "sub"); }),
               "checkpoint.dir '" + (dir / "plain" / "sub").string() + "' cannot be created: ");
  fs::create_directory(dir / "ckpt");
  ASSERT_EQ(::mkfifo((dir / "ckpt" / kLockFile).c_str(), 0600), 0) << std::strerror(errno);
  EXPECT_NAMES(
      test::error_within(10, [&] { const CheckpointDirLock lock(dir / "ckpt"); }),
      "its lock file '" + (dir / "ckpt" / kLockFile).string() + "' is a FIFO, not a regular file");
}

}  // namespace
}  // namespace tessera::train
