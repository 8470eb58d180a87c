// SafetensorsWriter -> SafetensorsReader: every dtype, scalars, empty
// tensors, metadata, and the exact header layout.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "file_bytes.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

using test::read_bytes;
using test::TempDir;

// Distinct, exactly representable values 0.5 * (i - 3) + offset.
template <typename T>
std::vector<T> sample(size_t n, int offset) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float x = 0.5F * (static_cast<float>(i) - 3.0F) + static_cast<float>(offset);
    if constexpr (std::is_same_v<T, half>) {
      v[i] = to_half(x);
    } else if constexpr (std::is_same_v<T, bfloat16>) {
      v[i] = to_bfloat16(x);
    } else if constexpr (std::is_integral_v<T>) {
      v[i] = static_cast<T>(static_cast<int>(i) * 7 + offset);
    } else {
      v[i] = static_cast<T>(x);
    }
  }
  return v;
}

template <typename T>
std::vector<std::byte> as_bytes_vector(const std::vector<T>& v) {
  std::vector<std::byte> out(v.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

TEST(SafetensorsRoundTrip, EveryDtypeScalarAndEmptyShapes) {
  TempDir dir;
  const auto f32 = sample<float>(6, 1);
  const auto f64 = sample<double>(4, 2);
  const auto f16 = sample<half>(8, 3);
  const auto bf16 = sample<bfloat16>(3, 4);
  const auto i32 = sample<int32_t>(5, -9);
  const auto i64 = sample<int64_t>(2, 1 << 20);
  const auto u8 = sample<uint8_t>(7, 200);
  const auto scalar = sample<float>(1, 42);

  SafetensorsWriter writer;
  writer.add<float>("embed.weight", {2, 3}, f32);
  writer.add<double>("block0.scale", {4}, f64);
  writer.add<half>("block0.w16", {2, 2, 2}, f16);
  writer.add<bfloat16>("block0.wbf", {3, 1}, bf16);
  writer.add<int32_t>("data.position", {5}, i32);
  writer.add<int64_t>("rng.state", {2}, i64);
  writer.add<uint8_t>("mask.bytes", {7}, u8);
  writer.add<float>("optim.step", {}, scalar);  // scalar: shape []
  writer.add("head.empty", TESSERA_F32, {0, 5}, nullptr);
  writer.add_owned("head.bias", TESSERA_F64, {4}, as_bytes_vector(f64));
  writer.set_metadata("format", "pt");
  writer.set_metadata("step", "17");
  const auto path = dir / "model.safetensors";
  writer.save(path);
  EXPECT_EQ(std::filesystem::file_size(path), writer.file_size());

  const SafetensorsReader reader = SafetensorsReader::open(path);
  EXPECT_EQ(reader.path(), path);
  EXPECT_EQ(reader.names(),
            (std::vector<std::string>{"embed.weight", "block0.scale", "block0.w16", "block0.wbf",
                                      "data.position", "rng.state", "mask.bytes", "optim.step",
                                      "head.empty", "head.bias"}));
  EXPECT_EQ(reader.metadata(),
            (std::map<std::string, std::string>{{"format", "pt"}, {"step", "17"}}));

  std::vector<float> got_f32(6);
  reader.read_f32("embed.weight", got_f32);
  EXPECT_EQ(got_f32, f32);
  std::vector<double> got_f64(4);
  reader.read<double>("block0.scale", got_f64);
  EXPECT_EQ(got_f64, f64);
  reader.read<double>("head.bias", got_f64);
  EXPECT_EQ(got_f64, f64);
  std::vector<half> got_f16(8);
  reader.read<half>("block0.w16", got_f16);
  for (size_t i = 0; i < f16.size(); ++i) EXPECT_EQ(got_f16[i].bits, f16[i].bits);
  std::vector<bfloat16> got_bf16(3);
  reader.read<bfloat16>("block0.wbf", got_bf16);
  for (size_t i = 0; i < bf16.size(); ++i) EXPECT_EQ(got_bf16[i].bits, bf16[i].bits);
  std::vector<int32_t> got_i32(5);
  reader.read<int32_t>("data.position", got_i32);
  EXPECT_EQ(got_i32, i32);
  std::vector<int64_t> got_i64(2);
  reader.read<int64_t>("rng.state", got_i64);
  EXPECT_EQ(got_i64, i64);
  std::vector<uint8_t> got_u8(7);
  reader.read<uint8_t>("mask.bytes", got_u8);
  EXPECT_EQ(got_u8, u8);
  float step = 0;
  reader.read_f32("optim.step", std::span<float>(&step, 1));
  EXPECT_EQ(step, scalar[0]);

  const TensorInfo& scalar_info = reader.info("optim.step");
  EXPECT_TRUE(scalar_info.shape.empty());
  EXPECT_EQ(scalar_info.numel(), 1U);
  EXPECT_EQ(scalar_info.nbytes(), 4U);
  const TensorInfo& empty = reader.info("head.empty");
  EXPECT_EQ(empty.shape, (std::vector<uint64_t>{0, 5}));
  EXPECT_EQ(empty.numel(), 0U);
  EXPECT_TRUE(reader.data("head.empty").empty());
  reader.read_f32("head.empty", {});
  EXPECT_EQ(reader.info("block0.w16").dtype, TESSERA_F16);
  EXPECT_EQ(reader.info("block0.wbf").dtype, TESSERA_BF16);
  EXPECT_EQ(reader.data("mask.bytes").size(), 7U);
}

TEST(SafetensorsRoundTrip, HeaderLayoutFollowsTheSpec) {
  TempDir dir;
  const std::vector<float> w = {1, 2, 3};
  const std::vector<uint8_t> b = {9};
  SafetensorsWriter writer;
  writer.add<float>("lin.w", {3}, w);
  writer.add<uint8_t>("lin.b", {1}, b);
  writer.set_metadata("note", "x");
  writer.save(dir / "h.safetensors");
  const std::string file = read_bytes(dir / "h.safetensors");

  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ(n % 8, 0U);
  ASSERT_EQ(file.size(), 8 + n + 13);
  const std::string header = file.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));  // padded with spaces only
  const auto json = nlohmann::json::parse(header);
  EXPECT_EQ(json["__metadata__"], (nlohmann::json{{"note", "x"}}));
  EXPECT_EQ(json["lin.w"]["dtype"], "F32");
  EXPECT_EQ(json["lin.w"]["shape"], (nlohmann::json{3}));
  EXPECT_EQ(json["lin.w"]["data_offsets"], (nlohmann::json{0, 12}));
  EXPECT_EQ(json["lin.b"]["dtype"], "U8");
  EXPECT_EQ(json["lin.b"]["data_offsets"], (nlohmann::json{12, 13}));
  float first = 0;
  std::memcpy(&first, file.data() + 8 + n, 4);
  EXPECT_EQ(first, 1.0F);
  EXPECT_EQ(static_cast<uint8_t>(file.back()), 9);
}

