#include "reduce_fn.hpp"

#include "tessera/sdk/reduce.hpp"

namespace tessera::gloo_backend {
namespace {

// out[i] = a[i] op b[i], through the SDK's reduction (f16/bf16 combined in
// f32 and rounded once, integers wrapping). out may be a or b.
template <typename T, tessera_reduce_op kOp>
void kernel(void* out, const void* a, const void* b, size_t n) {
  const void* srcs[2] = {a, b};
  sdk::reduce_sources(out, srcs, 2, n, dtype_of<T>::value, kOp);
}

template <typename T, tessera_reduce_op kOp>
void in_place(T* x, const T* y, size_t n) {
  kernel<T, kOp>(x, x, y, n);
}

template <typename T>
ReduceFn typed_fn(tessera_reduce_op op) {
  switch (op) {
    case TESSERA_SUM:
    case TESSERA_AVG:
      return &kernel<T, TESSERA_SUM>;
    case TESSERA_PROD:
      return &kernel<T, TESSERA_PROD>;
    case TESSERA_MIN:
      return &kernel<T, TESSERA_MIN>;
    case TESSERA_MAX:
      return &kernel<T, TESSERA_MAX>;
    default:
      break;
  }
  throw Error(TESSERA_ERR_INVALID_ARGUMENT, detail::concat("gloo: unknown reduce op ", op));
}

}  // namespace

ReduceFn reduce_fn(tessera_dtype dtype, tessera_reduce_op op) {
  ReduceFn fn = nullptr;
  sdk::visit_dtype(dtype, [&](auto tag) { fn = typed_fn<decltype(tag)>(op); });
  return fn;
}

template <typename T>
const gloo::ReductionFunction<T>* class_reduction(tessera_reduce_op op) {
  static const gloo::ReductionFunction<T> sum(gloo::CUSTOM, &in_place<T, TESSERA_SUM>);
  static const gloo::ReductionFunction<T> prod(gloo::CUSTOM, &in_place<T, TESSERA_PROD>);
  static const gloo::ReductionFunction<T> min(gloo::CUSTOM, &in_place<T, TESSERA_MIN>);
  static const gloo::ReductionFunction<T> max(gloo::CUSTOM, &in_place<T, TESSERA_MAX>);
  switch (op) {
    case TESSERA_SUM:
    case TESSERA_AVG:
      return &sum;
    case TESSERA_PROD:
      return &prod;
    case TESSERA_MIN:
      return &min;
    case TESSERA_MAX:
      return &max;
    default:
      break;
  }
  throw Error(TESSERA_ERR_INVALID_ARGUMENT, detail::concat("gloo: unknown reduce op ", op));
}

template const gloo::ReductionFunction<float>* class_reduction<float>(tessera_reduce_op);
template const gloo::ReductionFunction<double>* class_reduction<double>(tessera_reduce_op);
template const gloo::ReductionFunction<half>* class_reduction<half>(tessera_reduce_op);
template const gloo::ReductionFunction<bfloat16>* class_reduction<bfloat16>(tessera_reduce_op);
template const gloo::ReductionFunction<int32_t>* class_reduction<int32_t>(tessera_reduce_op);
template const gloo::ReductionFunction<int64_t>* class_reduction<int64_t>(tessera_reduce_op);
template const gloo::ReductionFunction<uint8_t>* class_reduction<uint8_t>(tessera_reduce_op);

void finish_avg(void* data, uint64_t count, tessera_dtype dtype, int32_t size) {
  if (count == 0 || size <= 1) return;
  sdk::finish_avg(data, count, dtype, size);
}

}  // namespace tessera::gloo_backend
