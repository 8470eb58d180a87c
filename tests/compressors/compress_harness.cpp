// Test harness of the compressor plugins (compress_harness.hpp).
#include "compress_harness.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include <gtest/gtest.h>
#include <toml++/toml.h>

#include "tessera/core/host_api.hpp"
#include "tessera/core/memory.hpp"
#include "tessera/sdk/comm_dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::test {

const PluginRegistry& compressor_registry() {
  static PluginRegistry* reg = [] {
    auto* r = new PluginRegistry();
    r->scan({TESSERA_COMPRESSORS_PLUGIN_DIR});
    return r;
  }();
  return *reg;
}

Compressors::Compressors(const std::string& name, const std::string& options_toml, int ranks) {
  const toml::table table = toml::parse(options_toml);
  plugin_ = std::make_unique<train::CompressorPlugin>(compressor_registry(), name, &table,
                                                      "test [compression.options]");
  for (int r = 0; r < ranks; ++r) instances_.push_back(plugin_->create());
}

sdk::CompressBucket make_bucket(uint64_t elements, int32_t world, int32_t rank, int32_t index,
                                std::vector<sdk::CompressTensor> tensors) {
  sdk::CompressBucket b;
  b.index = index;
  b.elements = elements;
  b.world_size = world;
  b.rank = rank;
  b.tensors = std::move(tensors);
  return b;
}

State::State(const Compressors& c, int rank, const sdk::CompressBucket& bucket) : api_(c.api()) {
  const tessera_compress_bucket raw = bucket.raw();
  throw_if_failed(api_->bucket_create(c.rank(rank), &raw, &s_), "bucket_create");
}
State::State(State&& o) noexcept : api_(o.api_), s_(std::exchange(o.s_, nullptr)) {}
State::~State() {
  if (s_ != nullptr) api_->bucket_destroy(s_);
}
uint64_t State::encoded_bytes() const { return api_->encoded_bytes(s_); }
std::vector<unsigned char> State::encode(std::span<const float> grads) {
  std::vector<unsigned char> out(encoded_bytes());
  throw_if_failed(api_->encode(s_, grads.data(), out.data()), "encode");
  return out;
}
std::vector<float> State::decode(std::span<const unsigned char> in, int32_t encodings,
                                 uint64_t offset, uint64_t count) {
  std::vector<float> out(count, -12345.0F);  // decode overwrites
  throw_if_failed(api_->decode(s_, in.data(), encodings, offset, count, out.data()), "decode");
  return out;
}
void State::reduce(std::span<float> grads, const tessera_compress_comm& comm) {
  throw_if_failed(api_->reduce(s_, grads.data(), &comm), "reduce");
}

std::vector<State> make_states(const Compressors& c, uint64_t elements, int32_t index,
                               const std::vector<sdk::CompressTensor>& tensors) {
  std::vector<State> states;
  states.reserve(static_cast<size_t>(c.ranks()));
  for (int r = 0; r < c.ranks(); ++r) {
    states.emplace_back(c, r, make_bucket(elements, c.ranks(), r, index, tensors));
  }
  return states;
}

std::vector<float> summable_round(std::vector<State>& states,
                                  const std::vector<std::vector<float>>& grads,
                                  tessera_dtype wire) {
  const size_t n = grads.at(0).size();
  std::vector<float> sum(n, 0.0F);
  std::vector<float> values(n);
  for (size_t r = 0; r < states.size(); ++r) {
    const std::vector<unsigned char> enc = states[r].encode(grads.at(r));
    EXPECT_EQ(enc.size(), n * 2);
    sdk::unpack_16bit(enc.data(), wire, values);
    for (size_t i = 0; i < n; ++i) sum[i] += values[i];
  }
  std::vector<unsigned char> summed(n * 2);
  sdk::pack_16bit(sum, wire, summed.data());
  return states.at(0).decode(summed, 1, 0, n);
}

