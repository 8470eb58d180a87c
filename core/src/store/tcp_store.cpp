#include "tessera/core/tcp_store.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "polling.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::store {
namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<char>;

constexpr uint32_t kMagic = 0x54535331;  // "TSS1"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxMessage = 256U << 20;
// How much longer than an operation's own timeout a client waits for its
// reply: the server answers at its deadline, the slack covers the network.
constexpr int64_t kReplySlackMs = 2000;

enum class Op : uint8_t {
  kHello = 1,
  kSet,
  kGet,
  kAdd,
  kCompareAndSet,
  kWait,
  kCheck,
  kDeletePrefix,
  kCount
};
enum class Reply : uint8_t { kOk = 0, kTimeout = 1, kError = 2, kShutdown = 3 };

std::string errno_text(int err) { return std::system_category().message(err); }

// ---- encoding -------------------------------------------------------------

void put_u32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}
void put_i64(Bytes& out, int64_t value) {
  const auto v = static_cast<uint64_t>(value);
  for (int shift = 56; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xff));
}
void put_bytes(Bytes& out, std::string_view bytes) {
  put_u32(out, static_cast<uint32_t>(bytes.size()));
  out.insert(out.end(), bytes.begin(), bytes.end());
}
void put_bytes(Bytes& out, const Bytes& bytes) {
  put_bytes(out, std::string_view(bytes.data(), bytes.size()));
}
void put_u8(Bytes& out, uint8_t v) { out.push_back(static_cast<char>(v)); }

// Reads a message body front to back; any read past its end throws.
class Reader {
 public:
  explicit Reader(const Bytes& body) : body_(body) {}
  uint8_t u8() {
    need(1);
    return static_cast<uint8_t>(body_[pos_++]);
  }
  uint32_t u32() {
    need(4);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(body_[pos_++]);
    return v;
  }
  int64_t i64() {
    need(8);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(body_[pos_++]);
    return static_cast<int64_t>(v);
  }
  Bytes bytes() {
    const uint32_t n = u32();
    need(n);
    Bytes out(body_.begin() + static_cast<std::ptrdiff_t>(pos_),
              body_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
    pos_ += n;
    return out;
  }
  std::string text() {
    const Bytes b = bytes();
    return {b.begin(), b.end()};
  }
  std::vector<std::string> texts() {
    const uint32_t n = u32();
    need(n);  // each key takes at least its 4-byte length
    std::vector<std::string> out;
    out.reserve(n);
    for (uint32_t i = 0; i < n; ++i) out.push_back(text());
    return out;
  }

 private:
  void need(size_t n) const {
    if (body_.size() - pos_ < n) throw std::runtime_error("truncated message");
  }
  const Bytes& body_;
  size_t pos_ = 0;
};

// ---- socket I/O with deadlines ----------------------------------------------

// Milliseconds left until `deadline` for poll(); -1 when there is none.
int poll_ms(const std::optional<Clock::time_point>& deadline) {
  if (!deadline) return -1;
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

enum class Io { kOk, kClosed, kTimeout, kError };

// Waits until `fd` is ready for `events`.
Io await_fd(int fd, short events, const std::optional<Clock::time_point>& deadline, int& err) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rv = ::poll(&p, 1, poll_ms(deadline));
    if (rv > 0) return Io::kOk;
    if (rv == 0) return Io::kTimeout;
    if (errno != EINTR) {
      err = errno;
      return Io::kError;
    }
  }
}

