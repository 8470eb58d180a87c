// The [data] keys the run loop adds to the configuration: micro_batches and
// token_bytes (read, checked, printed back).
#include <gtest/gtest.h>

#include <string>

#include "run_fixture.hpp"

namespace tessera::test {
namespace {

TEST(DataConfig, DefaultsAndValues) {
  const Config defaults = make_config("");
  EXPECT_EQ(defaults.data.micro_batches, 1);
  EXPECT_EQ(defaults.data.token_bytes, 2);
  const Config set = make_config(
      "[data]\nkind = \"tokens\"\npath = \"t.bin\"\nbatch_size = 8\nmicro_batches = 4\n"
      "token_bytes = 4\n");
  EXPECT_EQ(set.data.micro_batches, 4);
  EXPECT_EQ(set.data.token_bytes, 4);
}

TEST(DataConfig, PrintedBackAndReloaded) {
  const Config first = make_config(
      "[data]\nkind = \"tokens\"\npath = \"t.bin\"\nbatch_size = 8\nmicro_batches = 2\n"
      "token_bytes = 4\n");
  const std::string text = to_toml(first);
  EXPECT_NE(text.find("micro_batches = 2"), std::string::npos) << text;
  EXPECT_NE(text.find("token_bytes = 4"), std::string::npos) << text;
  const Config second = make_config(text);
  EXPECT_EQ(second.data.micro_batches, 2);
  EXPECT_EQ(second.data.token_bytes, 4);
}

TEST(DataConfig, BadValuesNameTheKeyAndLine) {
  EXPECT_EQ(error_of([] { (void)make_config("[data]\nmicro_batches = 0\n"); }),
            "run.toml:2: 'data.micro_batches' must be >= 1, got 0");
  EXPECT_EQ(error_of([] { (void)make_config("[data]\nbatch_size = 2\nmicro_batches = 3\n"); }),
            "run.toml:3: 'data.micro_batches' = 3 must not exceed 'data.batch_size' = 2 (every "
            "micro-batch needs an example)");
  EXPECT_EQ(error_of([] { (void)make_config("[data]\ntoken_bytes = 3\n"); }),
            "run.toml:2: 'data.token_bytes' must be 2 (u16 ids) or 4 (u32 ids), got 3");
  EXPECT_EQ(error_of([] { (void)make_config("", {"data.micro_batches=many"}); }),
            "--set data.micro_batches=many: 'data.micro_batches' must be an integer, got a string");
}

}  // namespace
}  // namespace tessera::test
