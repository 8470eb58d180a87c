#include "reduce_fn.hpp"

#include <type_traits>

#include "tessera/sdk/reduce.hpp"

namespace tessera::gloo_backend {
namespace {

template <typename T>
constexpr bool kNarrowFloat = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

// Arithmetic type of T: f32 for the 16-bit floats, T otherwise.
template <typename T>
using Arith = std::conditional_t<kNarrowFloat<T>, float, T>;

template <typename T>
inline Arith<T> load(T v) noexcept {
  if constexpr (kNarrowFloat<T>) {
    return to_float(v);
  } else {
    return v;
  }
}

template <typename T>
inline T store(Arith<T> v) noexcept {
  if constexpr (std::is_same_v<T, half>) {
    return to_half(v);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return to_bfloat16(v);
  } else {
    return v;
  }
}

struct Sum {
  template <typename A>
  static A apply(A a, A b) noexcept {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};
struct Prod {
  template <typename A>
  static A apply(A a, A b) noexcept {
    if constexpr (std::is_integral_v<A>) {
      using U = std::make_unsigned_t<A>;
      return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};
struct Min {
  template <typename A>
  static A apply(A a, A b) noexcept {
    return b < a ? b : a;
  }
};
struct Max {
  template <typename A>
  static A apply(A a, A b) noexcept {
    return a < b ? b : a;
  }
};

// out[i] = a[i] op b[i]. Element i is read from both inputs before out[i]
// is written, so out may alias either input.
template <typename T, typename Op>
void kernel(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = store<T>(Op::apply(load(x[i]), load(y[i])));
}

template <typename T, typename Op>
void in_place(T* x, const T* y, size_t n) {
  kernel<T, Op>(x, x, y, n);
}

template <typename T>
ReduceFn typed_fn(tessera_reduce_op op) {
  switch (op) {
    case TESSERA_SUM:
    case TESSERA_AVG:
      return &kernel<T, Sum>;
    case TESSERA_PROD:
      return &kernel<T, Prod>;
    case TESSERA_MIN:
      return &kernel<T, Min>;
    case TESSERA_MAX:
      return &kernel<T, Max>;
    default:
      break;
  }
  throw Error(TESSERA_ERR_INVALID_ARGUMENT, detail::concat("gloo: unknown reduce op ", op));
}

}  // namespace

ReduceFn reduce_fn(tessera_dtype dtype, tessera_reduce_op op) {
  ReduceFn fn = nullptr;
  visit_element(dtype, [&](auto tag) { fn = typed_fn<decltype(tag)>(op); });
  return fn;
}

template <typename T>
const gloo::ReductionFunction<T>* class_reduction(tessera_reduce_op op) {
  static const gloo::ReductionFunction<T> sum(gloo::CUSTOM, &in_place<T, Sum>);
  static const gloo::ReductionFunction<T> prod(gloo::CUSTOM, &in_place<T, Prod>);
  static const gloo::ReductionFunction<T> min(gloo::CUSTOM, &in_place<T, Min>);
  static const gloo::ReductionFunction<T> max(gloo::CUSTOM, &in_place<T, Max>);
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