Io write_all(int fd, const char* data, size_t size,
             const std::optional<Clock::time_point>& deadline, int& err) {
  while (size > 0) {
    const Io ready = await_fd(fd, POLLOUT, deadline, err);
    if (ready != Io::kOk) return ready;
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      err = errno;
      return errno == EPIPE || errno == ECONNRESET ? Io::kClosed : Io::kError;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Io::kOk;
}

Io read_all(int fd, char* data, size_t size, const std::optional<Clock::time_point>& deadline,
            int& err) {
  while (size > 0) {
    const Io ready = await_fd(fd, POLLIN, deadline, err);
    if (ready != Io::kOk) return ready;
    const ssize_t n = ::recv(fd, data, size, MSG_DONTWAIT);
    if (n == 0) return Io::kClosed;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      err = errno;
      return errno == ECONNRESET ? Io::kClosed : Io::kError;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Io::kOk;
}

Io write_message(int fd, const Bytes& body, const std::optional<Clock::time_point>& deadline,
                 int& err) {
  Bytes frame;
  frame.reserve(body.size() + 4);
  put_u32(frame, static_cast<uint32_t>(body.size()));
  frame.insert(frame.end(), body.begin(), body.end());
  return write_all(fd, frame.data(), frame.size(), deadline, err);
}

Io read_message(int fd, Bytes& body, const std::optional<Clock::time_point>& deadline, int& err) {
  std::array<char, 4> head{};
  const Io io = read_all(fd, head.data(), head.size(), deadline, err);
  if (io != Io::kOk) return io;
  uint32_t n = 0;
  for (const char c : head) n = (n << 8) | static_cast<uint8_t>(c);
  if (n > kMaxMessage) {
    err = EMSGSIZE;
    return Io::kError;
  }
  body.assign(n, '\0');
  return read_all(fd, body.data(), n, deadline, err);
}

std::optional<Clock::time_point> deadline_after(int64_t timeout_ms) {
  if (timeout_ms < 0) return std::nullopt;
  return Clock::now() + std::chrono::milliseconds(timeout_ms);
}

bool is_loopback(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);  // NOLINT
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);  // NOLINT
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);                   // NOLINT
  }
  return false;
}

std::string join_keys(const std::vector<std::string>& keys) { return common::quoted_keys(keys); }

}  // namespace

// ---- server -------------------------------------------------------------------

struct TcpStoreServer::State {
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  mutable std::mutex mutex;
  std::condition_variable changed;  // a key was written, a client left, or stopping
  std::map<std::string, Bytes> data;
  size_t connected = 0;
  size_t accepted = 0;  // connections ever served
  bool stopping = false;

  int listen_fd = -1;
  std::array<int, 2> wake{-1, -1};  // a pipe that ends the accept loop
  std::thread acceptor;
  std::mutex connections_mutex;
  std::list<Connection> connections;
  bool stopped = false;

