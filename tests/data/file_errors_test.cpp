// Every data problem is reported before training, naming the file and,
// for bad ids, the position.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../support/bounded.hpp"
#include "tessera/core/data/dataset.hpp"
#include "tessera/sdk/error.hpp"
#include "token_ids.hpp"

namespace tessera {
namespace {

std::string error_of(const DataSection& section, const DataShape& shape,
                     const DataOptions& options = {}) {
  try {
    (void)make_dataset(section, shape, 1, options);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  ADD_FAILURE() << "no error for kind '" << section.kind << "', path '" << section.path << "'";
  return "";
}

DataSection tokens_at(const std::string& path) {
  DataSection section;
  section.kind = "tokens";
  section.path = path;
  return section;
}

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "message: " << (text)

TEST(DataErrors, MissingFile) {
  const test::TempDir dir;
  const std::string path = (dir.path() / "absent.bin").string();
  const std::string msg = error_of(tokens_at(path), DataShape::sequences(4, 10));
  EXPECT_MENTIONS(msg, path);
  EXPECT_MENTIONS(msg, "does not exist");
}

TEST(DataErrors, EmptyFile) {
  const test::TempDir dir;
  const std::string path = dir.write("empty.txt", "").string();
  DataSection section = tokens_at(path);
  section.kind = "text";
  const std::string msg = error_of(section, DataShape::sequences(4, 256));
  EXPECT_MENTIONS(msg, path);
  EXPECT_MENTIONS(msg, "is empty");
}

TEST(DataErrors, DirectoryIsNotAFile) {
  const test::TempDir dir;
  EXPECT_MENTIONS(error_of(tokens_at(dir.path().string()), DataShape::sequences(4, 10)),
                  "not a regular file");
}

TEST(DataErrors, FifoIsRefusedWithoutBlocking) {
  const test::TempDir dir;
  const std::string path = (dir.path() / "train.bin").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  const std::string msg = test::error_within(
      10, [&] { (void)make_dataset(tokens_at(path), DataShape::sequences(4, 10), 1); });
  EXPECT_MENTIONS(msg, "data file '" + path + "' is a FIFO, not a regular file");
}

TEST(DataErrors, DeviceIsRefusedBeforeReading) {
  const std::string msg = test::error_within(
      10, [] { (void)make_dataset(tokens_at("/dev/zero"), DataShape::sequences(4, 10), 1); });
  EXPECT_MENTIONS(msg, "data file '/dev/zero' is a character device, not a regular file");
}

// A file cut short while a run reads it: the next example past the new end
// is an error naming the file and both sizes, not a SIGBUS.
TEST(DataErrors, FileTruncatedWhileInUseIsAnErrorNamingIt) {
  const test::TempDir dir;
  std::vector<uint32_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>(i % 10);
  const std::string path = test::write_ids(dir, "train.bin", ids, 2).string();
  const auto data = make_dataset(tokens_at(path), DataShape::sequences(4, 10), 1);
  Batch batch = Batch::make(1, 4, 0);
  data->fill(0, batch, 0);  // readable while whole
  std::filesystem::resize_file(path, 0);
  try {
    data->fill(500, batch, 0);  // window at tokens 500..504
    ADD_FAILURE() << "no error after the file was truncated";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_MENTIONS(std::string(e.what()),
                    "data file '" + path +
                        "' was truncated while in use: it had 2000 bytes when opened, 0 bytes "
                        "now (this example needs bytes 1000 to 1010)");
  }
}

TEST(DataErrors, FileShorterThanOneSequence) {
  const test::TempDir dir;
  const std::string path = test::write_ids(dir, "short.bin", {1, 2, 3, 4}, 2).string();
  const std::string msg = error_of(tokens_at(path), DataShape::sequences(4, 10));
  EXPECT_MENTIONS(msg, path);
  EXPECT_MENTIONS(msg, "4 tokens, fewer than seq_len + 1 = 5");
}

TEST(DataErrors, TokenOutsideVocabularyNamesPositionAndValue) {
  const test::TempDir dir;
  const std::string path = test::write_ids(dir, "big.bin", {1, 2, 3, 12, 4, 99}, 4).string();
  DataOptions options;
  options.token_bytes = 4;
  const std::string msg = error_of(tokens_at(path), DataShape::sequences(2, 10), options);
  EXPECT_MENTIONS(msg, path);
  EXPECT_MENTIONS(msg, "token 3 (byte offset 12) is 12, outside the vocabulary of 10");
}

TEST(DataErrors, TextByteOutsideSmallVocabulary) {
  const test::TempDir dir;
  DataSection section;
  section.kind = "text";
  section.path = dir.write("t.txt", {'a', 'b', 0xC3, 0xA9}).string();
  EXPECT_MENTIONS(error_of(section, DataShape::sequences(2, 128)),
                  "token 2 (byte offset 2) is 195");
}

TEST(DataErrors, OddByteCountForU16) {
  const test::TempDir dir;
  const std::string path = dir.write("odd.bin", {1, 0, 2, 0, 3}).string();
  const std::string msg = error_of(tokens_at(path), DataShape::sequences(1, 10));
  EXPECT_MENTIONS(msg, path);
  EXPECT_MENTIONS(msg, "5 bytes, not a multiple of token_bytes = 2");
}

TEST(DataErrors, UnsupportedTokenWidth) {
  const test::TempDir dir;
  DataOptions options;
  options.token_bytes = 3;
  const std::string path = test::write_ids(dir, "w.bin", {1, 2, 3}, 2).string();
  EXPECT_MENTIONS(error_of(tokens_at(path), DataShape::sequences(1, 10), options), "token_bytes 3");
}

TEST(DataErrors, ConfigurationMismatches) {
  DataSection section;
  section.kind = "csv";
  EXPECT_MENTIONS(error_of(section, DataShape::sequences(4, 10)), "valid: synthetic, text, tokens");
  section.kind = "tokens";
  EXPECT_MENTIONS(error_of(section, DataShape::sequences(4, 10)), "needs 'data.path'");
  DataShape mlp;
  mlp.features = 4;
  mlp.classes = 3;
  section.path = "x.bin";
  EXPECT_MENTIONS(error_of(section, mlp), "takes 4 features");
  EXPECT_MENTIONS(error_of(section, DataShape{}), "either token sequences");
}

}  // namespace
}  // namespace tessera
