// The tensor-parallel group of a unit call (see tensor_parallel.hpp).
#include "tessera/models/tensor_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "tessera/models/kernels.hpp"
#include "tessera/sdk/comm_view.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::model {

TpGroup::TpGroup(const tessera_tp_group* tp, const tessera_host_api* host, std::string_view unit)
    : host_(host), unit_(unit) {
  if (tp == nullptr || tp->size <= 1) return;
  TESSERA_CHECK(
      tp->rank >= 0 && tp->rank < tp->size && tp->backend != nullptr && tp->comm != nullptr,
      TESSERA_ERR_INVALID_ARGUMENT, "unit '", unit, "': tensor-parallel group of ", tp->size,
      " ranks has rank ", tp->rank,
      tp->backend == nullptr || tp->comm == nullptr ? " and no communicator" : "");
  backend_ = tp->backend;
  comm_ = tp->comm;
  rank_ = tp->rank;
  size_ = tp->size;
  // flags is the 2.0 struct's zero `reserved`: read it from any caller.
  sequence_ = (tp->flags & TESSERA_TP_SEQUENCE) != 0;
  on_device_ = sdk::buffers_on_device(sdk::Host(host), *backend_);
}

TpGroup TpGroup::for_backward(const tessera_tp_group* tp, const tessera_host_api* host,
                              std::string_view unit, int32_t forward_size, std::string_view call) {
  TpGroup group(tp, host, unit);
  TESSERA_CHECK(group.size() == forward_size, TESSERA_ERR_INVALID_ARGUMENT, "unit '", unit,
                "': ", call, " in a tensor-parallel group of ", group.size(),
                " ranks after a forward in one of ", forward_size);
  return group;
}

TpGroup TpGroup::for_check(int32_t size, uint32_t flags, std::string_view unit) {
  TpGroup group(nullptr, nullptr, unit);
  group.size_ = std::max(size, 1);
  group.sequence_ = group.size_ > 1 && (flags & TESSERA_TP_SEQUENCE) != 0;
  return group;
}

void TpGroup::allreduce_sum(float* data, int64_t count, std::string_view what) const {
  allreduce(data, count, TESSERA_SUM, what);
}

void TpGroup::allreduce_max(float* data, int64_t count, std::string_view what) const {
  allreduce(data, count, TESSERA_MAX, what);
}

void TpGroup::allreduce(float* data, int64_t count, tessera_reduce_op op,
                        std::string_view what) const {
  if (!active() || count == 0) return;
  tessera_coll_args args{};
  args.coll = TESSERA_COLL_ALLREDUCE;
  args.send = tessera_buffer{data, static_cast<uint64_t>(count), TESSERA_F32,
                             tessera_device{TESSERA_DEVICE_CPU, 0}};
  args.recv = args.send;
  args.op = op;
  run(args, "allreduce", count, what);
}

void TpGroup::allgather(const float* send, int64_t count, float* recv,
                        std::string_view what) const {
  spread(TESSERA_COLL_ALLGATHER, send, count, count * size_, recv, count, what);
}

void TpGroup::reduce_scatter_sum(const float* send, int64_t count, float* recv,
                                 std::string_view what) const {
  spread(TESSERA_COLL_REDUCE_SCATTER, send, count * size_, count, recv, count, what);
}

void TpGroup::spread(tessera_coll_type coll, const float* send, int64_t send_count,
                     int64_t recv_count, float* recv, int64_t count, std::string_view what) const {
  if (!active()) {
    std::copy(send, send + count, recv);
    return;
  }
  if (count == 0) return;
  tessera_coll_args args{};
  args.coll = coll;
  // The backend only reads send; the C buffer has no const pointer.
  args.send = tessera_buffer{const_cast<float*>(send), static_cast<uint64_t>(send_count),  // NOLINT
                             TESSERA_F32, tessera_device{TESSERA_DEVICE_CPU, 0}};
  args.recv = tessera_buffer{recv, static_cast<uint64_t>(recv_count), TESSERA_F32,
                             tessera_device{TESSERA_DEVICE_CPU, 0}};
  args.op = TESSERA_SUM;
  run(args, coll == TESSERA_COLL_ALLGATHER ? "allgather" : "reduce-scatter", count, what);
}