  // The keys of `keys` not present; mutex held.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys) {
      if (data.find(k) == data.end()) out.push_back(k);
    }
    return out;
  }

  // Waits (mutex held through `lock`) until `keys` are present, the deadline
  // passes or the server stops; returns the keys still missing.
  std::vector<std::string> await_keys(std::unique_lock<std::mutex>& lock,
                                      const std::vector<std::string>& keys, int64_t timeout_ms) {
    const auto deadline = deadline_after(timeout_ms);
    for (;;) {
      auto left = missing(keys);
      if (left.empty() || stopping) return left;
      if (!deadline) {
        changed.wait(lock);
      } else if (changed.wait_until(lock, *deadline) == std::cv_status::timeout) {
        return missing(keys);
      }
    }
  }

  Bytes handle(const Bytes& body) {
    Reader in(body);
    Bytes out;
    const auto op = static_cast<Op>(in.u8());
    std::unique_lock lock(mutex);
    switch (op) {
      case Op::kHello: {
        const uint32_t magic = in.u32();
        const uint32_t version = in.u32();
        if (magic != kMagic || version != kVersion) throw std::runtime_error("bad hello");
        put_u8(out, static_cast<uint8_t>(Reply::kOk));
        put_u32(out, kVersion);
        return out;
      }
      case Op::kSet: {
        std::string key = in.text();
        data[std::move(key)] = in.bytes();
        changed.notify_all();
        put_u8(out, static_cast<uint8_t>(Reply::kOk));
        return out;
      }
      case Op::kGet: {
        const std::string key = in.text();
        const int64_t timeout_ms = in.i64();
        if (!await_keys(lock, {key}, timeout_ms).empty()) {
          put_u8(out, static_cast<uint8_t>(stopping ? Reply::kShutdown : Reply::kTimeout));
          return out;
        }
        put_u8(out, static_cast<uint8_t>(Reply::kOk));
        put_bytes(out, data[key]);
        return out;
      }
      case Op::kAdd: {
        const std::string key = in.text();
        const int64_t delta = in.i64();
        int64_t value = 0;
        if (const auto it = data.find(key); it != data.end()) {
          const std::string text(it->second.begin(), it->second.end());
          char* end = nullptr;
          errno = 0;
          const long long parsed = std::strtoll(text.c_str(), &end, 10);
          if (text.empty() || errno != 0 || end == nullptr || *end != '\0') {
            put_u8(out, static_cast<uint8_t>(Reply::kError));
            put_bytes(out, "key '" + key + "' holds a value that is not an integer");
            return out;
          }
          value = parsed;
        }
        value += delta;
        const std::string text = std::to_string(value);
        data[key] = Bytes(text.begin(), text.end());
        changed.notify_all();
        put_u8(out, static_cast<uint8_t>(Reply::kOk));
        put_i64(out, value);
        return out;
      }
      case Op::kCompareAndSet: {
        const std::string key = in.text();
        const bool has_expected = in.u8() != 0;
        const Bytes expected = in.bytes();
        Bytes desired = in.bytes();
        const auto it = data.find(key);
        const bool match =
            has_expected ? (it != data.end() && it->second == expected) : it == data.end();
        if (match) {
          data[key] = std::move(desired);
          changed.notify_all();
        }
        const auto now = data.find(key);
        put_u8(out, static_cast<uint8_t>(Reply::kOk));
        put_u8(out, match ? 1 : 0);
        put_u8(out, now != data.end() ? 1 : 0);
        put_bytes(out, now != data.end() ? now->second : Bytes{});
        return out;
      }
      case Op::kWait: {
        const std::vector<std::string> keys = in.texts();
        const int64_t timeout_ms = in.i64();
        const std::vector<std::string> left = await_keys(lock, keys, timeout_ms);
        if (left.empty()) {
          put_u8(out, static_cast<uint8_t>(Reply::kOk));
        } else if (stopping) {
          put_u8(out, static_cast<uint8_t>(Reply::kShutdown));
        } else {
          put_u8(out, static_cast<uint8_t>(Reply::kTimeout));
          put_u32(out, static_cast<uint32_t>(left.size()));
          for (const auto& k : left) put_bytes(out, k);
        }
        return out;
      }
      case Op::kCheck: {
        const std::vector<std::string> keys = in.texts();
        put_u8(out, static_cast<uint8_t>(Reply::kOk));
        put_u8(out, missing(keys).empty() ? 1 : 0);
        return out;
      }
      case Op::kDeletePrefix:
      case Op::kCount: {
        const std::string prefix = in.text();
        int64_t n = 0;
        for (auto it = data.lower_bound(prefix);
             it != data.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
          ++n;
          it = op == Op::kDeletePrefix ? data.erase(it) : std::next(it);
        }
        put_u8(out, static_cast<uint8_t>(Reply::kOk));
        put_i64(out, n);
        return out;
      }
    }
    throw std::runtime_error("unknown operation");
  }

  void serve(Connection& c) {
    Bytes body;
    for (;;) {
      int err = 0;
      if (read_message(c.fd, body, std::nullopt, err) != Io::kOk) break;
      Bytes reply;
      try {
        reply = handle(body);
      } catch (const std::exception&) {
        break;  // a malformed request: drop the client
      }
      if (write_message(c.fd, reply, std::nullopt, err) != Io::kOk) break;
    }
    ::shutdown(c.fd, SHUT_RDWR);
    {
      const std::lock_guard lock(mutex);
      --connected;
      changed.notify_all();
    }
    c.done.store(true, std::memory_order_release);
  }

  // Joins and closes the connections that ended.
  void reap() {
    const std::lock_guard lock(connections_mutex);
    for (auto it = connections.begin(); it != connections.end();) {
      if (it->done.load(std::memory_order_acquire)) {
        it->thread.join();
        ::close(it->fd);
        it = connections.erase(it);
      } else {
        ++it;
      }
    }
  }

  void accept_loop() {
    for (;;) {
      std::array<pollfd, 2> fds{pollfd{listen_fd, POLLIN, 0}, pollfd{wake[0], POLLIN, 0}};
      const int rv = ::poll(fds.data(), fds.size(), 1000);
      if (rv < 0 && errno != EINTR) return;
      if (fds[1].revents != 0) return;
      reap();
      if (rv <= 0 || (fds[0].revents & POLLIN) == 0) continue;
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      const int one = 1;
      (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      {
        const std::lock_guard lock(mutex);
        if (stopping) {
          ::close(fd);
          return;
        }
        ++connected;
        ++accepted;
      }
      const std::lock_guard lock(connections_mutex);
      Connection& c = connections.emplace_back();
      c.fd = fd;
      try {
        c.thread = std::thread([this, &c] { serve(c); });
      } catch (const std::system_error&) {
        ::close(fd);
        connections.pop_back();
        const std::lock_guard data_lock(mutex);
        --connected;
      }
    }
  }
};

