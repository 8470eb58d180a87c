// The Redis kind of the host's store (store.hpp), on hiredis: one
// connection, one command at a time. Blocking reads poll (Redis has no
// blocking GET); compare-and-set is one Lua script, which Redis runs
// atomically; delete_prefix scans for the keys and deletes what it found.
// A build without hiredis refuses to open one.
#include <memory>
#include <string>

#include "polling.hpp"
#include "tessera/core/store.hpp"
#include "tessera/sdk/error.hpp"

#ifdef TESSERA_HAVE_HIREDIS

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <sys/time.h>

#include <csignal>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace tessera::store {
namespace redis_detail {

using Value = std::vector<char>;

// The bound of a reply when the configuration sets none: a Redis server
// answers within milliseconds, so a minute means it is gone.
constexpr int64_t kDefaultReplyMs = 60000;
constexpr std::string_view kScanBatch = "1000";

// Sets KEYS[1] to ARGV[3] when it holds ARGV[2] (ARGV[1] == "1") or is
// absent (ARGV[1] == "0"); returns {swapped, the value now} ({0}: absent).
constexpr std::string_view kCompareAndSetScript = R"lua(
local now = redis.call('GET', KEYS[1])
if (ARGV[1] == '1' and now == ARGV[2]) or (ARGV[1] == '0' and not now) then
  redis.call('SET', KEYS[1], ARGV[3])
  return {1, ARGV[3]}
end
if now then return {0, now} end
return {0}
)lua";

struct FreeReply {
  void operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, FreeReply>;

struct FreeContext {
  void operator()(redisContext* context) const noexcept { redisFree(context); }
};
using Context = std::unique_ptr<redisContext, FreeContext>;

timeval timeval_of_ms(int64_t ms) {
  timeval tv{};
  tv.tv_sec = static_cast<decltype(tv.tv_sec)>(ms / 1000);
  tv.tv_usec = static_cast<decltype(tv.tv_usec)>((ms % 1000) * 1000);
  return tv;
}

// Keeps SIGPIPE from this thread while it lives: hiredis writes with
// write(), and a server gone mid-command must be an error, not the end of
// the process. A SIGPIPE raised meanwhile is taken off again.
class SigpipeBlock {
 public:
  SigpipeBlock() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;
  ~SigpipeBlock() {
    if (!blocked_) return;
    const int saved = errno;
    sigset_t pending;
    sigemptyset(&pending);
    if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    (void)pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    errno = saved;
  }

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
  bool blocked_ = false;
};

// `text` with the characters a Redis glob pattern gives a meaning escaped.
std::string glob_escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string_view reply_text(const redisReply& reply) {
  return reply.str == nullptr ? std::string_view() : std::string_view(reply.str, reply.len);
}

class RedisStore final : public Store {
 public:
  explicit RedisStore(const Config& config)
      : host_(config.host),
        port_(config.port),
        ns_(config.ns),
        source_(config.source),
        reply_ms_(config.timeout_ms < 0 ? kDefaultReplyMs
                                        : std::max<int64_t>(config.timeout_ms, 1)) {
    {
      const std::lock_guard lock(mutex_);
      connect("");
    }
    // A port where something else listens, or a server that answers no
    // command, is found out now rather than at the first key.
    try {
      (void)call({"PING"}, "saying PING", REDIS_REPLY_STATUS);
    } catch (const Error& e) {
      throw Error(TESSERA_ERR_PEER_LOST,
                  detail::concat("cannot reach the Redis store at ", host_, ":", port_,
                                 source_.empty() ? "" : " (" + source_ + ")", ": ", e.message()));
    }
  }

  [[nodiscard]] std::string description() const override {
    return detail::concat("Redis store at ", host_, ":", port_);
  }

  void set(const std::string& key, const std::vector<char>& value) override {
    (void)call({"SET", full_key(key), as_view(value)}, "setting key '" + key + "'",
               REDIS_REPLY_STATUS);
  }

  std::vector<char> get(const std::string& key, int64_t timeout_ms) override {
    const std::string full = full_key(key);
    const std::string doing = "getting key '" + key + "'";
    return common::await_value(key, description(), timeout_ms, [&]() -> std::optional<Value> {
      const Reply reply = call({"GET", full}, doing, REDIS_REPLY_STRING, REDIS_REPLY_NIL);
      if (reply->type == REDIS_REPLY_NIL) return std::nullopt;
      const std::string_view text = reply_text(*reply);
      return Value(text.begin(), text.end());
    });
  }