void TpGroup::gather_rows(const float* local, int64_t examples, int64_t rows, int64_t width,
                          float* full, std::string_view what) const {
  const int64_t slice = rows * width;  // one example's slice
  if (!active() || examples == 1) {
    allgather(local, examples * slice, full, what);
    return;
  }
  // The allgather puts rank k's [examples, rows, width] as block k; each
  // example's slices go side by side.
  std::vector<float> blocks(static_cast<std::size_t>(size_ * examples * slice));
  allgather(local, examples * slice, blocks.data(), what);
  for (int64_t k = 0; k < size_; ++k) {
    for (int64_t e = 0; e < examples; ++e) {
      const float* from = blocks.data() + (k * examples + e) * slice;
      std::copy(from, from + slice, full + (e * size_ + k) * slice);
    }
  }
}

void TpGroup::scatter_rows_sum(const float* full, int64_t examples, int64_t rows, int64_t width,
                               float* local, std::string_view what) const {
  const int64_t slice = rows * width;
  if (!active() || examples == 1) {
    reduce_scatter_sum(full, examples * slice, local, what);
    return;
  }
  // Block k of the reduce-scatter: every example's slice k.
  std::vector<float> blocks(static_cast<std::size_t>(size_ * examples * slice));
  for (int64_t k = 0; k < size_; ++k) {
    for (int64_t e = 0; e < examples; ++e) {
      const float* from = full + (e * size_ + k) * slice;
      std::copy(from, from + slice, blocks.data() + (k * examples + e) * slice);
    }
  }
  reduce_scatter_sum(blocks.data(), examples * slice, local, what);
}

void TpGroup::rows_to_whole(const float* local, int64_t examples, int64_t rows, int64_t width,
                            float* whole, std::string_view what) const {
  if (sequence_) {
    gather_rows(local, examples, rows, width, whole, what);
  } else if (local != whole) {
    std::copy(local, local + examples * rows * width, whole);
  }
}

void TpGroup::partial_to_rows(float* partial, int64_t examples, int64_t rows, int64_t width,
                              float* out, std::string_view what) const {
  if (sequence_) {
    scatter_rows_sum(partial, examples, rows, width, out, what);
    return;
  }
  const int64_t count = examples * rows * width;
  allreduce_sum(partial, count, what);  // a no-op without a group
  if (out != partial) std::copy(partial, partial + count, out);
}

int64_t TpGroup::local_positions(std::string_view key, int64_t positions) const {
  if (!sequence_) return positions;
  TESSERA_CHECK(positions % size_ == 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", unit_, "': ", key,
                " (", positions, ") is not divisible by the tensor-parallel group size ", size_,
                ", which sequence parallelism splits it by");
  return positions / size_;
}

void TpGroup::run(tessera_coll_args& args, const char* coll, int64_t count,
                  std::string_view what) const {
  args.struct_size = sizeof args;
  args.timeout_ms = 0;  // the communicator's own: a missing rank ends in an error, not a hang
  // The CUDA units' buffers (managed memory) go to nccl as CUDA buffers.
  if (on_device_) sdk::place_on_device(sdk::Host(host_), args);
  const tessera_status status = backend_->post(comm_, &args, nullptr);
  if (status == TESSERA_OK) return;
  const char* msg = nullptr;
  if (host_ != nullptr &&
      host_->struct_size >= offsetof(tessera_host_api, last_error) + sizeof(void*) &&
      host_->last_error != nullptr) {
    msg = host_->last_error(host_->ctx);
  }
  throw Error(status, detail::concat("unit '", unit_, "': tensor-parallel ", coll, " of ", what,
                                     " (", count, " floats, group of ", size_, " ranks) failed",
                                     msg != nullptr && *msg != '\0' ? ": " : "",
                                     msg != nullptr ? msg : ""));
}

