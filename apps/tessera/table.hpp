// Plain-text tables for terminal output: column titles, per-column alignment,
// widths either fitted to the rows or fixed up front so rows can be printed
// one at a time as they are produced (the benchmark streams its rows).
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace tessera::cli {

enum class Align { kLeft, kRight };

struct Column {
  std::string title;
  Align align = Align::kLeft;
  size_t min_width = 0;  // the column is never narrower than this or its title
};

// A table of string cells. add_row() checks the cell count and widens the
// columns as needed; print() writes the title line and every row. For
// streaming, format_title() / format_row() use the widths known so far
// (titles and min_width) without storing anything.
class TextTable {
 public:
  // `columns` must not be empty; `gap` separates adjacent columns.
  explicit TextTable(std::vector<Column> columns, std::string gap = "  ");

  // Stores a row. Throws std::invalid_argument if cells.size() differs from
  // the number of columns.
  void add_row(std::vector<std::string> cells);

  // Title line and all stored rows, each ending with '\n'. Trailing blanks of
  // a line are removed.
  void print(std::ostream& out) const;

  // One formatted line (no '\n') with the current widths; a cell wider than
  // its column is written in full and shifts the rest of the line. Throws
  // std::invalid_argument on a wrong cell count.
  [[nodiscard]] std::string format_row(const std::vector<std::string>& cells) const;
  [[nodiscard]] std::string format_title() const;

  [[nodiscard]] size_t num_rows() const noexcept { return rows_.size(); }

 private:
  std::vector<Column> columns_;
  std::vector<size_t> widths_;
  std::string gap_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace tessera::cli
