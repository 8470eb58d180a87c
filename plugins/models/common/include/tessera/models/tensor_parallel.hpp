// What the in-tree units need for Megatron-style tensor parallelism: the
// group a call runs in, with the collectives the units call from inside
// forward and backward, and the size checks of a split.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/c/host.h"
#include "tessera/c/model.h"

namespace tessera::model {

// The tensor-parallel group of one unit call. Built from the call's
// tessera_tp_group: null or a group of one rank is inactive (whole
// parameters, no communication).
class TpGroup {
 public:
  TpGroup() = default;
  // `unit` names the caller in error messages; `host` (may be null) gives
  // a failed collective's own message.
  TpGroup(const tessera_tp_group* tp, const tessera_host_api* host, std::string_view unit);

  // The group of a backward call (`call`: "backward", "backward_input" or
  // "backward_weight") of a unit whose forward ran in a group of
  // `forward_size` ranks. Throws tessera::Error (invalid argument) "unit
  // '<unit>': <call> in a tensor-parallel group of N ranks after a forward
  // in one of M" when the sizes differ.
  static TpGroup for_backward(const tessera_tp_group* tp, const tessera_host_api* host,
                              std::string_view unit, int32_t forward_size, std::string_view call);

  // A group of `size` ranks with `flags` (TESSERA_TP_*) and no
  // communicator, for the checks before training (require_divisible,
  // local_positions); its collectives must not be called.
  static TpGroup for_check(int32_t size, uint32_t flags, std::string_view unit);

  [[nodiscard]] bool active() const noexcept { return size_ > 1; }
  [[nodiscard]] int32_t rank() const noexcept { return rank_; }
  [[nodiscard]] int32_t size() const noexcept { return size_; }
  // Sequence parallelism (TESSERA_TP_SEQUENCE): the token rows outside the
  // column/row pairs are split over the group. False when inactive.
  [[nodiscard]] bool sequence() const noexcept { return sequence_; }
  // Whether the group's backend takes the buffers of this rank's CUDA
  // device where they are (device memory included): a CUDA run over a
  // backend with TESSERA_BACKEND_CAP_CUDA_BUFFERS (nccl).
  [[nodiscard]] bool on_device() const noexcept { return on_device_; }

  // In-place allreduce of `count` floats over the group (sum or max); a
  // no-op when inactive. Throws tessera::Error with the collective's status
  // naming the unit, `what` and the group size when it fails.
  void allreduce_sum(float* data, int64_t count, std::string_view what) const;
  void allreduce_max(float* data, int64_t count, std::string_view what) const;
  // Allgather of `count` floats from every rank into `recv` (size() ·
  // count floats, block k from rank k); inactive, a copy of `send` into
  // `recv`. Fails like the allreduces.
  void allgather(const float* send, int64_t count, float* recv, std::string_view what) const;
  // Reduce-scatter (sum) of size() · `count` floats in `send` (block k for
  // rank k): `recv` gets this rank's block summed over the group. Inactive,
  // a copy. Fails like the allreduces.
  void reduce_scatter_sum(const float* send, int64_t count, float* recv,
                          std::string_view what) const;

  // The token rows of sequence parallelism (TESSERA_TP_SEQUENCE): a matrix
  // of `examples` groups of rows, each group split into size() equal
  // slices along its rows (positions of a sequence; a feature batch is one
  // group of its examples), rows `width` floats wide.
  //
  // gather_rows: from every rank's slice `local` [examples · rows, width]
  // (rows per example on this rank) into the whole `full` [examples ·
  // size() · rows, width], rank k's slice at positions [k · rows, (k+1) ·
  // rows) of each example. One allgather; inactive, a copy.
  void gather_rows(const float* local, int64_t examples, int64_t rows, int64_t width, float* full,
                   std::string_view what) const;
  // scatter_rows_sum: the reverse: `full` [examples · size() · rows, width]
  // holds this rank's partial sums of every row; `local` [examples · rows,
  // width] gets this rank's slice summed over the group. One
  // reduce-scatter; inactive, a copy.
  void scatter_rows_sum(const float* full, int64_t examples, int64_t rows, int64_t width,
                        float* local, std::string_view what) const;
  // The two conjugate steps around a column/row pair (Megatron's f and g,
  // in their sequence-parallel form), for `examples` × `rows` of this
  // rank's rows (rows: positions per example it holds; all of them without
  // sequence parallelism), `width` floats each:
  //  * rows_to_whole: what a column-parallel product reads: under sequence
  //    parallelism gather_rows of `local` into `whole`; otherwise the rows
  //    are already whole (copied unless local == whole).
  //  * partial_to_rows: a row-parallel product's partial sums `partial`
  //    (all rows) become this rank's rows of their sum: scatter_rows_sum
  //    under sequence parallelism, an in-place allreduce of `partial` in
  //    tensor mode (then copied unless out == partial), a copy without a
  //    group.
  void rows_to_whole(const float* local, int64_t examples, int64_t rows, int64_t width,
                     float* whole, std::string_view what) const;
  void partial_to_rows(float* partial, int64_t examples, int64_t rows, int64_t width, float* out,
                       std::string_view what) const;
  // The first position of this rank's rows in each example of `positions`
  // rows: rank · positions under sequence parallelism, else 0.
  [[nodiscard]] int64_t first_position(int64_t rows) const noexcept {
    return sequence_ ? rows * rank_ : 0;
  }

