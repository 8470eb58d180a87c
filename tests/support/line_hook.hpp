// An output stream buffer that hands every complete line to a callback (run
// on the thread that writes it, e.g. rank 0's during a run) and keeps the
// whole text, so a test can act at a given point of a run's log.
#pragma once

#include <functional>
#include <streambuf>
#include <string>
#include <utility>

namespace tessera::test {

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

}  // namespace tessera::test
