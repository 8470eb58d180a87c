#include "check.hpp"

#include <cctype>
#include <sstream>
#include <stdexcept>

#include "reference.hpp"
#include "tessera/sdk/dtype.hpp"

namespace tessera::conformance {

std::string OpDesc::text() const {
  std::ostringstream out;
  out << coll;
  if (dtype >= 0) out << " dtype=" << dtype_name(dtype);
  if (op >= 0) out << " op=" << reduce_op_name(op);
  if (dtype >= 0) out << " count=" << count;
  if (root >= 0) out << " root=" << root;
  if (peer >= 0) out << " peer=" << peer;
  if (tag >= 0) out << " tag=" << tag;
  return out.str();
}

double rounding_tolerance(const OpDesc& op) noexcept {
  // Two units in the last place: four unit roundoffs.
  return op.op == TESSERA_AVG ? 4.0 * unit_roundoff(op.dtype) : 0.0;
}

std::string where(const Communicator& comm) {
  std::ostringstream out;
  out << "[backend '" << comm.backend_name() << "', rank " << comm.rank() << " of " << comm.size()
      << "]";
  return out.str();
}

void fail(const Communicator& comm, const OpDesc& op, const std::string& problem) {
  throw std::runtime_error(where(comm) + " " + op.text() + ": " + problem);
}

void fail(const Communicator& comm, std::string_view step, const std::string& problem) {
  throw std::runtime_error(where(comm) + " " + std::string(step) + ": " + problem);
}

void rethrow_with_context(const Communicator& comm, const OpDesc& op) {
  const std::string prefix = where(comm) + " " + op.text() + ": ";
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.status(), prefix + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error(prefix + e.what());
  } catch (...) {
    throw std::runtime_error(prefix + "unknown exception");
  }
}

void fail_value(const Communicator& comm, const OpDesc& op, std::string_view part, uint64_t index,
                double expected, double got) {
  std::ostringstream out;
  if (!part.empty()) out << part << ", ";
  out << "index " << index << ": expected " << expected << ", got " << got;
  fail(comm, op, out.str());
}

std::string check_error(const Communicator& comm, const OpDesc& op,
                        std::initializer_list<tessera_status> statuses,
                        std::initializer_list<std::string_view> keywords, const Error* error,
                        const char* other_exception) {
  std::ostringstream wanted;
  wanted << "expected an error with status";
  const char* sep = " ";
  for (const auto status : statuses) {
    wanted << sep << "'" << status_name(status) << "'";
    sep = " or ";
  }
  if (keywords.size() > 0) wanted << " mentioning";
  sep = " ";
  for (const auto word : keywords) {
    wanted << sep << '"' << word << '"';
    sep = " or ";
  }
  if (other_exception != nullptr) {
    fail(comm, op, wanted.str() + ", got a non-tessera exception: " + other_exception);
  }
  if (error == nullptr) fail(comm, op, wanted.str() + ", but the call succeeded");
  const std::string message = error->what();
  bool status_ok = false;
  for (const auto status : statuses) status_ok = status_ok || error->status() == status;
  if (!status_ok) {
    fail(comm, op,
         wanted.str() + ", got status '" + status_name(error->status()) + "': " + message);
  }
  bool named = keywords.size() == 0;
  for (const auto word : keywords) named = named || contains_nocase(message, word);
  if (!named) fail(comm, op, wanted.str() + ", got: " + message);
  return message;
}

bool contains_nocase(std::string_view text, std::string_view word) noexcept {
  if (word.empty()) return true;
  if (word.size() > text.size()) return false;
  for (size_t start = 0; start + word.size() <= text.size(); ++start) {
    bool match = true;
    for (size_t k = 0; k < word.size() && match; ++k) {
      match = std::tolower(static_cast<unsigned char>(text[start + k])) ==
              std::tolower(static_cast<unsigned char>(word[k]));
    }
    if (match) return true;
  }
  return false;
}

bool names_rank(std::string_view text, int rank) noexcept {
  size_t pos = 0;
  while ((pos = text.find("rank", pos)) != std::string_view::npos) {
    size_t i = pos + 4;
    if (i < text.size() && text[i] == 's') ++i;
    // Walk the list of numbers that follows.
    while (i < text.size()) {
      const char c = text[i];
      if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
        long value = 0;
        while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0) {
          value = value * 10 + (text[i] - '0');
          ++i;
        }
        if (value == rank) return true;
      } else if (c == ' ' || c == ',' || c == '[' || c == ']' || c == ':' || c == '=' || c == '{' ||
                 c == '}') {
        ++i;
      } else {
        break;
      }
    }
    pos += 4;
  }
  return false;
}

}  // namespace tessera::conformance
