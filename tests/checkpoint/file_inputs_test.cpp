// Checkpoint inputs that are not regular files are refused without
// blocking: `latest`, a safetensors file, an index and a slice file it names
// as FIFOs; `latest` has a size limit; temporary names are recognised.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "../support/bounded.hpp"
#include "file_bytes.hpp"
#include "tessera/core/atomic_file.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/safetensors_index.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

using test::TempDir;
using test::write_bytes;

#define EXPECT_IN_MESSAGE(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "message: " << (text)

void make_fifo(const std::filesystem::path& path) {
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path << ": " << std::strerror(errno);
}

TEST(CheckpointInputs, LatestFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  make_fifo(dir / "latest");
  const std::string message =
      test::error_within(10, [&] { (void)train::find_latest_checkpoint(dir.path()); });
  EXPECT_IN_MESSAGE(
      message, "checkpoint: '" + (dir / "latest").string() + "' is a FIFO, not a regular file");
}

TEST(CheckpointInputs, LatestLargerThanFourKibibytesIsRefused) {
  TempDir dir;
  write_bytes(dir / "latest", "step-00000001" + std::string(5000, ' '));
  const std::string message =
      test::error_within(10, [&] { (void)train::find_latest_checkpoint(dir.path()); });
  EXPECT_IN_MESSAGE(message, "checkpoint: '" + (dir / "latest").string() +
                                 "' is 5013 bytes, more than the limit of 4096");
}

TEST(CheckpointInputs, StepFileFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  std::filesystem::create_directories(dir / "step-00000003");
  write_bytes(dir / "latest", "step-00000003\n");
  const auto model = dir / "step-00000003" / "model.safetensors";
  make_fifo(model);
  EXPECT_IN_MESSAGE(
      test::error_within(10, [&] { (void)train::find_latest_checkpoint(dir.path()); }),
      "checkpoint: '" + model.string() + "' is a FIFO, not a regular file");
  EXPECT_IN_MESSAGE(test::error_within(10, [&] { (void)SafetensorsReader::open(model); }),
                    "safetensors file '" + model.string() + "' is a FIFO, not a regular file");
}

TEST(CheckpointInputs, IndexFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  make_fifo(dir / "index.json");
  EXPECT_IN_MESSAGE(
      test::error_within(10, [&] { (void)read_index(dir / "index.json"); }),
      "sharded index '" + (dir / "index.json").string() + "' is a FIFO, not a regular file");
}

TEST(CheckpointInputs, SliceFileFifoIsNamed) {
  TempDir dir;
  write_bytes(dir / "index.json",
              R"({"world_size": 1, "tensors": {"w": {"dtype": "F32", "shape": [1], "slices": [)"
              R"({"file": "rank00000.safetensors", "key": "w", "offset": 0, "count": 1}]}}})");
  make_fifo(dir / "rank00000.safetensors");
  EXPECT_IN_MESSAGE(test::error_within(10, [&] { (void)read_index(dir / "index.json"); }),
                    "slice file \"" + (dir / "rank00000.safetensors").string() +
                        "\" is a FIFO, not a regular file");
}

TEST(CheckpointInputs, AtomicTempNames) {
  EXPECT_TRUE(is_atomic_temp_name("latest.tmp.123.0123456789abcdef"));
  EXPECT_TRUE(is_atomic_temp_name("model.safetensors.tmp.7.ffffffffffffffff"));
  EXPECT_TRUE(is_atomic_temp_name("a.tmp.b.tmp.1.0000000000000000"));
  EXPECT_FALSE(is_atomic_temp_name(".tmp.123.0123456789abcdef"));       // no target
  EXPECT_FALSE(is_atomic_temp_name("latest.tmp.123.0123456789abcde"));  // 15 digits
  EXPECT_FALSE(is_atomic_temp_name("latest.tmp.123.0123456789ABCDEF"));
  EXPECT_FALSE(is_atomic_temp_name("latest.tmp..0123456789abcdef"));
  EXPECT_FALSE(is_atomic_temp_name("latest.tmp.12x.0123456789abcdef"));
  EXPECT_FALSE(is_atomic_temp_name("notes.tmp.txt"));
  EXPECT_FALSE(is_atomic_temp_name("latest"));
}

}  // namespace
}  // namespace tessera
