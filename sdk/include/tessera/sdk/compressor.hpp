// Gradient compressors in C++ (compressor interface 1.0, c/compressor.h).
//
// Plugin side: a compressor is a class C with
//   C(const Host& host, const Options& options)
//   CompressKind kind() const
//   tessera_dtype wire_dtype() const      // SUMMABLE: the encoded dtype; else TESSERA_U8
//   std::unique_ptr<CompressorBucket> bucket(const CompressBucket& bucket)
// registered with TESSERA_REGISTER_COMPRESSOR. Its buckets implement
// CompressorBucket: encode/decode for SUMMABLE and GATHER, reduce for
// COLLECTIVE.
//
// Strategy side: CompressorView wraps the compressor the host put in the
// strategy's environment and gives its buckets the same CompressorBucket
// interface, so a reducer (grad_codec.hpp) drives an installed plugin and
// the SDK's own casts (cast_codec.hpp) alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/c/compressor.h"
#include "tessera/sdk/error.hpp"
#include "tessera/sdk/host.hpp"
#include "tessera/sdk/plugin.hpp"

namespace tessera::sdk {

// How encodings reduce; see c/compressor.h.
enum class CompressKind : int32_t {
  kSummable = TESSERA_COMPRESS_SUMMABLE,
  kGather = TESSERA_COMPRESS_GATHER,
  kCollective = TESSERA_COMPRESS_COLLECTIVE,
};

// "summable", "gather" or "collective".
inline const char* compress_kind_name(CompressKind kind) noexcept {
  switch (kind) {
    case CompressKind::kSummable:
      return "summable";
    case CompressKind::kGather:
      return "gather";
    case CompressKind::kCollective:
      return "collective";
  }
  return "unknown";
}

// One tensor of a bucket (tessera_compress_tensor).
struct CompressTensor {
  uint64_t offset = 0;
  int64_t rows = 1;
  int64_t cols = 1;
  [[nodiscard]] uint64_t elements() const noexcept {
    return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  }
};

// A bucket (tessera_compress_bucket).
struct CompressBucket {
  int32_t index = 0;
  uint64_t elements = 0;
  int32_t world_size = 1;
  int32_t rank = 0;
  std::vector<CompressTensor> tensors;  // empty: one flat vector

  [[nodiscard]] tessera_compress_bucket raw() const noexcept {
    tessera_compress_bucket b{};
    b.struct_size = sizeof b;
    b.index = index;
    b.elements = elements;
    b.num_tensors = static_cast<int32_t>(tensors.size());
    b.world_size = world_size;
    b.rank = rank;
    b.tensors = reinterpret_cast<const tessera_compress_tensor*>(tensors.data());
    return b;
  }
  static CompressBucket from(const tessera_compress_bucket& raw) {
    CompressBucket b;
    b.index = raw.index;
    b.elements = raw.elements;
    b.world_size = raw.world_size;
    b.rank = raw.rank;
    if (raw.tensors != nullptr && raw.num_tensors > 0) {
      for (int32_t i = 0; i < raw.num_tensors; ++i) {
        const tessera_compress_tensor& t = raw.tensors[i];
        b.tensors.push_back(CompressTensor{t.offset, t.rows, t.cols});
      }
    }
    return b;
  }
};
static_assert(sizeof(CompressTensor) == sizeof(tessera_compress_tensor));
static_assert(offsetof(CompressTensor, rows) == offsetof(tessera_compress_tensor, rows));
static_assert(offsetof(CompressTensor, cols) == offsetof(tessera_compress_tensor, cols));

// The communicator of a COLLECTIVE compressor's reduce (blocking, over the
// bucket's ranks). Throws tessera::Error with the strategy's message when
// an operation fails.
class CompressComm {
 public:
  CompressComm(const Host& host, const tessera_compress_comm& comm) : host_(host), comm_(comm) {}

  [[nodiscard]] int32_t rank() const noexcept { return comm_.rank; }
  [[nodiscard]] int32_t size() const noexcept { return comm_.size; }
  // Sums `data` over the ranks, in place.
  void allreduce(std::span<float> data) const { allreduce(data.data(), data.size(), TESSERA_F32); }
  void allreduce(void* data, uint64_t count, tessera_dtype dtype) const {
    check(comm_.allreduce(comm_.ctx, data, count, dtype), "allreduce");
  }
  // Every rank's `bytes` bytes at `send` into `recv` (size() * bytes), in
  // rank order.
  void allgather(const void* send, void* recv, uint64_t bytes) const {
    check(comm_.allgather(comm_.ctx, send, recv, bytes), "allgather");
  }
  [[nodiscard]] const tessera_compress_comm& raw() const noexcept { return comm_; }