  // This rank's rows of a sequence of `positions` under sequence
  // parallelism: positions / size() (throws like require_divisible naming
  // `key` unless size() divides it); without it, all of them.
  [[nodiscard]] int64_t local_positions(std::string_view key, int64_t positions) const;

  // Throws tessera::Error (invalid argument) "unit '<unit>': <call>
  // with|without sequence parallelism after a forward with|without it"
  // unless sequence() is `forward_sequence`: a backward must split the rows
  // as its forward did.
  void require_sequence(bool forward_sequence, std::string_view call) const;

  // Throws tessera::Error (invalid argument) "unit '<unit>': key '<key>'
  // (<value>) is not divisible by the tensor-parallel group size <size>"
  // unless it is.
  void require_divisible(std::string_view key, int64_t value) const;

 private:
  void allreduce(float* data, int64_t count, tessera_reduce_op op, std::string_view what) const;
  void run(tessera_coll_args& args, const char* coll, int64_t count, std::string_view what) const;
  // An allgather or reduce-scatter of send_count floats into recv_count
  // (`count`: this rank's block); a copy of `count` floats when inactive.
  void spread(tessera_coll_type coll, const float* send, int64_t send_count, int64_t recv_count,
              float* recv, int64_t count, std::string_view what) const;

  const tessera_backend_api* backend_ = nullptr;
  tessera_comm* comm_ = nullptr;
  const tessera_host_api* host_ = nullptr;
  std::string_view unit_;
  int32_t rank_ = 0;
  int32_t size_ = 1;
  bool sequence_ = false;
  // A CUDA run over a backend that takes CUDA buffers: buffers the device
  // reads in place go as CUDA buffers (sdk::place_on_device).
  bool on_device_ = false;
};

// A normalisation whose output feeds column-parallel products:
// norm(out) writes the normalised rows this rank holds (`examples` ×
// `rows` of them, `width` wide) to out; under sequence parallelism into a
// local buffer then gathered whole into `whole` (TpGroup::gather_rows),
// otherwise straight into `whole`.
template <typename Norm>
void norm_rows_to_whole(const TpGroup& tp, int64_t examples, int64_t rows, int64_t width,
                        float* whole, std::string_view what, Norm&& norm) {
  if (!tp.sequence()) {
    norm(whole);
    return;
  }
  std::vector<float> local(static_cast<std::size_t>(examples * rows * width));
  norm(local.data());
  tp.gather_rows(local.data(), examples, rows, width, whole, what);
}

// y = x·w for a row-parallel w (this rank's `in` rows of it) over x's
// whole rows: without a group the plain product; with one, this rank's
// partial product summed over the group (Megatron's g): allreduced in
// place, or under sequence parallelism computed into a transient buffer
// and reduce-scattered to this rank's `examples` × `rows` rows of y. No
// bias.
void row_parallel_product(const TpGroup& tp, const float* x, const float* w, int64_t examples,
                          int64_t rows, int64_t in, int64_t out, float* y, std::string_view what);

// Softmax cross-entropy over logits split by vocabulary (the columns of a
// vocabulary-parallel head): `logits` [n, cols] are this rank's columns
// [lo, lo + cols) of the whole [n, vocab] logits. The row maxima are
// combined with one allreduce (max), the sums of exponentials and the
// target logits with one more (sum of 2n floats); no rank holds whole
// logits. Writes this rank's probabilities (may alias logits) and returns
// Σ_rows (logsumexp − logit[target]), the same on every rank. Without a
// group: kernels::softmax_xent_forward. Throws like it, naming `where` and
// the row, for a target outside [0, vocab).
double parallel_xent_forward(const TpGroup& tp, const float* logits, const int32_t* targets,
                             int64_t n, int64_t cols, int64_t lo, int64_t vocab, float* probs,
                             std::string_view where);

// dlogits = (probs − onehot(target)) · scale on this rank's columns
// [lo, lo + cols) (overwritten).
void parallel_xent_backward(const float* probs, const int32_t* targets, int64_t n, int64_t cols,
                            int64_t lo, float scale, float* dlogits);

}  // namespace tessera::model
