#include "bench_ops.hpp"

#include <array>

namespace tessera::cli {

namespace {

constexpr std::array kOps{TESSERA_COLL_ALLREDUCE,      TESSERA_COLL_ALLGATHER,
                          TESSERA_COLL_REDUCE_SCATTER, TESSERA_COLL_BROADCAST,
                          TESSERA_COLL_REDUCE,         TESSERA_COLL_ALLTOALL,
                          TESSERA_COLL_GATHER,         TESSERA_COLL_SCATTER};

template <typename T, size_t N, typename NameFn>
std::string names_of(const std::array<T, N>& items, NameFn name) {
  std::string out;
  for (const T& item : items) {
    if (!out.empty()) out += ", ";
    out += name(item);
  }
  return out;
}

template <typename T, size_t N, typename NameFn>
std::optional<T> find_by_name(const std::array<T, N>& items, NameFn name, std::string_view text) {
  for (const T& item : items) {
    if (name(item) == text) return item;
  }
  return std::nullopt;
}

constexpr std::array kDtypes{TESSERA_F32, TESSERA_F64, TESSERA_F16, TESSERA_BF16,
                             TESSERA_I32, TESSERA_I64, TESSERA_U8};
constexpr std::array kRedops{TESSERA_SUM, TESSERA_AVG, TESSERA_MIN, TESSERA_MAX, TESSERA_PROD};

auto op_name = [](tessera_coll_type op) { return coll_name(op); };
auto type_name = [](tessera_dtype d) { return dtype_name(d); };
auto redop_name = [](tessera_reduce_op r) { return reduce_op_name(r); };

}  // namespace

std::string bench_op_list() { return names_of(kOps, op_name); }
std::string dtype_list() { return names_of(kDtypes, type_name); }
std::string redop_list() { return names_of(kRedops, redop_name); }

std::optional<tessera_coll_type> parse_bench_op(std::string_view name) {
  return find_by_name(kOps, op_name, name);
}
std::optional<tessera_dtype> parse_dtype(std::string_view name) {
  return find_by_name(kDtypes, type_name, name);
}
std::optional<tessera_reduce_op> parse_redop(std::string_view name) {
  return find_by_name(kRedops, redop_name, name);
}

bool op_reduces(tessera_coll_type op) noexcept {
  return op == TESSERA_COLL_ALLREDUCE || op == TESSERA_COLL_REDUCE ||
         op == TESSERA_COLL_REDUCE_SCATTER;
}

bool op_splits_by_rank(tessera_coll_type op) noexcept {
  switch (op) {
    case TESSERA_COLL_ALLGATHER:
    case TESSERA_COLL_REDUCE_SCATTER:
    case TESSERA_COLL_ALLTOALL:
    case TESSERA_COLL_GATHER:
    case TESSERA_COLL_SCATTER:
      return true;
    default:
      return false;
  }
}

double busbw_factor(tessera_coll_type op, int ranks) noexcept {
  const double n = ranks;
  switch (op) {
    case TESSERA_COLL_ALLREDUCE:
      return 2.0 * (n - 1.0) / n;
    case TESSERA_COLL_BROADCAST:
    case TESSERA_COLL_REDUCE:
      return 1.0;
    default:
      return (n - 1.0) / n;
  }
}

OpLayout op_layout(tessera_coll_type op, uint64_t bytes, tessera_dtype dtype, int ranks) noexcept {
  const uint64_t count = bytes / tessera_dtype_size(dtype);
  const auto p = static_cast<uint64_t>(ranks);
  OpLayout l;
  switch (op) {
    case TESSERA_COLL_BROADCAST:
      l.send_count = count;
      l.block = count;
      l.in_place = true;
      break;
    case TESSERA_COLL_ALLGATHER:
    case TESSERA_COLL_GATHER:
      l.block = count / p;
      l.send_count = l.block;
      l.recv_count = l.block * p;
      break;
    case TESSERA_COLL_REDUCE_SCATTER:
    case TESSERA_COLL_SCATTER:
      l.block = count / p;
      l.send_count = l.block * p;
      l.recv_count = l.block;
      break;
    case TESSERA_COLL_ALLTOALL:
      l.block = count / p;
      l.send_count = l.block * p;
      l.recv_count = l.block * p;
      break;
    default:  // allreduce, reduce
      l.send_count = count;
      l.recv_count = count;
      l.block = count;
      break;
  }
  return l;
}

void run_op(Communicator& comm, tessera_coll_type op, const tessera_buffer& send,
            const tessera_buffer& recv, tessera_reduce_op redop) {
  switch (op) {
    case TESSERA_COLL_ALLREDUCE:
      comm.allreduce(send, recv, redop);
      break;
    case TESSERA_COLL_BROADCAST:
      comm.broadcast(send, 0);
      break;
    case TESSERA_COLL_REDUCE:
      comm.reduce(send, recv, redop, 0);
      break;
    case TESSERA_COLL_ALLGATHER:
      comm.allgather(send, recv);
      break;
    case TESSERA_COLL_REDUCE_SCATTER:
      comm.reduce_scatter(send, recv, redop);
      break;
    case TESSERA_COLL_GATHER:
      comm.gather(send, recv, 0);
      break;
    case TESSERA_COLL_SCATTER:
      comm.scatter(send, recv, 0);
      break;
    case TESSERA_COLL_ALLTOALL:
      comm.alltoall(send, recv);
      break;
    default:
      comm.run(op_args(op, send, recv, redop));
      break;
  }
}

tessera_coll_args op_args(tessera_coll_type op, const tessera_buffer& send,
                          const tessera_buffer& recv, tessera_reduce_op redop) noexcept {
  tessera_coll_args args{};
  args.coll = op;
  args.send = send;
  args.recv = op == TESSERA_COLL_BROADCAST ? send : recv;
  args.op = redop;
  args.root = 0;
  return args;
}

void run_raw_op(Communicator& comm, tessera_coll_type op, const tessera_buffer& send,
                const tessera_buffer& recv, tessera_reduce_op redop) {
  comm.run_raw(op_args(op, send, recv, redop));
}

}  // namespace tessera::cli