  int64_t add(const std::string& key, int64_t delta) override {
    const std::string full = full_key(key);
    const std::string doing = "adding to key '" + key + "'";
    const std::string by = std::to_string(delta);
    const Reply reply = send({"INCRBY", full, by}, doing);
    if (reply->type == REDIS_REPLY_ERROR &&
        reply_text(*reply).find("not an integer") != std::string_view::npos) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat(description(), " refused ", doing, ": key '", full,
                                 "' holds a value that is not an integer"));
    }
    check_type(*reply, doing, REDIS_REPLY_INTEGER, REDIS_REPLY_INTEGER);
    return reply->integer;
  }

  CasResult compare_and_set(const std::string& key,
                            const std::optional<std::vector<char>>& expected,
                            const std::vector<char>& desired) override {
    const std::string doing = "comparing and setting key '" + key + "'";
    const Reply reply =
        call({"EVAL", kCompareAndSetScript, "1", full_key(key), expected ? "1" : "0",
              expected ? as_view(*expected) : std::string_view(), as_view(desired)},
             doing, REDIS_REPLY_ARRAY);
    const bool well_formed =
        reply->elements >= 1 && reply->element[0]->type == REDIS_REPLY_INTEGER &&
        (reply->elements == 1 ||
         (reply->elements == 2 && reply->element[1]->type == REDIS_REPLY_STRING));
    if (!well_formed) unexpected(doing, "an array that is not {swapped, value}");
    CasResult result;
    result.swapped = reply->element[0]->integer != 0;
    if (reply->elements == 2) {
      const std::string_view now = reply_text(*reply->element[1]);
      result.value.emplace(now.begin(), now.end());
    }
    return result;
  }

  void wait(const std::vector<std::string>& keys, int64_t timeout_ms) override {
    std::vector<std::string> missing = keys;
    const std::string doing = "waiting for keys " + common::quoted_keys(keys);
    const bool ready = common::poll_until(timeout_ms, [&] {
      missing.erase(
          std::remove_if(
              missing.begin(), missing.end(),
              [&](const std::string& k) {
                return call({"EXISTS", full_key(k)}, doing, REDIS_REPLY_INTEGER)->integer > 0;
              }),
          missing.end());
      return missing.empty();
    });
    if (!ready) {
      throw Error(TESSERA_ERR_TIMEOUT,
                  detail::concat("waiting for keys ", common::quoted_keys(missing), " in the ",
                                 description(), " timed out after ", timeout_ms, " ms"));
    }
  }

  bool check(const std::vector<std::string>& keys) override {
    if (keys.empty()) return true;
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(full_key(k));
    std::vector<std::string_view> args{"EXISTS"};
    args.insert(args.end(), full.begin(), full.end());
    // EXISTS counts a key named twice twice, so all exist when it counts all.
    const Reply reply =
        call(args, "checking keys " + common::quoted_keys(keys), REDIS_REPLY_INTEGER);
    return reply->integer == static_cast<long long>(keys.size());
  }

  int64_t delete_prefix(const std::string& prefix) override {
    const std::string pattern = glob_escaped(full_key(prefix)) + "*";
    const std::string doing = "deleting the keys under '" + prefix + "'";
    std::string cursor = "0";
    int64_t removed = 0;
    do {
      const Reply page =
          call({"SCAN", cursor, "MATCH", pattern, "COUNT", kScanBatch}, doing, REDIS_REPLY_ARRAY);
      if (page->elements != 2 || page->element[0]->type != REDIS_REPLY_STRING ||
          page->element[1]->type != REDIS_REPLY_ARRAY) {
        unexpected(doing, "a SCAN page that is not {cursor, keys}");
      }
      cursor = std::string(reply_text(*page->element[0]));
      const redisReply& keys = *page->element[1];
      if (keys.elements == 0) continue;
      std::vector<std::string_view> args{"DEL"};
      for (size_t i = 0; i < keys.elements; ++i) args.push_back(reply_text(*keys.element[i]));
      // DEL counts only what it removed: a key a SCAN returns twice counts once.
      removed += call(args, doing, REDIS_REPLY_INTEGER)->integer;
    } while (cursor != "0");
    return removed;
  }

 private:
  static std::string_view as_view(const Value& value) { return {value.data(), value.size()}; }

  [[nodiscard]] std::string full_key(const std::string& key) const {
    return ns_.empty() ? key : ns_ + "/" + key;
  }

  // Connects (mutex_ held); throws Error(PEER_LOST) when nothing answers.
  void connect(const std::string& doing) {
    const timeval bound = timeval_of_ms(reply_ms_);
    Context context(redisConnectWithTimeout(host_.c_str(), port_, bound));
    std::string why;
    if (context == nullptr) {
      why = "out of memory";
    } else if (context->err != 0) {
      why = context->errstr;
    } else if (redisSetTimeout(context.get(), bound) != REDIS_OK) {
      why = context->err != 0 ? std::string(context->errstr) : "cannot set the reply timeout";
    }
    if (!why.empty()) {
      throw Error(TESSERA_ERR_PEER_LOST,
                  detail::concat("cannot reach the Redis store at ", host_, ":", port_,
                                 source_.empty() ? "" : " (" + source_ + ")",
                                 doing.empty() ? "" : " while " + doing, ": ", why));
    }
    context_ = std::move(context);
  }

  // Sends one command and returns its reply, error replies included. A
  // connection lost earlier is made again first. Throws Error(TIMEOUT) when
  // the reply does not come within the bound, Error(PEER_LOST) when the
  // connection fails.
  Reply send(const std::vector<std::string_view>& args, const std::string& doing) {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    argv.reserve(args.size());
    lengths.reserve(args.size());
    for (const auto& a : args) {
      argv.push_back(a.empty() ? "" : a.data());
      lengths.push_back(a.size());
    }
    const std::lock_guard lock(mutex_);
    if (context_ == nullptr) connect(doing);
    Reply reply;
    int sys_err = 0;
    {
      const SigpipeBlock quiet;
      reply.reset(static_cast<redisReply*>(redisCommandArgv(
          context_.get(), static_cast<int>(argv.size()), argv.data(), lengths.data())));
      sys_err = errno;
    }
    if (reply != nullptr) return reply;
    // The context is unusable after an error: the next command connects anew.
    const int err = context_->err;
    const std::string why = context_->errstr;
    const bool timed_out =
#ifdef REDIS_ERR_TIMEOUT
        err == REDIS_ERR_TIMEOUT ||
#endif
        (err == REDIS_ERR_IO && (sys_err == EAGAIN || sys_err == EWOULDBLOCK));
    context_.reset();
    if (timed_out) {
      throw Error(TESSERA_ERR_TIMEOUT, detail::concat(description(), " did not answer within ",
                                                      reply_ms_, " ms while ", doing));
    }
    throw Error(TESSERA_ERR_PEER_LOST, detail::concat("lost the connection to the ", description(),
                                                      " while ", doing, ": ", why));
  }

  // send(), with an error reply or one of another type than `type` or
  // `other_type` thrown as Error(INTERNAL).
  Reply call(const std::vector<std::string_view>& args, const std::string& doing, int type,
             int other_type = -1) {
    Reply reply = send(args, doing);
    check_type(*reply, doing, type, other_type);
    return reply;
  }

  void check_type(const redisReply& reply, const std::string& doing, int type,
                  int other_type) const {
    if (reply.type == REDIS_REPLY_ERROR) {
      throw Error(TESSERA_ERR_INTERNAL,
                  detail::concat(description(), " refused ", doing, ": ", reply_text(reply)));
    }
    if (reply.type != type && reply.type != other_type) {
      unexpected(doing, detail::concat("a reply of type ", reply.type));
    }
  }

  [[noreturn]] void unexpected(const std::string& doing, const std::string& what) const {
    throw Error(TESSERA_ERR_INTERNAL,
                detail::concat(description(), " answered ", doing, " with ", what));
  }

  std::string host_;
  int32_t port_;
  std::string ns_;
  std::string source_;
  int64_t reply_ms_;
  std::mutex mutex_;
  Context context_;
};

}  // namespace redis_detail

std::unique_ptr<Store> open_redis(const Config& config) {
  return std::make_unique<redis_detail::RedisStore>(config);
}

bool has_redis() noexcept { return true; }

}  // namespace tessera::store

#else  // no hiredis

namespace tessera::store {

std::unique_ptr<Store> open_redis(const Config& /*config*/) {
  throw Error(TESSERA_ERR_INVALID_ARGUMENT,
              "this build of Tessera has no Redis store (it was built without hiredis: install "
              "libhiredis-dev and rebuild)");
}

bool has_redis() noexcept { return false; }

}  // namespace tessera::store

#endif
