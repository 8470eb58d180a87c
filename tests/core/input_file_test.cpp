// Inputs that are not regular files (FIFOs, sockets, devices, directories)
// are refused before they are read, naming the path and what it is; whole
// reads have a size limit; failures carry strerror.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "../support/bounded.hpp"
#include "tessera/core/config.hpp"
#include "tessera/core/input_file.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera {
namespace {

namespace fs = std::filesystem;

#define EXPECT_MENTIONS(text, part) \
  EXPECT_NE((text).find(part), std::string::npos) << "message: " << (text)

class InputFileTest : public ::testing::Test {
 protected:
  InputFileTest() {
    std::random_device rd;
    dir_ = fs::temp_directory_path() /
           ("tessera_input_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  ~InputFileTest() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  InputFileTest(const InputFileTest&) = delete;
  InputFileTest& operator=(const InputFileTest&) = delete;

  [[nodiscard]] fs::path fifo(const std::string& name) const {
    const fs::path path = dir_ / name;
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
    return path;
  }
  [[nodiscard]] fs::path write(const std::string& name, const std::string& text) const {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  fs::path dir_;
};

TEST_F(InputFileTest, ConfigFifoIsRefusedWithoutBlocking) {
  const fs::path path = fifo("run.toml");
  const std::string message = test::error_within(10, [&] { (void)load_config(path); });
  EXPECT_MENTIONS(message, "config file '" + path.string() + "' is a FIFO, not a regular file");
}

TEST_F(InputFileTest, ConfigDeviceIsRefusedBeforeReading) {
  const std::string message = test::error_within(10, [] { (void)load_config("/dev/zero"); });
  EXPECT_MENTIONS(message, "config file '/dev/zero' is a character device, not a regular file");
}

TEST_F(InputFileTest, ConfigDirectoryIsRefused) {
  const std::string message = test::error_within(10, [&] { (void)load_config(dir_); });
  EXPECT_MENTIONS(message,
                  "config file '" + dir_.string() + "' is a directory, not a regular file");
}

TEST_F(InputFileTest, SocketIsRefused) {
  const fs::path path = dir_ / "sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.string().size(), sizeof address.sun_path);
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0)
      << std::strerror(errno);
  const std::string message = test::error_within(10, [&] { const InputFile f(path, "data file"); });
  ::close(fd);
  EXPECT_MENTIONS(message, "data file '" + path.string() + "' is a socket, not a regular file");
}

TEST_F(InputFileTest, MissingFileSaysSo) {
  const fs::path path = dir_ / "absent.toml";
  const std::string message = test::error_within(10, [&] { (void)load_config(path); });
  EXPECT_MENTIONS(message, "config file '" + path.string() + "' does not exist");
}

TEST_F(InputFileTest, ConfigLargerThanTheLimitIsRefusedBeforeReading) {
  const fs::path path = dir_ / "huge.toml";
  { std::ofstream(path) << "# big\n"; }
  fs::resize_file(path, (uint64_t{16} << 20) + 1);  // sparse: nothing is written
  const std::string message = test::error_within(10, [&] { (void)load_config(path); });
  EXPECT_MENTIONS(message, "config file '" + path.string() +
                               "' is 16777217 bytes, more than the limit of 16777216");
}

TEST_F(InputFileTest, ReadInputFileReturnsTheWholeFile) {
  const std::string text(10000, 'x');
  EXPECT_EQ(read_input_file(write("a.txt", text), "test file", 10000), text);
  EXPECT_EQ(read_input_file(write("empty.txt", ""), "test file", 10), "");
}

TEST_F(InputFileTest, UnreadableFileNamesStrerror) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  const fs::path path = write("secret.toml", "[run]\n");
  fs::permissions(path, fs::perms::none);
  const std::string message = test::error_within(10, [&] { (void)load_config(path); });
  EXPECT_MENTIONS(message,
                  "config file '" + path.string() + "' cannot be opened: " + std::strerror(EACCES));
}

TEST_F(InputFileTest, ReadAtStopsShortAtTheEndOfAShrunkFile) {
  const fs::path path = write("data.bin", std::string(100, 'a'));
  const InputFile file(path, "data file");
  EXPECT_EQ(file.size(), 100U);
  fs::resize_file(path, 10);
  char buffer[50];
  EXPECT_EQ(file.read_at(0, buffer, sizeof buffer), 10U);
  EXPECT_EQ(file.read_at(60, buffer, sizeof buffer), 0U);
  EXPECT_EQ(file.current_size(), 10U);
}

TEST_F(InputFileTest, RegularFileProblem) {
  EXPECT_EQ(regular_file_problem(write("ok", "x")), "");
  EXPECT_EQ(regular_file_problem(dir_ / "absent"), "does not exist");
  EXPECT_EQ(regular_file_problem(dir_), "is a directory, not a regular file");
  EXPECT_EQ(regular_file_problem(fifo("pipe")), "is a FIFO, not a regular file");
  EXPECT_EQ(regular_file_problem("/dev/null"), "is a character device, not a regular file");
}

}  // namespace
}  // namespace tessera