TcpStoreServer::TcpStoreServer(const std::string& host, int32_t port)
    : state_(std::make_unique<State>()) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rv = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rv != 0) {
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("cannot serve the TCP store on ", where, ": host '", host,
                               "' does not resolve (", ::gai_strerror(rv), ")"));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  int last_err = 0;
  for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    sockaddr_storage addr{};
    std::memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
    if (!is_loopback(ai->ai_addr)) {
      // Every local address of the family, on the same port.
      if (ai->ai_family == AF_INET) {
        reinterpret_cast<sockaddr_in*>(&addr)->sin_addr.s_addr = htonl(INADDR_ANY);  // NOLINT
      } else if (ai->ai_family == AF_INET6) {
        reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr = in6addr_any;  // NOLINT
      }
    }
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_err = errno;
      continue;
    }
    const int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), ai->ai_addrlen) != 0 ||  // NOLINT
        ::listen(fd, 128) != 0) {
      last_err = errno;
      ::close(fd);
      if (last_err == EADDRINUSE) break;
      continue;
    }
    state_->listen_fd = fd;
    break;
  }
  if (state_->listen_fd < 0) {
    if (last_err == EADDRINUSE) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat("cannot serve the TCP store on ", where,
                                 ": the address is in use (another run or program listens on "
                                 "port ",
                                 port,
                                 ": choose another MASTER_PORT; under torchrun, whose agent "
                                 "serves its own store there, set store = \"file\" or "
                                 "\"redis\")"));
    }
    throw Error(TESSERA_ERR_INVALID_ARGUMENT, detail::concat("cannot serve the TCP store on ",
                                                             where, ": ", errno_text(last_err)));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(state_->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {  // NOLINT
    port_ = ntohs(bound.ss_family == AF_INET6
                      ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port  // NOLINT
                      : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);  // NOLINT
  }
  if (::pipe2(state_->wake.data(), O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(state_->listen_fd);
    throw Error(TESSERA_ERR_INTERNAL,
                detail::concat("cannot serve the TCP store on ", where, ": ", errno_text(err)));
  }
  state_->acceptor = std::thread([s = state_.get()] { s->accept_loop(); });
}

TcpStoreServer::~TcpStoreServer() { (void)stop(std::chrono::milliseconds(0)); }

size_t TcpStoreServer::connections() const {
  const std::lock_guard lock(state_->mutex);
  return state_->connected;
}

size_t TcpStoreServer::accepted() const {
  const std::lock_guard lock(state_->mutex);
  return state_->accepted;
}

size_t TcpStoreServer::count(const std::string& prefix) const {
  const std::lock_guard lock(state_->mutex);
  size_t n = 0;
  for (auto it = state_->data.lower_bound(prefix);
       it != state_->data.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    ++n;
  }
  return n;
}

size_t TcpStoreServer::await_clients(std::chrono::milliseconds linger) const {
  std::unique_lock lock(state_->mutex);
  state_->changed.wait_for(lock, linger, [&] { return state_->connected == 0; });
  return state_->connected;
}

size_t TcpStoreServer::erase_prefix(const std::string& prefix) {
  const std::lock_guard lock(state_->mutex);
  size_t n = 0;
  for (auto it = state_->data.lower_bound(prefix);
       it != state_->data.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    it = state_->data.erase(it);
    ++n;
  }
  return n;
}

size_t TcpStoreServer::stop(std::chrono::milliseconds linger) {
  State& s = *state_;
  size_t left = 0;
  {
    std::unique_lock lock(s.mutex);
    if (s.stopped) return 0;
    s.stopped = true;
    s.changed.wait_for(lock, linger, [&] { return s.connected == 0; });
    left = s.connected;
    s.stopping = true;
    s.changed.notify_all();
  }
  const char byte = 1;
  (void)!::write(s.wake[1], &byte, 1);
  if (s.acceptor.joinable()) s.acceptor.join();
  {
    const std::lock_guard lock(s.connections_mutex);
    for (auto& c : s.connections) ::shutdown(c.fd, SHUT_RDWR);
    for (auto& c : s.connections) {
      c.thread.join();
      ::close(c.fd);
    }
    s.connections.clear();
  }
  ::close(s.listen_fd);
  ::close(s.wake[0]);
  ::close(s.wake[1]);
  return left;
}

// ---- client -------------------------------------------------------------------

namespace {

// One non-blocking connect to `ai`, waiting until `deadline` at most.
int connect_once(const addrinfo* ai, const std::optional<Clock::time_point>& deadline, int& err) {
  const int fd =
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) {
    err = errno;
    return -1;
  }
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      err = errno;
      ::close(fd);
      return -1;
    }
    // Each attempt waits at most a second, so a dropped SYN is retried.
    auto until = Clock::now() + std::chrono::seconds(1);
    if (deadline && *deadline < until) until = *deadline;
    if (await_fd(fd, POLLOUT, until, err) != Io::kOk) {
      if (err == 0) err = ETIMEDOUT;
      ::close(fd);
      return -1;
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0 || so_error != 0) {
      err = so_error != 0 ? so_error : errno;
      ::close(fd);
      return -1;
    }
  }
  const int one = 1;
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

