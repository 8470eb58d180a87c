// `tokens` and `text` files: ids read little-endian, windows shifted by one.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <vector>

#include "tessera/core/data/dataset.hpp"
#include "tessera/core/data/sampler.hpp"
#include "tessera/core/data/token_file_dataset.hpp"
#include "token_ids.hpp"

namespace tessera {
namespace {

// Every example must be a window of the file: tokens[t] = file[start + t],
// targets[t] = file[start + t + 1].
void expect_windows(const Batch& b, const std::vector<uint32_t>& ids) {
  for (int64_t row = 0; row < b.size; ++row) {
    const int32_t* tokens = b.tokens.data() + row * b.seq_len;
    const int32_t* targets = b.targets.data() + row * b.seq_len;
    bool found = false;
    for (size_t start = 0; start + static_cast<size_t>(b.seq_len) < ids.size() && !found; ++start) {
      bool match = true;
      for (int64_t t = 0; t < b.seq_len && match; ++t) {
        match = static_cast<uint32_t>(tokens[t]) == ids[start + static_cast<size_t>(t)] &&
                static_cast<uint32_t>(targets[t]) == ids[start + static_cast<size_t>(t) + 1];
      }
      found = match;
    }
    EXPECT_TRUE(found) << "row " << row << " is not a window of the file";
  }
}

TEST(TokenFile, ReadsLittleEndianU16AndU32) {
  const test::TempDir dir;
  const std::vector<uint32_t> ids = {1, 258, 65535, 7, 300, 2};
  for (const int width : {2, 4}) {
    const auto path = test::write_ids(dir, "ids" + std::to_string(width), ids, width);
    const TokenFileDataset data(path, width, DataShape::sequences(2, 65536), "tokens");
    ASSERT_EQ(data.tokens(), 6);
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(static_cast<uint32_t>(data.token(i)), ids[static_cast<size_t>(i)]);
    }
  }
  const auto wide = test::write_ids(dir, "wide", {70000, 1, 2}, 4);
  EXPECT_EQ(TokenFileDataset(wide, 4, DataShape::sequences(2, 100000), "tokens").token(0), 70000);
}

TEST(TokenFile, BatchesAreShiftedWindowsCoveringTheFile) {
  const test::TempDir dir;
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 40; ++i) {
    ids.push_back((i * 7) % 23);
  }
  DataSection section;
  section.kind = "tokens";
  section.path = test::write_ids(dir, "train.bin", ids, 2).string();
  const auto data = make_dataset(section, DataShape::sequences(5, 23), 1);
  const DistributedSampler sampler(*data, 1, 16, 0, 1);
  std::set<int32_t> first_tokens;
  for (int64_t step = 1; step <= 8; ++step) {
    const Batch b = sampler.global_batch(step);
    expect_windows(b, ids);
    for (int64_t row = 0; row < b.size; ++row) {
      first_tokens.insert(b.tokens[static_cast<size_t>(row * 5)]);
    }
  }
  EXPECT_GT(first_tokens.size(), 10U);  // offsets are spread over the file
}

TEST(TokenFile, TextFileBytesAreTokens) {
  const test::TempDir dir;
  const std::string text = "h\xC3\xA9llo, w\xC3\xB6rld";  // UTF-8, bytes above 127
  DataSection section;
  section.kind = "text";
  section.path = dir.write("a.txt", std::vector<uint8_t>(text.begin(), text.end())).string();
  const auto data = make_dataset(section, DataShape::sequences(4, 256), 1);
  const DistributedSampler sampler(*data, 3, 6, 0, 1);
  std::vector<uint32_t> ids;
  for (const char c : text) {
    ids.push_back(static_cast<uint8_t>(c));
  }
  expect_windows(sampler.global_batch(1), ids);
  EXPECT_NE(data->describe().find("a.txt"), std::string::npos);
}

TEST(TokenFile, SystemLicenceTextLoads) {
  const std::filesystem::path gpl = "/usr/share/common-licenses/GPL-3";
  if (!std::filesystem::exists(gpl)) {
    GTEST_SKIP() << gpl << " is not present on this machine";
  }
  DataSection section;
  section.kind = "text";
  section.path = gpl.string();
  const auto data = make_dataset(section, DataShape::sequences(64, 256), 1);
  const auto& file = dynamic_cast<const TokenFileDataset&>(*data);
  EXPECT_EQ(file.tokens(), static_cast<int64_t>(std::filesystem::file_size(gpl)));
  const Batch b = DistributedSampler(*data, 1, 4, 0, 1).global_batch(1);
  for (const int32_t t : b.tokens) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 256);
  }
}

}  // namespace
}  // namespace tessera