 private:
  void check(tessera_status s, const char* op) const { detail::check_host_call(host_, s, op); }
  Host host_;
  const tessera_compress_comm& comm_;
};

// One bucket's state and its encode/decode (or reduce). The defaults refuse
// (an internal error: the kind decides which calls come).
class CompressorBucket {
 public:
  CompressorBucket() = default;
  CompressorBucket(const CompressorBucket&) = delete;
  CompressorBucket& operator=(const CompressorBucket&) = delete;
  virtual ~CompressorBucket() = default;

  // See tessera_compressor_api.encoded_bytes.
  [[nodiscard]] virtual uint64_t encoded_bytes() const = 0;
  // See tessera_compressor_api.encode: `grads` has the bucket's elements.
  virtual void encode(std::span<const float> grads, void* out) {
    (void)grads;
    (void)out;
    throw Error(TESSERA_ERR_INTERNAL, "compressor: encode on a collective compressor");
  }
  // See tessera_compressor_api.decode: elements [offset, offset +
  // out.size()) of the decoded sum (SUMMABLE: `in` holds that range's
  // summed encoded elements; GATHER: `encodings` whole encodings).
  virtual void decode(const void* in, int32_t encodings, uint64_t offset, std::span<float> out) {
    (void)in;
    (void)encodings;
    (void)offset;
    (void)out;
    throw Error(TESSERA_ERR_INTERNAL, "compressor: decode on a collective compressor");
  }
  // See tessera_compressor_api.reduce.
  virtual void reduce(std::span<float> grads, const CompressComm& comm) {
    (void)grads;
    (void)comm;
    throw Error(TESSERA_ERR_INTERNAL, "compressor: reduce on a compressor that encodes");
  }
};

// The strategy side: the compressor of the strategy's environment, or none.
// Copyable view; the host owns the compressor.
class CompressorView {
 public:
  CompressorView() = default;
  // `name` is the compressor plugin's name (for messages).
  CompressorView(const Host& host, const tessera_compressor_api* api, tessera_compressor* c,
                 std::string name)
      : host_(host), api_(api), c_(c), name_(std::move(name)) {}

  // Whether there is a compressor.
  [[nodiscard]] explicit operator bool() const noexcept { return api_ != nullptr && c_ != nullptr; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] CompressKind kind() const noexcept {
    return static_cast<CompressKind>(api_->kind(c_));
  }
  [[nodiscard]] tessera_dtype wire_dtype() const noexcept { return api_->wire_dtype(c_); }
  // A state for `bucket`, calling through the compressor's table.
  [[nodiscard]] std::unique_ptr<CompressorBucket> bucket(const CompressBucket& bucket) const;

 private:
  class PluginBucket;
  Host host_{nullptr};
  const tessera_compressor_api* api_ = nullptr;
  tessera_compressor* c_ = nullptr;
  std::string name_;
};

class CompressorView::PluginBucket final : public CompressorBucket {
 public:
  PluginBucket(const Host& host, const tessera_compressor_api* api, tessera_compress_state* s,
               const std::string& name)
      : host_(host), api_(api), s_(s), name_(name) {}
  PluginBucket(const PluginBucket&) = delete;
  PluginBucket& operator=(const PluginBucket&) = delete;
  ~PluginBucket() override { api_->bucket_destroy(s_); }

  [[nodiscard]] uint64_t encoded_bytes() const override { return api_->encoded_bytes(s_); }
  void encode(std::span<const float> grads, void* out) override {
    check(api_->encode(s_, grads.data(), out), "encode");
  }
  void decode(const void* in, int32_t encodings, uint64_t offset, std::span<float> out) override {
    check(api_->decode(s_, in, encodings, offset, out.size(), out.data()), "decode");
  }
  void reduce(std::span<float> grads, const CompressComm& comm) override {
    check(api_->reduce(s_, grads.data(), &comm.raw()), "reduce");
  }

 private:
  void check(tessera_status s, const char* op) const {
    if (s == TESSERA_OK) return;
    detail::check_host_call(host_, s,
                            ::tessera::detail::concat("compressor '", name_, "' ", op).c_str());
  }
  Host host_;
  const tessera_compressor_api* api_;
  tessera_compress_state* s_;
  std::string name_;
};

inline std::unique_ptr<CompressorBucket> CompressorView::bucket(
    const CompressBucket& bucket) const {
  const tessera_compress_bucket raw = bucket.raw();
  tessera_compress_state* s = nullptr;
  const tessera_status status = api_->bucket_create(c_, &raw, &s);
  if (status != TESSERA_OK) {
    detail::check_host_call(
        host_, status,
        ::tessera::detail::concat("compressor '", name_, "' bucket ", bucket.index, " of ",
                                  bucket.elements, " elements")
            .c_str());
  }
  return std::make_unique<PluginBucket>(host_, api_, s, name_);
}

namespace detail {

template <typename C>
struct CompressorAdapter {
  struct Handle {
    const tessera_host_api* host;
    std::unique_ptr<C> impl;
  };
  struct State {
    const tessera_host_api* host;
    uint64_t elements;  // of the bucket
    std::unique_ptr<CompressorBucket> impl;
  };
  static Handle* as_handle(tessera_compressor* c) { return reinterpret_cast<Handle*>(c); }
  static const Handle* as_handle(const tessera_compressor* c) {
    return reinterpret_cast<const Handle*>(c);
  }
  static State* as_state(tessera_compress_state* s) { return reinterpret_cast<State*>(s); }
  static const State* as_state(const tessera_compress_state* s) {
    return reinterpret_cast<const State*>(s);
  }