TcpStoreClient::TcpStoreClient(std::string host, int32_t port, std::string ns, int64_t timeout_ms,
                               std::string what)
    : host_(std::move(host)),
      port_(port),
      ns_(std::move(ns)),
      timeout_ms_(timeout_ms),
      what_(std::move(what)) {
  const auto deadline = deadline_after(timeout_ms_);
  auto pause = std::chrono::milliseconds(10);
  int err = 0;
  std::string last = "no answer";
  const std::string service = std::to_string(port_);
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rv = ::getaddrinfo(host_.c_str(), service.c_str(), &hints, &found);
    if (rv == 0) {
      std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
      for (const addrinfo* ai = list.get(); ai != nullptr && fd_ < 0; ai = ai->ai_next) {
        err = 0;
        fd_ = connect_once(ai, deadline, err);
        if (fd_ < 0) last = errno_text(err);
      }
    } else {
      last = detail::concat("host '", host_, "' does not resolve (", ::gai_strerror(rv), ")");
    }
    if (fd_ >= 0) break;
    if (deadline && Clock::now() >= *deadline) {
      throw Error(
          TESSERA_ERR_TIMEOUT,
          detail::concat("cannot reach the ", description(), " within ", timeout_ms_, " ms (", last,
                         "): is rank 0 running, and do all ranks name the same "
                         "MASTER_ADDR and MASTER_PORT?"));
    }
    auto nap = pause;
    if (deadline) {
      nap = std::min(
          nap, std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()));
    }
    std::this_thread::sleep_for(std::max(nap, std::chrono::milliseconds(0)));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  Bytes hello;
  put_u8(hello, static_cast<uint8_t>(Op::kHello));
  put_u32(hello, kMagic);
  put_u32(hello, kVersion);
  try {
    (void)request(hello, timeout_ms_, "saying hello");
  } catch (const Error& e) {
    ::close(fd_);
    fd_ = -1;
    if (e.status() == TESSERA_ERR_TIMEOUT) throw;
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("what answers at ", host_, ":", port_,
                               " is not a Tessera TCP store (", e.what(), ")"));
  }
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStoreClient::description() const {
  std::string d = detail::concat("TCP store at ", host_, ":", port_);
  if (!what_.empty()) d += " (" + what_ + ")";
  return d;
}