void TpGroup::require_sequence(bool forward_sequence, std::string_view call) const {
  TESSERA_CHECK(sequence_ == forward_sequence, TESSERA_ERR_INVALID_ARGUMENT, "unit '", unit_,
                "': ", call, sequence_ ? " with" : " without",
                " sequence parallelism after a forward", forward_sequence ? " with" : " without",
                " it");
}

void TpGroup::require_divisible(std::string_view key, int64_t value) const {
  TESSERA_CHECK(value % size_ == 0, TESSERA_ERR_INVALID_ARGUMENT, "unit '", unit_, "': key '", key,
                "' (", value, ") is not divisible by the tensor-parallel group size ", size_);
}

void row_parallel_product(const TpGroup& tp, const float* x, const float* w, int64_t examples,
                          int64_t rows, int64_t in, int64_t out, float* y, std::string_view what) {
  const int64_t n = examples * rows * (tp.sequence() ? tp.size() : 1);  // x's rows
  std::vector<float> partial;
  float* z = y;
  if (tp.sequence()) {
    partial.resize(static_cast<std::size_t>(n * out));
    z = partial.data();
  }
  kernels::linear_forward(x, w, nullptr, n, in, out, z);
  tp.partial_to_rows(z, examples, rows, out, y, what);
}

double parallel_xent_forward(const TpGroup& tp, const float* logits, const int32_t* targets,
                             int64_t n, int64_t cols, int64_t lo, int64_t vocab, float* probs,
                             std::string_view where) {
  if (!tp.active()) return kernels::softmax_xent_forward(logits, targets, n, cols, probs, where);
  for (int64_t r = 0; r < n; ++r) {
    if (targets[r] < 0 || targets[r] >= vocab) {
      throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                  detail::concat(where, ": target ", targets[r], " of row ", r, " is outside [0, ",
                                 vocab, ")"));
    }
  }
  // Row maxima over the whole vocabulary.
  std::vector<float> mx(static_cast<std::size_t>(n));
  for (int64_t r = 0; r < n; ++r)
    mx[r] = *std::max_element(logits + r * cols, logits + (r + 1) * cols);
  tp.allreduce_max(mx.data(), n, "the logits' row maxima");
  // Sums of exponentials (first n) and target logits (next n; zero on the
  // ranks that do not hold the target's column).
  std::vector<float> sums(static_cast<std::size_t>(2 * n), 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    const float* lr = logits + r * cols;
    float* pr = probs + r * cols;
    const int64_t t = targets[r] - lo;
    if (t >= 0 && t < cols) sums[n + r] = lr[t];  // read first: probs may alias logits
    double sum = 0.0;
    for (int64_t j = 0; j < cols; ++j) {
      pr[j] = std::exp(lr[j] - mx[r]);
      sum += pr[j];
    }
    sums[r] = static_cast<float>(sum);
  }
  tp.allreduce_sum(sums.data(), 2 * n, "the softmax sums and target logits");
  double loss = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    const auto inv = static_cast<float>(1.0 / static_cast<double>(sums[r]));
    float* pr = probs + r * cols;
    for (int64_t j = 0; j < cols; ++j) pr[j] *= inv;
    loss += std::log(static_cast<double>(sums[r])) + mx[r] - sums[n + r];
  }
  return loss;
}

void parallel_xent_backward(const float* probs, const int32_t* targets, int64_t n, int64_t cols,
                            int64_t lo, float scale, float* dlogits) {
  for (int64_t r = 0; r < n; ++r) {
    const float* pr = probs + r * cols;
    float* dr = dlogits + r * cols;
    for (int64_t j = 0; j < cols; ++j) dr[j] = pr[j] * scale;
    const int64_t t = targets[r] - lo;
    if (t >= 0 && t < cols) dr[t] -= scale;
  }
}

}  // namespace tessera::model
