#include "dtypes.hpp"

#include <array>

#include "runtime.hpp"
#include "tessera/sdk/reduce.hpp"

namespace tessera::mpi {
namespace {

MPI_Datatype g_f16 = MPI_DATATYPE_NULL;
MPI_Datatype g_bf16 = MPI_DATATYPE_NULL;
// Indexed by tessera_reduce_op; AVG shares SUM's.
std::array<MPI_Op, TESSERA_REDUCE_OP_COUNT> g_half_ops{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL,
                                                       MPI_OP_NULL, MPI_OP_NULL};

// inout[i] = in[i] `Op` inout[i] for 16-bit floats, computed in f32. MPI
// hands back the datatype the operation was started with, which tells f16
// from bf16. The operators are commutative, so the operand order is free.
template <tessera_reduce_op Op>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype* type) {
  const tessera_dtype dtype = (*type == g_bf16) ? TESSERA_BF16 : TESSERA_F16;
  try {
    sdk::reduce_into(inout, in, static_cast<uint64_t>(*len), dtype, Op);
  } catch (...) {  // NOLINT(bugprone-empty-catch): dtype and op are always known here
  }
}

void make_type(MPI_Datatype* type, const char* name) {
  check_mpi(MPI_Type_contiguous(2, MPI_BYTE, type),
            detail::concat("mpi: MPI_Type_contiguous for ", name));
  check_mpi(MPI_Type_commit(type), detail::concat("mpi: MPI_Type_commit for ", name));
  MPI_Type_set_name(*type, name);
}

void make_op(MPI_User_function* fn, tessera_reduce_op op) {
  check_mpi(MPI_Op_create(fn, 1, &g_half_ops[static_cast<size_t>(op)]),
            detail::concat("mpi: MPI_Op_create for 16-bit float ", reduce_op_name(op)));
}

}  // namespace

void create_reduction_types() {
  make_type(&g_f16, "tessera_f16");
  make_type(&g_bf16, "tessera_bf16");
  make_op(&half_reduce<TESSERA_SUM>, TESSERA_SUM);
  make_op(&half_reduce<TESSERA_MIN>, TESSERA_MIN);
  make_op(&half_reduce<TESSERA_MAX>, TESSERA_MAX);
  make_op(&half_reduce<TESSERA_PROD>, TESSERA_PROD);
  g_half_ops[TESSERA_AVG] = g_half_ops[TESSERA_SUM];
}

void free_reduction_types() noexcept {
  for (const tessera_reduce_op op : {TESSERA_SUM, TESSERA_MIN, TESSERA_MAX, TESSERA_PROD}) {
    if (g_half_ops[static_cast<size_t>(op)] != MPI_OP_NULL) {
      MPI_Op_free(&g_half_ops[static_cast<size_t>(op)]);
    }
  }
  g_half_ops.fill(MPI_OP_NULL);
  if (g_f16 != MPI_DATATYPE_NULL) MPI_Type_free(&g_f16);
  if (g_bf16 != MPI_DATATYPE_NULL) MPI_Type_free(&g_bf16);
}

MPI_Datatype mpi_datatype(tessera_dtype dtype) noexcept {
  switch (dtype) {
    case TESSERA_F32:
      return MPI_FLOAT;
    case TESSERA_F64:
      return MPI_DOUBLE;
    case TESSERA_F16:
      return g_f16;
    case TESSERA_BF16:
      return g_bf16;
    case TESSERA_I32:
      return MPI_INT32_T;
    case TESSERA_I64:
      return MPI_INT64_T;
    case TESSERA_U8:
      return MPI_UINT8_T;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(tessera_dtype dtype, tessera_reduce_op op) noexcept {
  if (op < 0 || op >= TESSERA_REDUCE_OP_COUNT) return MPI_OP_NULL;
  if (dtype == TESSERA_F16 || dtype == TESSERA_BF16) return g_half_ops[static_cast<size_t>(op)];
  switch (op) {
    case TESSERA_SUM:
    case TESSERA_AVG:
      return MPI_SUM;
    case TESSERA_MIN:
      return MPI_MIN;
    case TESSERA_MAX:
      return MPI_MAX;
    case TESSERA_PROD:
      return MPI_PROD;
    default:
      return MPI_OP_NULL;
  }
}

}  // namespace tessera::mpi