std::string TcpStoreClient::local_address() const {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
  TESSERA_CHECK(::getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &len) == 0,
                TESSERA_ERR_INTERNAL, "cannot read the local address of the connection to the ",
                description(), ": ", errno_text(errno));
  std::array<char, NI_MAXHOST> text{};
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the sockets API
  const int rv = ::getnameinfo(reinterpret_cast<const sockaddr*>(&local), len, text.data(),
                               static_cast<socklen_t>(text.size()), nullptr, 0, NI_NUMERICHOST);
  TESSERA_CHECK(rv == 0, TESSERA_ERR_INTERNAL,
                "cannot print the local address of the connection to the ", description(), ": ",
                ::gai_strerror(rv));
  return text.data();
}

std::string TcpStoreClient::full_key(const std::string& key) const {
  return ns_.empty() ? key : ns_ + "/" + key;
}

Bytes TcpStoreClient::request(const Bytes& body, int64_t reply_timeout_ms,
                              const std::string& doing) {
  const std::lock_guard lock(mutex_);
  TESSERA_CHECK(!broken_, TESSERA_ERR_PEER_LOST, "the connection to the ", description(),
                " failed earlier; cannot go on ", doing);
  const auto deadline = deadline_after(reply_timeout_ms);
  int err = 0;
  Io io = write_message(fd_, body, deadline, err);
  Bytes reply;
  if (io == Io::kOk) io = read_message(fd_, reply, deadline, err);
  if (io == Io::kOk && reply.empty()) io = Io::kClosed;
  if (io == Io::kOk) {
    if (static_cast<Reply>(reply[0]) == Reply::kShutdown) {
      broken_ = true;
      throw Error(TESSERA_ERR_PEER_LOST, detail::concat(description(), " shut down while ", doing,
                                                        " (rank 0, which serves it, ended)"));
    }
    if (static_cast<Reply>(reply[0]) == Reply::kError) {
      Reader in(reply);
      (void)in.u8();
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat(description(), " refused ", doing, ": ", in.text()));
    }
    return reply;
  }
  broken_ = true;
  switch (io) {
    case Io::kClosed:
      throw Error(TESSERA_ERR_PEER_LOST,
                  detail::concat(description(), " closed the connection while ", doing,
                                 " (rank 0, which serves it, ended or failed)"));
    case Io::kTimeout:
      throw Error(TESSERA_ERR_TIMEOUT, detail::concat(description(), " did not answer within ",
                                                      reply_timeout_ms, " ms while ", doing));
    default:
      throw Error(TESSERA_ERR_PEER_LOST,
                  detail::concat("lost the connection to the ", description(), " while ", doing,
                                 ": ", errno_text(err)));
  }
}

void TcpStoreClient::set(const std::string& key, const std::vector<char>& value) {
  Bytes body;
  put_u8(body, static_cast<uint8_t>(Op::kSet));
  put_bytes(body, full_key(key));
  put_bytes(body, value);
  (void)request(body, timeout_ms_, "setting key '" + key + "'");
}

