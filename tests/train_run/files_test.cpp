// The files of a run: a FIFO given as model.init is refused without
// blocking; a data file truncated during the run is named in the error.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <streambuf>
#include <string>

#include "../support/bounded.hpp"
#include "run_fixture.hpp"

namespace tessera::test {
namespace {

namespace fs = std::filesystem;
using train::run_training;
using train::RunOptions;

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

// An output stream that hands every complete line to a callback (run on
// the thread that writes it: rank 0's, during the run) and keeps the text.
class LineHook : public std::streambuf {
 public:
  explicit LineHook(std::function<void(const std::string&)> on_line)
      : on_line_(std::move(on_line)) {}
  [[nodiscard]] const std::string& text() const { return text_; }

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    text_.push_back(ch);
    if (ch != '\n') {
      line_.push_back(ch);
    } else {
      on_line_(line_);
      line_.clear();
    }
    return c;
  }

 private:
  std::function<void(const std::string&)> on_line_;
  std::string line_;
  std::string text_;
};

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

// The data file cut to nothing after step 2 (from rank 0's log): the next
// step's batch is an error naming the file, not a SIGBUS.
TEST(RunFiles, DataFileTruncatedDuringTheRunIsAnErrorNamingIt) {
  TESSERA_REQUIRE_STRATEGY("ddp");
  ScratchDir dir;
  const fs::path data = dir / "train.bin";
  {
    std::ofstream file(data, std::ios::binary);
    for (int i = 0; i < 4096; ++i) {
      const char id[2] = {static_cast<char>(i % 32), 0};  // u16 ids below vocab 32
      file.write(id, 2);
    }
  }
  LineHook hook([&](const std::string& line) {
    if (line.rfind("step 2/", 0) == 0) fs::resize_file(data, 0);
  });
  std::ostream out(&hook);
  RunOptions options;
  options.out = &out;
  const std::string message = error_of([&] {
    (void)run_training(
        make_config(gpt_toml("ddp", 2, 6),
                    {"data.kind=tokens", "data.path=" + data.string(), "run.log_every=1"}),
        plugins(), options);
  });
  EXPECT_MENTIONS(message, "data file '" + data.string() +
                               "' was truncated while in use: it had 8192 bytes when opened, 0 "
                               "bytes now");
  EXPECT_MENTIONS(hook.text(), "step 2/6");
}

}  // namespace
}  // namespace tessera::test
