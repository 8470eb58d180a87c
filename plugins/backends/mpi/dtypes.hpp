// Tessera dtypes and reduce ops as MPI datatypes and MPI_Ops.
//
// f32, f64, i32, i64 and u8 map to MPI's own types and operators. f16 and
// bf16 have no MPI type: each is a committed 2-byte contiguous type of its
// own, reduced by user-defined operators (MPI_Op_create) that widen to f32,
// combine, and round back once per step. AVG is reduced as SUM; the caller
// divides by the group size afterwards (see op.hpp).
#pragma once

#include <mpi.h>

#include "tessera/c/common.h"

namespace tessera::mpi {

// Creates the f16/bf16 types and their operators. Called once MPI runs,
// before the first operation. Throws Error(INTERNAL) if MPI refuses.
void create_reduction_types();

// Frees what create_reduction_types() made; called just before MPI_Finalize.
void free_reduction_types() noexcept;

// The MPI datatype of elements of `dtype` (a known dtype).
MPI_Datatype mpi_datatype(tessera_dtype dtype) noexcept;

// The MPI operator that reduces `dtype` elements with `op` (AVG: the sum).
MPI_Op mpi_op(tessera_dtype dtype, tessera_reduce_op op) noexcept;

}  // namespace tessera::mpi