std::vector<char> TcpStoreClient::get(const std::string& key, int64_t timeout_ms) {
  Bytes body;
  put_u8(body, static_cast<uint8_t>(Op::kGet));
  put_bytes(body, full_key(key));
  put_i64(body, timeout_ms);
  const Bytes reply =
      request(body, timeout_ms < 0 ? -1 : timeout_ms + kReplySlackMs, "getting key '" + key + "'");
  if (static_cast<Reply>(reply[0]) == Reply::kTimeout) {
    throw Error(TESSERA_ERR_TIMEOUT,
                detail::concat("waiting for key '", key, "' in the ", description(),
                               " timed out after ", timeout_ms, " ms"));
  }
  Reader in(reply);
  (void)in.u8();
  return in.bytes();
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  Bytes body;
  put_u8(body, static_cast<uint8_t>(Op::kAdd));
  put_bytes(body, full_key(key));
  put_i64(body, delta);
  const Bytes reply = request(body, timeout_ms_, "adding to key '" + key + "'");
  Reader in(reply);
  (void)in.u8();
  return in.i64();
}

CasResult TcpStoreClient::compare_and_set(const std::string& key,
                                          const std::optional<std::vector<char>>& expected,
                                          const std::vector<char>& desired) {
  Bytes body;
  put_u8(body, static_cast<uint8_t>(Op::kCompareAndSet));
  put_bytes(body, full_key(key));
  put_u8(body, expected ? 1 : 0);
  put_bytes(body, expected ? *expected : Bytes{});
  put_bytes(body, desired);
  const Bytes reply = request(body, timeout_ms_, "comparing and setting key '" + key + "'");
  Reader in(reply);
  (void)in.u8();
  CasResult r;
  r.swapped = in.u8() != 0;
  const bool present = in.u8() != 0;
  Bytes value = in.bytes();
  if (present) r.value = std::move(value);
  return r;
}

void TcpStoreClient::wait(const std::vector<std::string>& keys, int64_t timeout_ms) {
  Bytes body;
  put_u8(body, static_cast<uint8_t>(Op::kWait));
  put_u32(body, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) put_bytes(body, full_key(k));
  put_i64(body, timeout_ms);
  const Bytes reply = request(body, timeout_ms < 0 ? -1 : timeout_ms + kReplySlackMs,
                              "waiting for keys " + join_keys(keys));
  if (static_cast<Reply>(reply[0]) == Reply::kTimeout) {
    Reader in(reply);
    (void)in.u8();
    std::vector<std::string> left = in.texts();
    const size_t skip = ns_.empty() ? 0 : ns_.size() + 1;
    for (auto& k : left) k.erase(0, std::min(skip, k.size()));
    throw Error(TESSERA_ERR_TIMEOUT,
                detail::concat("waiting for keys ", join_keys(left), " in the ", description(),
                               " timed out after ", timeout_ms, " ms"));
  }
}

bool TcpStoreClient::check(const std::vector<std::string>& keys) {
  Bytes body;
  put_u8(body, static_cast<uint8_t>(Op::kCheck));
  put_u32(body, static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) put_bytes(body, full_key(k));
  const Bytes reply = request(body, timeout_ms_, "checking keys " + join_keys(keys));
  Reader in(reply);
  (void)in.u8();
  return in.u8() != 0;
}

int64_t TcpStoreClient::prefix_request(uint8_t op, const std::string& prefix,
                                       const std::string& what) {
  Bytes body;
  put_u8(body, op);
  put_bytes(body, full_key(prefix));
  const Bytes reply = request(body, timeout_ms_, what + " under '" + prefix + "'");
  Reader in(reply);
  (void)in.u8();
  return in.i64();
}

int64_t TcpStoreClient::delete_prefix(const std::string& prefix) {
  return prefix_request(static_cast<uint8_t>(Op::kDeletePrefix), prefix, "deleting the keys");
}

int64_t TcpStoreClient::count(const std::string& prefix) {
  return prefix_request(static_cast<uint8_t>(Op::kCount), prefix, "counting the keys");
}

}  // namespace tessera::store
