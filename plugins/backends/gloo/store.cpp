#include "store.hpp"

#include <unistd.h>

#include <exception>
#include <filesystem>
#include <system_error>

#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/redis_store.h>

#include "tessera/sdk/error.hpp"

namespace tessera::gloo_backend {
namespace {

// gloo's FileStore with its presence check made callable: the check is a
// protected member meant for derived stores.
class ProbedFileStore final : public gloo::rendezvous::FileStore {
 public:
  explicit ProbedFileStore(const std::string& path) : FileStore(path) {}
  bool present(const std::vector<std::string>& keys) { return check(keys); }
};

class FileRendezvous final : public Store {
 public:
  explicit FileRendezvous(const std::string& dir) : dir_(dir), store_(make(dir)) {}

  gloo::rendezvous::Store& gloo() noexcept override { return *store_; }

  bool has(const std::vector<std::string>& keys) override {
    try {
      return store_->present(keys);
    } catch (const std::exception& e) {
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat("gloo: cannot read the ", description(), ": ", e.what()));
    }
  }

  [[nodiscard]] std::string description() const override { return "file store at '" + dir_ + "'"; }

 private:
  static std::unique_ptr<ProbedFileStore> make(const std::string& dir) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat("gloo: the file store directory '", dir,
                                 "' does not exist or is not a directory (option store_dir or "
                                 "TESSERA_RENDEZVOUS_DIR)"));
    }
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat("gloo: the file store directory '", dir,
                                 "' is not writable by this process"));
    }
    try {
      return std::make_unique<ProbedFileStore>(dir);
    } catch (const std::exception& e) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat("gloo: cannot open the file store at '", dir, "': ", e.what()));
    }
  }

  std::string dir_;
  std::unique_ptr<ProbedFileStore> store_;
};

class RedisRendezvous final : public Store {
 public:
  RedisRendezvous(const std::string& host, int32_t port)
      : host_(host), port_(port), store_(make(host, port)) {}

  gloo::rendezvous::Store& gloo() noexcept override { return *store_; }

  bool has(const std::vector<std::string>& keys) override {
    try {
      return store_->check(keys);
    } catch (const std::exception& e) {
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat("gloo: cannot read the ", description(), ": ", e.what()));
    }
  }

  [[nodiscard]] std::string description() const override {
    return "Redis store at " + host_ + ":" + std::to_string(port_);
  }

 private:
  static std::unique_ptr<gloo::rendezvous::RedisStore> make(const std::string& host, int32_t port) {
    try {
      return std::make_unique<gloo::rendezvous::RedisStore>(host, port);
    } catch (const std::exception& e) {
      throw Error(TESSERA_ERR_PEER_LOST,
                  detail::concat("gloo: cannot reach the Redis store at ", host, ":", port,
                                 " (options redis_host / redis_port): ", e.what()));
    }
  }

  std::string host_;
  int32_t port_;
  std::unique_ptr<gloo::rendezvous::RedisStore> store_;
};

}  // namespace

std::unique_ptr<Store> open_store(const Settings& settings) {
  if (settings.store == StoreKind::kFile) {
    return std::make_unique<FileRendezvous>(settings.store_dir);
  }
  return std::make_unique<RedisRendezvous>(settings.redis_host, settings.redis_port);
}

}  // namespace tessera::gloo_backend