TEST(SafetensorsRoundTrip, EmptyFileHasOnlyAHeader) {
  TempDir dir;
  SafetensorsWriter().save(dir / "e.safetensors");
  const SafetensorsReader reader = SafetensorsReader::open(dir / "e.safetensors");
  EXPECT_TRUE(reader.names().empty());
  EXPECT_TRUE(reader.metadata().empty());
}

TEST(SafetensorsRoundTrip, ReaderStaysValidWhenFileIsReplaced) {
  TempDir dir;
  const std::vector<float> first = {1, 2};
  SafetensorsWriter a;
  a.add<float>("p", {2}, first);
  a.save(dir / "c.safetensors");
  const SafetensorsReader reader = SafetensorsReader::open(dir / "c.safetensors");
  const std::vector<float> second = {7, 8, 9};
  SafetensorsWriter b;
  b.add<float>("p", {3}, second);
  b.save(dir / "c.safetensors");
  std::vector<float> got(2);
  reader.read_f32("p", got);  // still the mapping of the old file
  EXPECT_EQ(got, first);
  EXPECT_EQ(SafetensorsReader::open(dir / "c.safetensors").info("p").numel(), 3U);
}

TEST(SafetensorsWriterErrors, RejectsBadTensors) {
  const std::vector<float> v = {1, 2, 3};
  SafetensorsWriter writer;
  writer.add<float>("a.w", {3}, v);
  EXPECT_THROW(writer.add<float>("a.w", {3}, v), Error);              // duplicate
  EXPECT_THROW(writer.add<float>("", {3}, v), Error);                 // empty name
  EXPECT_THROW(writer.add<float>("__metadata__", {3}, v), Error);     // reserved
  EXPECT_THROW(writer.add<float>("a.x", {2, 2}, v), Error);           // count mismatch
  EXPECT_THROW(writer.add("a.y", TESSERA_F32, {3}, nullptr), Error);  // null data
  EXPECT_THROW(writer.add("a.z", 99, {1}, v.data()), Error);          // unknown dtype
  EXPECT_THROW(writer.add_owned("a.o", TESSERA_F32, {2}, std::vector<std::byte>(7)), Error);
  try {
    writer.add<float>("a.w", {3}, v);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a.w'"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsFormat, DtypeNames) {
  EXPECT_EQ(safetensors_dtype_name(TESSERA_BF16), "BF16");
  EXPECT_EQ(parse_safetensors_dtype("I64"), TESSERA_I64);
  EXPECT_FALSE(parse_safetensors_dtype("BOOL").has_value());
  EXPECT_FALSE(parse_safetensors_dtype("f32").has_value());
  EXPECT_THROW(safetensors_dtype_name(TESSERA_DTYPE_COUNT), Error);
  const std::vector<uint64_t> huge = {1ULL << 40, 1ULL << 40};
  EXPECT_THROW(shape_numel(huge), Error);
  const std::vector<uint64_t> empty_huge = {1ULL << 40, 1ULL << 40, 0};
  EXPECT_EQ(shape_numel(empty_huge), 0U);
}

}  // namespace
}  // namespace tessera
