#include "table.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace tessera::cli {

namespace {

void check_cells(size_t expected, size_t got) {
  if (expected != got) {
    throw std::invalid_argument("table row has " + std::to_string(got) + " cells, expected " +
                                std::to_string(expected));
  }
}

std::string rstrip(std::string line) {
  const auto end = line.find_last_not_of(' ');
  line.erase(end == std::string::npos ? 0 : end + 1);
  return line;
}

}  // namespace

TextTable::TextTable(std::vector<Column> columns, std::string gap)
    : columns_(std::move(columns)), gap_(std::move(gap)) {
  if (columns_.empty()) throw std::invalid_argument("a table needs at least one column");
  widths_.reserve(columns_.size());
  for (const auto& c : columns_) widths_.push_back(std::max(c.min_width, c.title.size()));
}

void TextTable::add_row(std::vector<std::string> cells) {
  check_cells(columns_.size(), cells.size());
  for (size_t i = 0; i < cells.size(); ++i) widths_[i] = std::max(widths_[i], cells[i].size());
  rows_.push_back(std::move(cells));
}

std::string TextTable::format_row(const std::vector<std::string>& cells) const {
  check_cells(columns_.size(), cells.size());
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i > 0) line += gap_;
    const std::string& cell = cells[i];
    const size_t pad = widths_[i] > cell.size() ? widths_[i] - cell.size() : 0;
    if (columns_[i].align == Align::kRight) {
      line.append(pad, ' ');
      line += cell;
    } else {
      line += cell;
      line.append(pad, ' ');
    }
  }
  return rstrip(std::move(line));
}

std::string TextTable::format_title() const {
  std::vector<std::string> titles;
  titles.reserve(columns_.size());
  for (const auto& c : columns_) titles.push_back(c.title);
  return format_row(titles);
}

void TextTable::print(std::ostream& out) const {
  out << format_title() << '\n';
  for (const auto& row : rows_) out << format_row(row) << '\n';
}

}  // namespace tessera::cli
