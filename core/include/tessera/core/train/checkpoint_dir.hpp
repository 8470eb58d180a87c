// The checkpoint directory of a run: checked before the first step, and
// held by one run at a time through an advisory lock on `<dir>/.lock`.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace tessera::train {

// The lock file of a checkpoint directory; it holds "<pid> <host>" of the
// run that holds (or last held) the lock.
inline constexpr const char* kLockFile = ".lock";

// Checks, creating and writing nothing, that `dir` can be checkpoint.dir:
// it is a directory this process may write to, or it does not exist and
// its nearest existing parent is such a directory (so it can be created).
// Throws tessera::Error (invalid argument) naming `dir` (and the parent):
// "checkpoint.dir 'x' is a regular file, not a directory", "... is not
// writable: Permission denied", "checkpoint.dir 'x/y' cannot be created:
// 'x' is a regular file, not a directory".
void check_checkpoint_dir(const std::filesystem::path& dir);

// Exclusive use of a checkpoint directory by one run while the object
// lives. The constructor
//  1. creates `dir` (and its parents) if missing; it must be a directory;
//  2. opens (creating it) `<dir>/.lock` and takes an exclusive flock()
//     without waiting; when another run holds it, throws naming that run's
//     pid and host as written in the file: "checkpoint.dir 'x' is in use by
//     another run (pid 123 on host h); ...";
//  3. writes this process's pid and host into the lock file;
//  4. creates and removes a probe file, so a directory that cannot be
//     written is found before the first step;
//  5. removes the temporary files of an interrupted atomic write
//     (is_atomic_temp_name) from `dir` and its step directories: with the
//     lock held no other run can be writing them.
// Every failure throws tessera::Error naming `dir` (and the file) with
// strerror. The lock is released when the object is destroyed or the
// process ends (however it ends); the file stays. flock() locks belong to
// the open file, so two runs in one process exclude each other too.
class CheckpointDirLock {
 public:
  explicit CheckpointDirLock(const std::filesystem::path& dir);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }
  // The stale temporary files step 5 removed.
  [[nodiscard]] const std::vector<std::filesystem::path>& removed_files() const noexcept {
    return removed_;
  }
  // One line for the run's log about removed_files(); "" when none.
  [[nodiscard]] std::string removed_files_message() const;

 private:
  std::filesystem::path dir_;
  int fd_ = -1;
  std::vector<std::filesystem::path> removed_;
};

}  // namespace tessera::train
