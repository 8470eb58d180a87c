// The files of a run: a FIFO given as model.init is refused without
// blocking.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "../support/bounded.hpp"
#include "run_fixture.hpp"

namespace tessera::test {
namespace {

namespace fs = std::filesystem;

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST(RunFiles, ModelInitFifoIsRefusedWithoutBlocking) {
  TESSERA_REQUIRE_STRATEGY("none");
  ScratchDir dir;
  const fs::path init = dir / "weights.safetensors";
  ASSERT_EQ(::mkfifo(init.c_str(), 0600), 0) << std::strerror(errno);
  const Config config = make_config(mlp_toml("none", 1, 2), {"model.init=" + init.string()});
  const std::string message = error_within(20, [&] { (void)train::plan_run(config, plugins()); });
  EXPECT_MENTIONS(message,
                  "model.init: file '" + init.string() + "' is a FIFO, not a regular file");
}

}  // namespace
}  // namespace tessera::test
