// write_file_atomically: the target is either the old or the new content,
// never partial, and no temporary file survives a failure.
#include "tessera/core/atomic_file.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>

#include "file_bytes.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

using test::read_bytes;
using test::TempDir;
using test::write_bytes;

TEST(AtomicFile, WritesNewFileAndLeavesNoTemporary) {
  TempDir dir;
  write_file_atomically(dir / "a.bin", std::string_view("hello\0world", 11));
  EXPECT_EQ(read_bytes(dir / "a.bin"), std::string("hello\0world", 11));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.bin"});
}

TEST(AtomicFile, ReplacesExistingFile) {
  TempDir dir;
  write_bytes(dir / "a.bin", "old content that is longer than the new one");
  write_file_atomically(dir / "a.bin", std::string_view("new"));
  EXPECT_EQ(read_bytes(dir / "a.bin"), "new");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.bin"});
}

TEST(AtomicFile, StreamsChunksAndCountsBytes) {
  TempDir dir;
  std::string expected;
  size_t counted = 0;
  write_file_atomically(dir / "big.bin", [&](AtomicFileSink& sink) {
    for (int chunk = 0; chunk < 64; ++chunk) {
      const std::string piece(50000, static_cast<char>('a' + chunk % 26));
      sink.write(piece);
      expected += piece;
    }
    counted = sink.bytes_written();
  });
  EXPECT_EQ(counted, expected.size());
  EXPECT_EQ(read_bytes(dir / "big.bin"), expected);
}

TEST(AtomicFile, ThrowingProducerKeepsPreviousFileByteIdentical) {
  TempDir dir;
  const std::string previous("previous\0checkpoint\xff", 20);
  write_bytes(dir / "ckpt.safetensors", previous);
  try {
    write_file_atomically(dir / "ckpt.safetensors", [](AtomicFileSink& sink) {
      sink.write(std::string(4096, 'x'));
      throw std::runtime_error("producer failed half-way");
    });
    FAIL() << "expected the producer's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "producer failed half-way");  // rethrown unchanged
  }
  EXPECT_EQ(read_bytes(dir / "ckpt.safetensors"), previous);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.safetensors"});
}

TEST(AtomicFile, ThrowingProducerCreatesNothingWhenNoPreviousFile) {
  TempDir dir;
  EXPECT_THROW(write_file_atomically(dir / "new.bin",
                                     [](AtomicFileSink&) { throw std::logic_error("no data"); }),
               std::logic_error);
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicFile, MissingDirectoryIsAnErrorNamingThePath) {
  TempDir dir;
  const auto target = dir / "no_such_dir" / "file.bin";
  try {
    write_file_atomically(target, std::string_view("x"));
    FAIL() << "expected tessera::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find((dir / "no_such_dir").string()), std::string::npos) << message;
    EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(AtomicFile, RenameFailureRemovesTemporary) {
  TempDir dir;
  std::filesystem::create_directory(dir / "occupied");
  std::filesystem::create_directory(dir / "occupied" / "child");  // non-empty directory
  try {
    write_file_atomically(dir / "occupied", std::string_view("data"));
    FAIL() << "expected tessera::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot rename"), std::string::npos) << message;
    EXPECT_NE(message.find((dir / "occupied").string()), std::string::npos) << message;
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"occupied"});
  EXPECT_TRUE(std::filesystem::is_directory(dir / "occupied" / "child"));
}

TEST(AtomicFile, RejectsPathWithoutFileName) {
  EXPECT_THROW(write_file_atomically(std::filesystem::path(), std::string_view("x")), Error);
}

// A process killed mid-write leaves the previous file intact; the stale
// temporary it leaves is found and removed by remove_stale_temp_files.
TEST(AtomicFile, CrashMidWriteKeepsPreviousFile) {
  TempDir dir;
  const std::string previous = "the last good checkpoint";
  write_bytes(dir / "ckpt.bin", previous);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    write_file_atomically(dir / "ckpt.bin", [](AtomicFileSink& sink) {
      sink.write(std::string(1000, 'y'));
      ::_exit(3);  // dies without unwinding, like a crash
    });
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 3);
  EXPECT_EQ(read_bytes(dir / "ckpt.bin"), previous);
  EXPECT_EQ(dir.entries().size(), 2U);  // the target and the stale temporary
  write_bytes(dir / "other.bin.tmp.1.2", "not a temporary of ckpt.bin");
  EXPECT_EQ(remove_stale_temp_files(dir / "ckpt.bin"), 1U);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"ckpt.bin", "other.bin.tmp.1.2"}));
  EXPECT_EQ(read_bytes(dir / "ckpt.bin"), previous);
  EXPECT_EQ(remove_stale_temp_files(dir / "missing_dir" / "x.bin"), 0U);
}

}  // namespace
}  // namespace tessera
