// Options the compressors refuse: the message names the option, the value
// and the valid range (checked by the plugin's create), or the key (checked
// by the host against the declarations).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "compress_harness.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {
namespace {

struct Refusal {
  const char* compressor;
  const char* options;
  std::vector<const char*> says;  // substrings of the message
};

TEST(CompressorOptions, BadValuesAreRefusedNamingOptionAndRange) {
  const std::vector<Refusal> cases{
      {"int8", "chunk = 0", {"option 'chunk' = 0", "[1, 2^30]", "int8"}},
      {"int8", "chunk = -5", {"option 'chunk' = -5", "[1, 2^30]"}},
      {"topk", "ratio = 0.0", {"option 'ratio' = 0", "(0, 1]", "topk"}},
      {"topk", "ratio = 1.5", {"option 'ratio' = 1.5", "(0, 1]"}},
      {"powersgd", "rank = 0", {"option 'rank' = 0", "[1, 4096]", "powersgd"}},
      {"powersgd", "min_compression = -1.0", {"option 'min_compression' = -1", ">= 0"}},
      {"fp16", "scale = -2.0", {"option 'scale' = -2", "positive finite"}},
  };
  for (const Refusal& r : cases) {
    try {
      const Compressors c(r.compressor, r.options);
      ADD_FAILURE() << r.compressor << " accepted " << r.options;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), TESSERA_ERR_INVALID_ARGUMENT) << e.what();
      for (const char* s : r.says) {
        EXPECT_NE(std::string(e.what()).find(s), std::string::npos)
            << r.compressor << " " << r.options << ": '" << e.what() << "' lacks '" << s << "'";
      }
    }
  }
}

// Unknown keys and wrong types are the host's checks, against what the
// plugin declares.
TEST(CompressorOptions, UndeclaredKeysAndWrongTypesAreRefusedByTheHost) {
  for (const auto& [name, options, key] :
       std::vector<std::tuple<const char*, const char*, const char*>>{
           {"topk", "k = 10", "k"},
           {"int8", "chunk = \"big\"", "chunk"},
           {"bf16", "divide_by_world = true", "divide_by_world"},
           {"powersgd", "warm_start = 1", "warm_start"}}) {
    try {
      const Compressors c(name, options);
      ADD_FAILURE() << name << " accepted " << options;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

TEST(CompressorOptions, DefaultsAreAccepted) {
  for (const char* name : {"fp16", "bf16", "int8", "topk", "powersgd"}) {
    const Compressors c(name, "");
    EXPECT_EQ(c.ranks(), 1) << name;
  }
}

}  // namespace
}  // namespace tessera::test