  // Option errors are answers to the user's configuration: no source
  // location in their message.
  static tessera_status create(const tessera_host_api* host, const tessera_options* opts,
                               tessera_compressor** out) noexcept {
    return guard(
        host,
        [&] {
          TESSERA_CHECK(out != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "create: null argument");
          auto handle = std::make_unique<Handle>();
          handle->host = host;
          handle->impl = std::make_unique<C>(Host(host), Options(host, opts));
          *out = reinterpret_cast<tessera_compressor*>(handle.release());
        },
        ErrorText::kForUser);
  }
  static void destroy(tessera_compressor* c) noexcept { delete as_handle(c); }
  static tessera_compress_kind kind(const tessera_compressor* c) noexcept {
    return static_cast<tessera_compress_kind>(as_handle(c)->impl->kind());
  }
  static tessera_dtype wire_dtype(const tessera_compressor* c) noexcept {
    return as_handle(c)->impl->wire_dtype();
  }
  static tessera_status bucket_create(tessera_compressor* c, const tessera_compress_bucket* bucket,
                                      tessera_compress_state** out) noexcept {
    Handle* h = as_handle(c);
    return guard(
        h->host,
        [&] {
          TESSERA_CHECK(bucket != nullptr && out != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                        "bucket_create: null argument");
          const auto raw = copy_versioned(bucket);
          auto state = std::make_unique<State>();
          state->host = h->host;
          state->elements = raw.elements;
          state->impl = h->impl->bucket(CompressBucket::from(raw));
          TESSERA_CHECK(state->impl != nullptr, TESSERA_ERR_INTERNAL, "bucket_create: no state");
          *out = reinterpret_cast<tessera_compress_state*>(state.release());
        },
        ErrorText::kForUser);
  }
  static void bucket_destroy(tessera_compress_state* s) noexcept { delete as_state(s); }
  static uint64_t encoded_bytes(const tessera_compress_state* s) noexcept {
    return as_state(s)->impl->encoded_bytes();
  }
  static tessera_status encode(tessera_compress_state* s, const float* grads, void* out) noexcept {
    State* st = as_state(s);
    return guard(st->host,
                 [&] { st->impl->encode(std::span<const float>(grads, st->elements), out); });
  }
  static tessera_status decode(tessera_compress_state* s, const void* in, int32_t encodings,
                               uint64_t offset, uint64_t count, float* out) noexcept {
    State* st = as_state(s);
    return guard(st->host,
                 [&] { st->impl->decode(in, encodings, offset, std::span<float>(out, count)); });
  }
  static tessera_status reduce(tessera_compress_state* s, float* grads,
                               const tessera_compress_comm* comm) noexcept {
    State* st = as_state(s);
    return guard(st->host, [&] {
      TESSERA_CHECK(comm != nullptr, TESSERA_ERR_INVALID_ARGUMENT, "reduce: null communicator");
      const CompressComm cc(Host(st->host), *comm);
      st->impl->reduce(std::span<float>(grads, st->elements), cc);
    });
  }
  static constexpr tessera_compressor_api table() noexcept {
    return tessera_compressor_api{sizeof(tessera_compressor_api),
                                  0,
                                  &create,
                                  &destroy,
                                  &kind,
                                  &wire_dtype,
                                  &bucket_create,
                                  &bucket_destroy,
                                  &encoded_bytes,
                                  &encode,
                                  &decode,
                                  &reduce};
  }
};

}  // namespace detail
}  // namespace tessera::sdk

// Defines the exported entry point of a compressor plugin. `options` is a
// static tessera_option_decl array or TESSERA_NO_OPTIONS.
#define TESSERA_REGISTER_COMPRESSOR(cls, name_str, version_str, summary_str, options)      \
  namespace {                                                                              \
  constexpr tessera_compressor_api tessera_detail_compressor_api =                         \
      ::tessera::sdk::detail::CompressorAdapter<cls>::table();                             \
  const tessera_plugin_descriptor tessera_detail_descriptor = TESSERA_DETAIL_DESCRIPTOR(   \
      TESSERA_KIND_COMPRESSOR, TESSERA_COMPRESSOR_API_MAJOR, TESSERA_COMPRESSOR_API_MINOR, \
      name_str, version_str, summary_str, options, &tessera_detail_compressor_api);        \
  }                                                                                        \
  TESSERA_DETAIL_DEFINE_ENTRY(tessera_detail_descriptor)