std::vector<float> gather_round(std::vector<State>& states,
                                const std::vector<std::vector<float>>& grads,
                                std::vector<unsigned char>* encodings) {
  std::vector<unsigned char> all;
  const uint64_t bytes = states.at(0).encoded_bytes();
  for (size_t r = 0; r < states.size(); ++r) {
    EXPECT_EQ(states[r].encoded_bytes(), bytes) << "rank " << r;
    const std::vector<unsigned char> enc = states[r].encode(grads.at(r));
    all.insert(all.end(), enc.begin(), enc.end());
  }
  const auto world = static_cast<int32_t>(states.size());
  const size_t n = grads.at(0).size();
  std::vector<float> result = states.at(0).decode(all, world, 0, n);
  for (size_t r = 1; r < states.size(); ++r) {
    EXPECT_EQ(states[r].decode(all, world, 0, n), result) << "rank " << r << " decodes otherwise";
  }
  if (encodings != nullptr) *encodings = std::move(all);
  return result;
}

namespace {

// The ranks' meeting point: a generation barrier that gives up after a
// timeout (and then fails every later wait).
class Meeting {
 public:
  explicit Meeting(int world) : ranks(world), slots(static_cast<size_t>(world)) {}

  bool arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    if (broken_) return false;
    const uint64_t generation = generation_;
    if (++arrived_ == ranks) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return true;
    }
    if (!cv_.wait_for(lock, std::chrono::seconds(20),
                      [&] { return generation_ != generation || broken_; }) ||
        broken_) {
      broken_ = true;
      cv_.notify_all();
      return false;
    }
    return true;
  }
  void breaks() {
    const std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

  int ranks;
  std::vector<const void*> slots;
  CommLog log;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
};

struct RankComm {
  Meeting* meeting;
  int rank;
};

tessera_status meeting_allreduce(void* ctx, void* data, uint64_t count, tessera_dtype dtype) {
  auto* c = static_cast<RankComm*>(ctx);
  Meeting& m = *c->meeting;
  if (dtype != TESSERA_F32) {
    set_thread_error(TESSERA_ERR_UNSUPPORTED, "test allreduce: f32 only");
    return TESSERA_ERR_UNSUPPORTED;
  }
  if (c->rank == 0) m.log.allreduce_counts.push_back(count);
  m.slots[static_cast<size_t>(c->rank)] = data;
  std::vector<float> sum(count, 0.0F);
  if (!m.arrive()) return TESSERA_ERR_INTERNAL;
  for (int r = 0; r < m.ranks; ++r) {
    const auto* in = static_cast<const float*>(m.slots[static_cast<size_t>(r)]);
    for (uint64_t i = 0; i < count; ++i) sum[i] += in[i];
  }
  if (!m.arrive()) return TESSERA_ERR_INTERNAL;  // everyone has read
  std::memcpy(data, sum.data(), count * sizeof(float));
  return TESSERA_OK;
}

tessera_status meeting_allgather(void* ctx, const void* send, void* recv, uint64_t bytes) {
  auto* c = static_cast<RankComm*>(ctx);
  Meeting& m = *c->meeting;
  if (c->rank == 0) ++m.log.allgathers;
  m.slots[static_cast<size_t>(c->rank)] = send;
  if (!m.arrive()) return TESSERA_ERR_INTERNAL;
  for (int r = 0; r < m.ranks; ++r) {
    std::memcpy(static_cast<unsigned char*>(recv) + static_cast<uint64_t>(r) * bytes,
                m.slots[static_cast<size_t>(r)], bytes);
  }
  if (!m.arrive()) return TESSERA_ERR_INTERNAL;
  return TESSERA_OK;
}

}  // namespace

CommLog collective_round(std::vector<State>& states, std::vector<std::vector<float>>& grads) {
  const int ranks = static_cast<int>(states.size());
  Meeting meeting(ranks);
  std::vector<RankComm> ctx;
  ctx.reserve(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) ctx.push_back(RankComm{&meeting, r});
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      tessera_compress_comm comm{};
      comm.struct_size = sizeof comm;
      comm.rank = r;
      comm.size = ranks;
      comm.ctx = &ctx[static_cast<size_t>(r)];
      comm.allreduce = &meeting_allreduce;
      comm.allgather = &meeting_allgather;
      try {
        states[static_cast<size_t>(r)].reduce(grads.at(static_cast<size_t>(r)), comm);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        meeting.breaks();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return meeting.log;
}

int64_t comm_bytes_tracked() {
  return MemoryTracker::instance().stats(TESSERA_RANK_UNKNOWN).current[TESSERA_MEM_COMM];
}

}  // namespace tessera::test
