// The file kind of the host's store (store.hpp): one file per key in a
// directory every rank reaches (a shared file system).
//
// A key's file is "key." and the full key ("<ns>/<key>") with every byte
// outside [A-Za-z0-9._-] written as %XX; a name longer than 200 characters
// keeps its first 160 and gains the 64-bit FNV-1a of the full key, which
// keeps it within any file system's limit. Such a name cannot be read back
// as the key, so every file holds its full key ahead of the value: a 4-byte
// big-endian length, the key, the value. Values are written to a temporary
// file and renamed over the key's file, so a reader sees the old value or
// the new one, never a part. Read-modify-write operations (add,
// compare-and-set) hold an flock on the store's lock file, taken on an open
// file description of their own, so they exclude each other across
// processes and across the threads of one process alike.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "../fd_guard.hpp"
#include "polling.hpp"
#include "tessera/core/store.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::store {
namespace file_detail {

using common::poll_until;
using common::quoted_keys;

using Value = std::vector<char>;

constexpr std::string_view kKeyFilePrefix = "key.";
constexpr std::string_view kLockFileName = ".lock";
constexpr size_t kMaxFileName = 200;
constexpr size_t kKeptOfLongName = 160;
constexpr size_t kHeaderSize = 4;
constexpr std::string_view kHexDigits = "0123456789abcdef";

std::string system_error_text(int err) { return std::system_category().message(err); }

bool plain_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// `text` with every byte outside [A-Za-z0-9._-] written as %XX. The encoding
// of a key starts with the encoding of each of its prefixes.
std::string percent_encoded(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (plain_byte(c)) {
      out += ch;
    } else {
      out += '%';
      out += kHexDigits[c >> 4U];
      out += kHexDigits[c & 15U];
    }
  }
  return out;
}

uint64_t fnv1a(std::string_view text) {
  uint64_t hash = 14695981039346656037ULL;
  for (const char ch : text) {
    hash ^= static_cast<unsigned char>(ch);
    hash *= 1099511628211ULL;
  }
  return hash;
}

std::string key_file_name(const std::string& full_key) {
  std::string name = std::string(kKeyFilePrefix) + percent_encoded(full_key);
  if (name.size() <= kMaxFileName) return name;
  const uint64_t hash = fnv1a(full_key);
  name.resize(kKeptOfLongName);
  name += '.';
  for (int shift = 60; shift >= 0; shift -= 4)
    name += kHexDigits[(hash >> static_cast<unsigned>(shift)) & 15U];
  return name;
}

// Whether the file named `name` can hold a key that starts with the prefix
// whose encoding is `encoded_prefix`: its name, past "key.", starts with that
// encoding, as far as the name keeps the key.
bool name_may_start_with(std::string_view name, std::string_view encoded_prefix) {
  if (name.substr(0, kKeyFilePrefix.size()) != kKeyFilePrefix) return false;
  const std::string_view body = name.substr(kKeyFilePrefix.size());
  const size_t kept = kKeptOfLongName - kKeyFilePrefix.size();
  const size_t n = std::min(encoded_prefix.size(), kept);
  return body.substr(0, n) == encoded_prefix.substr(0, n);
}

// A name for a temporary file of this process that no other process, here
// or on another machine, picks: pid, a random token drawn once, a counter.
std::string temp_file_name() {
  static const uint64_t token = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32U) ^ device();
  }();
  static std::atomic<uint64_t> counter{0};
  std::string name = ".tmp." + std::to_string(::getpid()) + ".";
  for (int shift = 60; shift >= 0; shift -= 4)
    name += kHexDigits[(token >> static_cast<unsigned>(shift)) & 15U];
  name += "." + std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  return name;
}

// The full key and the value of a key file's content; nullopt when it is
// too short to be one.
std::optional<std::pair<std::string, std::vector<char>>> parse_entry(const Value& content) {
  if (content.size() < kHeaderSize) return std::nullopt;
  uint32_t key_size = 0;
  for (size_t i = 0; i < kHeaderSize; ++i)
    key_size = (key_size << 8U) | static_cast<unsigned char>(content[i]);
  if (content.size() - kHeaderSize < key_size) return std::nullopt;
  const auto key_begin = content.begin() + static_cast<std::ptrdiff_t>(kHeaderSize);
  const auto key_end = key_begin + static_cast<std::ptrdiff_t>(key_size);
  return std::make_pair(std::string(key_begin, key_end), Value(key_end, content.end()));
}

