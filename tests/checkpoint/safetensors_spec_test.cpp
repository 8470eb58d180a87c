// Files built byte by byte from the format description (not by our writer)
// read correctly, so the reader implements the real format.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "file_bytes.hpp"
#include "tessera/core/safetensors.hpp"

namespace tessera {
namespace {

using test::craft;
using test::TempDir;
using test::write_bytes;

TEST(SafetensorsSpec, HandCraftedFileIsReadCorrectly) {
  TempDir dir;
  // JSON order differs from data order, with whitespace and no padding
  // (header length 295 is not a multiple of 8: readers must not require it).
  const std::string header =
      "{ \"b\": {\"dtype\": \"I64\", \"shape\": [], \"data_offsets\": [8, 16]},\n"
      "  \"__metadata__\": {\"format\": \"pt\"},\n"
      "  \"a\": {\"shape\": [2], \"dtype\": \"F32\", \"data_offsets\": [0, 8]},\n"
      "  \"c\": {\"dtype\": \"BF16\", \"shape\": [1, 2], \"data_offsets\": [16, 20]},\n"
      "  \"d\": {\"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [20, 22]}}";
  std::string data;
  data += std::string("\x00\x00\x80\x3f", 4);  // a[0] = 1.0f
  data += std::string("\x00\x00\x20\xc0", 4);  // a[1] = -2.5f
  data += std::string(8, '\xff');              // b = -1 (i64)
  data += std::string("\x80\x3f\x00\x40", 4);  // c = [1.0, 2.0] (bf16)
  data += std::string("\x00\x3c", 2);          // d = [1.0] (f16)
  ASSERT_EQ(header.size() % 8, 7U);
  write_bytes(dir / "hand.safetensors", craft(header, data));

  const SafetensorsReader reader = SafetensorsReader::open(dir / "hand.safetensors");
  EXPECT_EQ(reader.names(), (std::vector<std::string>{"a", "b", "c", "d"}));
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  std::vector<float> a(2);
  reader.read_f32("a", a);
  EXPECT_EQ(a, (std::vector<float>{1.0F, -2.5F}));
  int64_t b = 0;
  reader.read<int64_t>("b", std::span<int64_t>(&b, 1));
  EXPECT_EQ(b, -1);
  EXPECT_TRUE(reader.info("b").shape.empty());
  std::vector<bfloat16> c(2);
  reader.read<bfloat16>("c", c);
  EXPECT_EQ(to_float(c[0]), 1.0F);
  EXPECT_EQ(to_float(c[1]), 2.0F);
  EXPECT_EQ(reader.info("c").shape, (std::vector<uint64_t>{1, 2}));
  half d;
  reader.read<half>("d", std::span<half>(&d, 1));
  EXPECT_EQ(to_float(d), 1.0F);
  EXPECT_EQ(reader.info("d").begin, 20U);
  EXPECT_EQ(reader.info("d").end, 22U);
}

TEST(SafetensorsSpec, MetadataIsOptionalAndTensorsMayBeEmpty) {
  TempDir dir;
  const std::string header = R"({"z":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                             R"("y":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})";
  write_bytes(dir / "m.safetensors", craft(header, "\x01\x02\x03"));
  const SafetensorsReader reader = SafetensorsReader::open(dir / "m.safetensors");
  EXPECT_TRUE(reader.metadata().empty());
  EXPECT_EQ(reader.info("z").numel(), 0U);
  const auto bytes = reader.data("y");
  ASSERT_EQ(bytes.size(), 3U);
  EXPECT_EQ(static_cast<int>(bytes[2]), 3);
}

}  // namespace
}  // namespace tessera
