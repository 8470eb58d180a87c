// Every kind of damaged or malformed file is refused with an error that
// names the file and, where one is at fault, the tensor.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "file_bytes.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

using test::craft;
using test::TempDir;
using test::write_bytes;

// One F32 tensor entry "name" with the given shape and offsets.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

class SafetensorsCorrupt : public ::testing::Test {
 protected:
  // Opening `bytes` must fail with a message containing every `parts`
  // entry (the file path is always required too).
  void expect_refused(const std::string& bytes, const std::vector<std::string>& parts) {
    const auto path = dir_ / "bad.safetensors";
    write_bytes(path, bytes);
    try {
      (void)SafetensorsReader::open(path);
      ADD_FAILURE() << "file was accepted; expected an error containing " << parts.front();
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT);
      EXPECT_NE(message.find(path.string()), std::string::npos) << message;
      for (const std::string& part : parts) {
        EXPECT_NE(message.find(part), std::string::npos)
            << "missing '" << part << "' in " << message;
      }
    }
  }
  // Opening `path` must fail with a message naming it and containing `part`.
  static void expect_refused_path(const std::filesystem::path& path, const std::string& part) {
    try {
      (void)SafetensorsReader::open(path);
      ADD_FAILURE() << path << " was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path.string()), std::string::npos) << message;
      EXPECT_NE(message.find(part), std::string::npos) << message;
    }
  }
  TempDir dir_;
};

TEST_F(SafetensorsCorrupt, TooShortForHeaderLength) {
  expect_refused(std::string("\x08\x00\x00", 3), {"fewer than the 8-byte header length"});
}

TEST_F(SafetensorsCorrupt, HeaderLengthBeyondFile) {
  std::string bytes = craft("{}", "");
  bytes[0] = '\x40';  // claims 64 header bytes, file has 2
  expect_refused(bytes, {"header length 64 exceeds the file size"});
}

TEST_F(SafetensorsCorrupt, InvalidJson) {
  expect_refused(craft("{\"a\": {\"dtype\": ", ""), {"header is not valid JSON"});
}

TEST_F(SafetensorsCorrupt, InvalidUtf8InHeader) {
  expect_refused(craft("{\"\xff\xfe\": 1}", ""), {"header is not valid JSON"});
}

TEST_F(SafetensorsCorrupt, HeaderNotAnObject) {
  expect_refused(craft("[1, 2]  ", ""), {"header is not a JSON object"});
}

TEST_F(SafetensorsCorrupt, UnknownDtype) {
  expect_refused(craft("{" + entry("w.q", "F8_E4M3", "[2]", "[0,2]") + "}", "ab"),
                 {"tensor 'w.q'", "unknown dtype \"F8_E4M3\""});
}

TEST_F(SafetensorsCorrupt, MissingOrMistypedFields) {
  expect_refused(craft(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", "abcd"),
                 {"tensor 'w'", "\"dtype\""});
  expect_refused(craft(R"({"w":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", "abcd"),
                 {"tensor 'w'", "\"shape\""});
  expect_refused(craft("{" + entry("w", "F32", "[-1]", "[0,4]") + "}", "abcd"),
                 {"tensor 'w'", "\"shape\" must hold non-negative integers"});
  expect_refused(craft(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "abcd"),
                 {"tensor 'w'", "\"data_offsets\""});
  expect_refused(craft(R"({"w":[1,2]})", ""), {"tensor 'w'", "not a JSON object"});
}

TEST_F(SafetensorsCorrupt, ReversedOffsets) {
  expect_refused(craft("{" + entry("w", "U8", "[2]", "[2,0]") + "}", "ab"),
                 {"tensor 'w'", "are reversed"});
}

TEST_F(SafetensorsCorrupt, OffsetsOutOfBounds) {
  expect_refused(craft("{" + entry("w", "F32", "[2]", "[0,8]") + "}", "abcd"),
                 {"tensor 'w'", "run past the data section of 4 bytes"});
}

TEST_F(SafetensorsCorrupt, OffsetsNotMatchingDtypeTimesShape) {
  expect_refused(craft("{" + entry("w", "F64", "[2,1]", "[0,8]") + "}", "abcdefgh"),
                 {"tensor 'w'", "span 8 bytes", "needs 2 x 8 bytes"});
}

TEST_F(SafetensorsCorrupt, OverlappingTensors) {
  const std::string header =
      "{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]") + "}";
  expect_refused(craft(header, std::string(12, 'x')), {"tensor 'b'", "overlap tensor 'a'"});
}

TEST_F(SafetensorsCorrupt, GapBetweenTensors) {
  const std::string header =
      "{" + entry("a", "U8", "[2]", "[0,2]") + "," + entry("b", "U8", "[2]", "[4,6]") + "}";
  expect_refused(craft(header, std::string(6, 'x')), {"tensor 'b'", "gap after byte 2"});
}

TEST_F(SafetensorsCorrupt, TrailingBytesAfterLastTensor) {
  expect_refused(craft("{" + entry("a", "U8", "[2]", "[0,2]") + "}", "abc"),
                 {"data section has 3 bytes but its tensors cover only 2"});
}

TEST_F(SafetensorsCorrupt, DuplicateNames) {
  const std::string header =
      "{" + entry("dup.w", "U8", "[1]", "[0,1]") + "," + entry("dup.w", "U8", "[1]", "[1,2]") + "}";
  expect_refused(craft(header, "ab"), {"tensor 'dup.w'", "appears twice"});
}

TEST_F(SafetensorsCorrupt, MetadataValuesMustBeStrings) {
  expect_refused(craft(R"({"__metadata__":{"step":3}})", ""),
                 {"\"__metadata__\" entry 'step' is not a string"});
  expect_refused(craft(R"({"__metadata__":"x"})", ""), {"\"__metadata__\" is not a JSON object"});
}

TEST_F(SafetensorsCorrupt, MissingFileAndDirectory) {
  expect_refused_path(dir_ / "absent.safetensors", "does not exist");
  expect_refused_path(dir_.path(), "not a regular file");
}

TEST(SafetensorsLookup, ErrorsNameFileAndTensor) {
  TempDir dir;
  const std::vector<float> v = {1, 2, 3, 4};
  SafetensorsWriter writer;
  writer.add<float>("unit.param", {2, 2}, v);
  writer.save(dir / "x.safetensors");
  const SafetensorsReader reader = SafetensorsReader::open(dir / "x.safetensors");
  const std::string file = (dir / "x.safetensors").string();
  try {
    (void)reader.info("unit.other");
    ADD_FAILURE() << "missing tensor accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'unit.other'"), std::string::npos) << e.what();
  }
  std::vector<float> small(3);
  try {
    reader.read_f32("unit.param", small);
    ADD_FAILURE() << "wrong size accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), TESSERA_ERR_MISMATCH);
    EXPECT_NE(std::string(e.what()).find("has 4 elements but the destination holds 3"),
              std::string::npos)
        << e.what();
  }
  std::vector<double> wrong_type(4);
  EXPECT_THROW(reader.read<double>("unit.param", wrong_type), Error);
  EXPECT_FALSE(reader.contains("unit.other"));
  EXPECT_TRUE(reader.contains("unit.param"));
}

}  // namespace
}  // namespace tessera