class FileStore final : public Store {
 public:
  explicit FileStore(const Config& config) : dir_(config.dir), ns_(config.ns) {
    const std::string from = config.source.empty() ? "" : " (from " + config.source + ")";
    std::error_code ec;
    if (dir_.empty() || !std::filesystem::is_directory(dir_, ec)) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat("the file store directory '", dir_, "'", from,
                                 " does not exist or is not a directory: set option store_dir or "
                                 "TESSERA_RENDEZVOUS_DIR to a directory every rank can reach"));
    }
    if (::access(dir_.c_str(), W_OK | X_OK) != 0) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat("the file store directory '", dir_, "'", from,
                                 " is not writable by this process (option store_dir or "
                                 "TESSERA_RENDEZVOUS_DIR)"));
    }
  }

  [[nodiscard]] std::string description() const override { return "file store at '" + dir_ + "'"; }

  void set(const std::string& key, const std::vector<char>& value) override {
    write_entry(full_key(key), value, "setting key '" + key + "'");
  }

  std::vector<char> get(const std::string& key, int64_t timeout_ms) override {
    const std::string full = full_key(key);
    return common::await_value(key, description(), timeout_ms,
                               [&] { return read_entry(full, "getting key '" + key + "'"); });
  }

  int64_t add(const std::string& key, int64_t delta) override {
    const std::string full = full_key(key);
    const std::string doing = "adding to key '" + key + "'";
    const StoreLock lock(*this, doing);
    int64_t value = 0;
    if (const auto now = read_entry(full, doing)) {
      const std::string text(now->begin(), now->end());
      char* end = nullptr;
      errno = 0;
      const long long parsed = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || errno != 0 || end == nullptr || *end != '\0') {
        throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                    detail::concat(description(), " refused ", doing, ": key '", full,
                                   "' holds a value that is not an integer"));
      }
      value = parsed;
    }
    value += delta;
    const std::string text = std::to_string(value);
    write_entry(full, Value(text.begin(), text.end()), doing);
    return value;
  }

  CasResult compare_and_set(const std::string& key,
                            const std::optional<std::vector<char>>& expected,
                            const std::vector<char>& desired) override {
    const std::string full = full_key(key);
    const std::string doing = "comparing and setting key '" + key + "'";
    const StoreLock lock(*this, doing);
    CasResult result;
    result.value = read_entry(full, doing);
    result.swapped = expected ? result.value == expected : !result.value.has_value();
    if (result.swapped) {
      write_entry(full, desired, doing);
      result.value = desired;
    }
    return result;
  }

  void wait(const std::vector<std::string>& keys, int64_t timeout_ms) override {
    std::vector<std::string> missing = keys;
    const std::string doing = "waiting for keys " + quoted_keys(keys);
    const bool ready = poll_until(timeout_ms, [&] {
      missing.erase(std::remove_if(missing.begin(), missing.end(),
                                   [&](const std::string& k) { return exists(k, doing); }),
                    missing.end());
      return missing.empty();
    });
    if (!ready) {
      throw Error(TESSERA_ERR_TIMEOUT,
                  detail::concat("waiting for keys ", quoted_keys(missing), " in the ",
                                 description(), " timed out after ", timeout_ms, " ms"));
    }
  }

  bool check(const std::vector<std::string>& keys) override {
    const std::string doing = "checking keys " + quoted_keys(keys);
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return exists(k, doing); });
  }

  int64_t delete_prefix(const std::string& prefix) override {
    const std::string full_prefix = full_key(prefix);
    const std::string encoded_prefix = percent_encoded(full_prefix);
    const std::string doing = "deleting the keys under '" + prefix + "'";
    std::vector<std::string> names;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end;
         it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (name_may_start_with(name, encoded_prefix)) names.push_back(std::move(name));
    }
    if (ec) fail(doing, "list the directory", dir_, ec.value());
    int64_t removed = 0;
    for (const auto& name : names) {
      const std::string path = path_of(name);
      const auto content = read_file(path, doing);
      if (!content) continue;
      // A file that is no entry is not the store's to remove.
      const auto entry = parse_entry(*content);
      if (!entry || entry->first.compare(0, full_prefix.size(), full_prefix) != 0) continue;
      if (::unlink(path.c_str()) == 0) {
        ++removed;
        continue;
      }
      const int err = errno;
      if (err != ENOENT) fail(doing, "remove", path, err);
    }
    return removed;
  }

 private:
  // An exclusive flock on the store's lock file, on a descriptor of its own.
  class StoreLock {
   public:
    StoreLock(const FileStore& store, const std::string& doing)
        : path_(store.path_of(std::string(kLockFileName))),
          fd_(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666)) {
      if (fd_.get() < 0) {
        const int err = errno;
        store.fail(doing, "open the lock file", path_, err);
      }
      while (::flock(fd_.get(), LOCK_EX) != 0) {
        const int err = errno;
        if (err != EINTR) store.fail(doing, "lock", path_, err);
      }
    }
    StoreLock(const StoreLock&) = delete;
    StoreLock& operator=(const StoreLock&) = delete;
    ~StoreLock() = default;  // closing the descriptor releases the lock

   private:
    std::string path_;
    FdGuard fd_;
  };

  [[nodiscard]] std::string full_key(const std::string& key) const {
    return ns_.empty() ? key : ns_ + "/" + key;
  }

  [[nodiscard]] std::string path_of(const std::string& name) const { return dir_ + "/" + name; }

  [[noreturn]] void fail(const std::string& doing, const std::string& what, const std::string& path,
                         int err) const {
    throw Error(TESSERA_ERR_INTERNAL,
                detail::concat(description(), ": cannot ", what, " '", path, "' while ", doing,
                               ": ", system_error_text(err)));
  }

  // The bytes of the file at `path`; nullopt when there is no such file.
  [[nodiscard]] std::optional<Value> read_file(const std::string& path,
                                               const std::string& doing) const {
    const FdGuard fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) {
      const int err = errno;
      if (err == ENOENT) return std::nullopt;
      fail(doing, "open", path, err);
    }
    Value content;
    std::array<char, 65536> chunk{};
    for (;;) {
      const ssize_t n = ::read(fd.get(), chunk.data(), chunk.size());
      if (n == 0) break;
      if (n < 0) {
        const int err = errno;
        if (err == EINTR) continue;
        fail(doing, "read", path, err);
      }
      content.insert(content.end(), chunk.begin(), chunk.begin() + n);
    }
    return content;
  }

  // The value of `full`; nullopt while it is absent.
  [[nodiscard]] std::optional<Value> read_entry(const std::string& full,
                                                const std::string& doing) const {
    const std::string path = path_of(key_file_name(full));
    const auto content = read_file(path, doing);
    if (!content) return std::nullopt;
    auto entry = parse_entry(*content);
    if (!entry) {
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat(description(), ": '", path, "' is not an entry of the store (",
                                 content->size(), " bytes, too short) while ", doing));
    }
    if (entry->first != full) {
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat(description(), ": '", path, "' holds key '", entry->first,
                                 "', not '", full, "' (their file names collide) while ", doing));
    }
    return std::move(entry->second);
  }

  [[nodiscard]] bool exists(const std::string& key, const std::string& doing) const {
    const std::string path = path_of(key_file_name(full_key(key)));
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) return true;
    const int err = errno;
    if (err == ENOENT) return false;
    fail(doing, "look for", path, err);
  }

  // Writes the entry to a temporary file and renames it over the key's
  // file: readers see the old value or the new one, whole.
  void write_entry(const std::string& full, const Value& value, const std::string& doing) const {
    const std::string temp = path_of(temp_file_name());
    const std::string path = path_of(key_file_name(full));
    Value content;
    content.reserve(kHeaderSize + full.size() + value.size());
    const auto key_size = static_cast<uint32_t>(full.size());
    for (int shift = 24; shift >= 0; shift -= 8)
      content.push_back(static_cast<char>((key_size >> static_cast<unsigned>(shift)) & 0xffU));
    content.insert(content.end(), full.begin(), full.end());
    content.insert(content.end(), value.begin(), value.end());

    FdGuard fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) {
      const int err = errno;
      fail(doing, "create", temp, err);
    }
    const char* at = content.data();
    size_t left = content.size();
    int err = 0;
    while (left > 0 && err == 0) {
      const ssize_t n = ::write(fd.get(), at, left);
      if (n < 0) {
        if (errno != EINTR) err = errno;
        continue;
      }
      at += n;
      left -= static_cast<size_t>(n);
    }
    const int close_err = fd.close_now();
    if (err == 0) err = close_err;
    if (err != 0) {
      (void)::unlink(temp.c_str());
      fail(doing, "write", temp, err);
    }
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      err = errno;
      (void)::unlink(temp.c_str());
      fail(doing, "rename a temporary file over", path, err);
    }
  }

  std::string dir_;
  std::string ns_;
};

}  // namespace file_detail

std::unique_ptr<Store> open_file(const Config& config) {
  return std::make_unique<file_detail::FileStore>(config);
}

}  // namespace tessera::store
