// How `tessera launch` copies its ranks' output: whole lines, each prefixed
// with the rank, written to the launcher's own stdout or stderr with one
// write(2) per line so that lines of different ranks never mix.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera::cli {

// Writes all of `data` to `fd`, retrying after EINTR and partial writes
// (and waiting for room when `fd` is non-blocking). Returns false if the descriptor refuses data
// (closed reader, EPIPE, full disk); the caller then drops the output, it never throws.
bool write_all(int fd, std::string_view data) noexcept;

// Reassembles one output stream of one rank into lines and writes each
// complete line as "<prefix><line>\n" to `fd`.
//  - feed() may receive any fragment of the stream; bytes after the last
//    newline are kept until the line completes.
//  - finish() writes a pending partial line (with a newline added) when the
//    stream ends.
//  - A line longer than kMaxLine bytes is written in kMaxLine pieces, each
//    prefixed, so that a rank that never writes a newline cannot exhaust
//    memory.
// Write failures on `fd` silently discard the output (see write_all).
class LinePrefixer {
 public:
  static constexpr std::size_t kMaxLine = std::size_t{1} << 20;

  LinePrefixer(std::string prefix, int fd) : prefix_(std::move(prefix)), fd_(fd) {}

  // Adds `size` bytes of the stream; writes every line they complete.
  void feed(const char* data, std::size_t size);

  // Ends the stream: writes the partial last line, if any. Idempotent.
  void finish();

  // Bytes held back waiting for a newline.
  [[nodiscard]] std::size_t pending() const noexcept { return partial_.size(); }

 private:
  void emit(std::string_view line);

  std::string prefix_;
  int fd_;
  std::string partial_;
  std::string scratch_;  // prefix + line + '\n', reused between lines
};

}  // namespace tessera::cli
