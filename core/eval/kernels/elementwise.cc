// Element-wise kernels: arithmetic, comparisons, logic, unary math, activations, Clip and Cast.
// Multi-input ops broadcast numpy-style. Float16/bfloat16 values are computed in double and
// rounded back per operation, like numpy does for half precision.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include <absl/strings/str_cat.h>

#include "core/eval/broadcast.h"
#include "core/eval/kernel.h"
#include "core/eval/kernels.h"
#include "core/eval/kernels/common.h"
#include "core/ir/tensor.h"

namespace graft::eval {

namespace {

using onnx::TensorProto;

// Half-precision storage types that convert implicitly through float.
struct Half {
  uint16_t bits;
  Half() = default;
  Half(double v) : bits(ir::float_to_half(static_cast<float>(v))) {}  // NOLINT: implicit
  operator double() const { return ir::half_to_float(bits); }         // NOLINT: implicit
};
struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  BFloat16(double v) {  // NOLINT: implicit
    float f = static_cast<float>(v);
    uint32_t x;
    std::memcpy(&x, &f, 4);
    bits = std::isnan(f) ? static_cast<uint16_t>((x >> 16) | 0x40)
                         : static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
  }
  operator double() const {  // NOLINT: implicit
    uint32_t x = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  }
};
static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

template <typename T>
constexpr bool kIsFloat =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <typename T>
constexpr bool kIsBool = std::is_same_v<T, bool>;
template <typename T>
constexpr bool kIsInt = std::is_integral_v<T> && !kIsBool<T>;

// The type an element is computed in: double for every float type, itself otherwise.
template <typename T>
using Compute = std::conditional_t<kIsFloat<T>, double, T>;

// Type categories an op accepts.
enum TypeSet : unsigned {
  kFloats = 1,
  kSigned = 2,
  kUnsigned = 4,
  kBool = 8,
  kNumeric = kFloats | kSigned | kUnsigned,
  kAll = kNumeric | kBool,
};

template <typename T>
constexpr unsigned category() {
  if constexpr (kIsFloat<T>)
    return kFloats;
  else if constexpr (kIsBool<T>)
    return kBool;
  else if constexpr (std::is_signed_v<T>)
    return kSigned;
  else
    return kUnsigned;
}

// Calls f(Tag<T>{}) for the storage type T of `dtype` if its category is in `allowed`.
template <typename F>
absl::Status visit(int32_t dtype, unsigned allowed, F&& f) {
  auto go = [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    if (!(category<T>() & allowed)) {
      return absl::UnimplementedError(absl::StrCat("element type ", dtype, " not supported"));
    }
    return f(tag);
  };
  switch (dtype) {
    case TensorProto::FLOAT:
      return go(Tag<float>{});
    case TensorProto::DOUBLE:
      return go(Tag<double>{});
    case TensorProto::FLOAT16:
      return go(Tag<Half>{});
    case TensorProto::BFLOAT16:
      return go(Tag<BFloat16>{});
    case TensorProto::INT8:
      return go(Tag<int8_t>{});
    case TensorProto::INT16:
      return go(Tag<int16_t>{});
    case TensorProto::INT32:
      return go(Tag<int32_t>{});
    case TensorProto::INT64:
      return go(Tag<int64_t>{});
    case TensorProto::UINT8:
      return go(Tag<uint8_t>{});
    case TensorProto::UINT16:
      return go(Tag<uint16_t>{});
    case TensorProto::UINT32:
      return go(Tag<uint32_t>{});
    case TensorProto::UINT64:
      return go(Tag<uint64_t>{});
    case TensorProto::BOOL:
      return go(Tag<bool>{});
    default:
      return absl::UnimplementedError(absl::StrCat("element type ", dtype, " not supported"));
  }
}

absl::StatusOr<const Tensor*> need(const KernelContext& ctx, size_t i) {
  const Tensor* t = ctx.input(i);
  if (t == nullptr) return invalid(ctx, "missing input ", i);
  return t;
}

absl::Status same_types(const KernelContext& ctx, const std::vector<const Tensor*>& ts) {
  for (const Tensor* t : ts) {
    if (t->dtype() != ts[0]->dtype()) return invalid(ctx, "inputs have different types");
  }
  return absl::OkStatus();
}

// y = f(a, b) over the broadcast shape; A, B, O are storage types, f takes Compute values.
template <typename A, typename B, typename O, typename F>
void binary_loop(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  O* po = out.data<O>();
  const int64_t n = out.size();
  auto ca = [](A v) { return static_cast<Compute<A>>(v); };
  auto cb = [](B v) { return static_cast<Compute<B>>(v); };
  if (a.dims() == out.dims() && b.dims() == out.dims()) {
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<O>(f(ca(pa[i]), cb(pb[i])));
  } else if (a.dims() == out.dims() && b.size() == 1) {
    const auto vb = cb(pb[0]);
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<O>(f(ca(pa[i]), vb));
  } else if (b.dims() == out.dims() && a.size() == 1) {
    const auto va = ca(pa[0]);
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<O>(f(va, cb(pb[i])));
  } else {
    BroadcastIterator it(out.dims(), {a.dims(), b.dims()});
    for (int64_t i = 0; i < n; ++i, it.next()) {
      po[i] = static_cast<O>(f(ca(pa[it.offset(0)]), cb(pb[it.offset(1)])));
    }
  }
}

// Binary op with both inputs of one type; the output has that type, or bool if `to_bool`.
// `f` is a generic callable on Compute<T> values; it may fail through `error`.
template <typename F>
absl::Status binary(KernelContext& ctx, unsigned allowed, bool to_bool, F f) {
  ASSIGN_OR_RETURN(const Tensor* a, need(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* b, need(ctx, 1));
  RETURN_IF_ERROR(same_types(ctx, {a, b}));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, broadcast_shape({a->dims(), b->dims()}));
  int32_t out_type = to_bool ? static_cast<int32_t>(TensorProto::BOOL) : a->dtype();
  return visit(a->dtype(), allowed, [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, out_type, shape));
    absl::Status error;
    auto g = [&](Compute<T> x, Compute<T> z) { return f(x, z, error); };
    if (to_bool) {
      binary_loop<T, T, bool>(*a, *b, *y, g);
    } else {
      binary_loop<T, T, T>(*a, *b, *y, g);
    }
    return error;
  });
}

// y = f(x) element-wise, same type. `f` is generic on Compute<T>.
template <typename F>
absl::Status unary(KernelContext& ctx, unsigned allowed, F f) {
  ASSIGN_OR_RETURN(const Tensor* x, need(ctx, 0));
  return visit(x->dtype(), allowed, [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), x->dims()));
    const T* px = x->data<T>();
    T* py = y->data<T>();
    for (int64_t i = 0; i < x->size(); ++i) {
      py[i] = static_cast<T>(f(static_cast<Compute<T>>(px[i])));
    }
    return absl::OkStatus();
  });
}

// Registers a float-only unary op computed by `f(double)`.
void float_unary(const std::string& op, int since, double (*f)(double)) {
  register_kernel(op, since, 0, [f](KernelContext& ctx) {
    return unary(ctx, kFloats, [f](auto x) { return f(x); });
  });
}

// Min/Max/Sum/Mean: folds all inputs (broadcast) into the output with `f`.
template <typename F>
absl::Status variadic(KernelContext& ctx, unsigned allowed, bool mean, F f) {
  std::vector<const Tensor*> ins;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    ASSIGN_OR_RETURN(const Tensor* t, need(ctx, i));
    ins.push_back(t);
    shapes.push_back(t->dims());
  }
  if (ins.empty()) return invalid(ctx, "no inputs");
  RETURN_IF_ERROR(same_types(ctx, ins));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, broadcast_shape(shapes));
  return visit(ins[0]->dtype(), allowed, [&](auto tag) -> absl::Status {
    using T = typename decltype(tag)::type;
    ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, ins[0]->dtype(), shape));
    T* py = y->data<T>();
    const int64_t n = y->size();
    {
      const T* p0 = ins[0]->data<T>();
      BroadcastIterator it(shape, {ins[0]->dims()});
      for (int64_t i = 0; i < n; ++i, it.next()) py[i] = p0[it.offset(0)];
    }
    for (size_t k = 1; k < ins.size(); ++k) {
      const T* pk = ins[k]->data<T>();
      BroadcastIterator it(shape, {ins[k]->dims()});
      for (int64_t i = 0; i < n; ++i, it.next()) {
        py[i] = static_cast<T>(
            f(static_cast<Compute<T>>(py[i]), static_cast<Compute<T>>(pk[it.offset(0)])));
      }
    }
    if (mean) {
      if constexpr (kIsFloat<T>) {
        const double count = static_cast<double>(ins.size());
        for (int64_t i = 0; i < n; ++i) py[i] = static_cast<T>(static_cast<double>(py[i]) / count);
      }
    }
    return absl::OkStatus();
  });
}

template <typename T>
T min_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return b < a ? b : a;
}
template <typename T>
T max_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  }
  return a < b ? b : a;
}

// Integer division and remainder that cannot trap: callers check for zero; the one overflowing
// case (MIN / -1) wraps like two's complement hardware would.
template <typename T>
T int_div(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));
  }
  return static_cast<T>(a / b);
}
template <typename T>
T int_rem(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;
  }
  return static_cast<T>(a % b);
}

absl::Status zero_division(const KernelContext& ctx) {
  return invalid(ctx, "integer division by zero");
}

void register_arithmetic() {
  register_kernel("Add", 7, 0, [](KernelContext& ctx) {
    return binary(ctx, kNumeric, false, [](auto a, auto b, absl::Status&) {
      using C = decltype(a);
      if constexpr (kIsInt<C>) {
        using U = std::make_unsigned_t<C>;
        return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
      } else {
        return a + b;
      }
    });
  });
  register_kernel("Sub", 7, 0, [](KernelContext& ctx) {
    return binary(ctx, kNumeric, false, [](auto a, auto b, absl::Status&) {
      using C = decltype(a);
      if constexpr (kIsInt<C>) {
        using U = std::make_unsigned_t<C>;
        return static_cast<C>(static_cast<U>(a) - static_cast<U>(b));
      } else {
        return a - b;
      }
    });
  });
  register_kernel("Mul", 7, 0, [](KernelContext& ctx) {
    return binary(ctx, kNumeric, false, [](auto a, auto b, absl::Status&) {
      using C = decltype(a);
      if constexpr (kIsInt<C>) {
        using U = std::make_unsigned_t<C>;
        using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
        return static_cast<C>(static_cast<W>(static_cast<U>(a)) *
                              static_cast<W>(static_cast<U>(b)));
      } else {
        return a * b;
      }
    });
  });
  register_kernel("Div", 7, 0, [](KernelContext& ctx) {
    return binary(ctx, kNumeric, false, [&ctx](auto a, auto b, absl::Status& error) {
      using C = decltype(a);
      if constexpr (kIsInt<C>) {
        if (b == 0) {
          error = zero_division(ctx);
          return C{0};
        }
        return int_div(a, b);
      } else {
        return a / b;
      }
    });
  });
  register_kernel("Mod", 10, 0, [](KernelContext& ctx) {
    const bool fmod = ctx.node.attr_int("fmod", 0) != 0;
    ASSIGN_OR_RETURN(const Tensor* a, need(ctx, 0));
    if (is_float_type(a->dtype()) && !fmod) {
      return absl::InvalidArgumentError("Mod: fmod must be 1 for floating-point inputs");
    }
    return binary(ctx, kNumeric, false, [&ctx, fmod](auto a, auto b, absl::Status& error) {
      using C = decltype(a);
      if constexpr (kIsInt<C>) {
        if (b == 0) {
          error = zero_division(ctx);
          return C{0};
        }
        C r = int_rem(a, b);
        // Python-style: the remainder takes the divisor's sign.
        if constexpr (std::is_signed_v<C>) {
          if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
        }
        return r;
      } else {
        return std::fmod(a, b);
      }
    });
  });
  register_kernel("Pow", 7, 0, [](KernelContext& ctx) {
    ASSIGN_OR_RETURN(const Tensor* a, need(ctx, 0));
    ASSIGN_OR_RETURN(const Tensor* b, need(ctx, 1));
    ASSIGN_OR_RETURN(std::vector<int64_t> shape, broadcast_shape({a->dims(), b->dims()}));
    const unsigned base_types = ctx.opset >= 12 ? kFloats | kSigned | kUnsigned : kFloats;
    return visit(a->dtype(), base_types, [&](auto ta) -> absl::Status {
      using A = typename decltype(ta)::type;
      return visit(b->dtype(), base_types | kNumeric, [&](auto tb) -> absl::Status {
        using B = typename decltype(tb)::type;
        ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, a->dtype(), shape));
        binary_loop<A, B, A>(*a, *b, *y, [](auto x, auto e) -> Compute<A> {
          if constexpr (kIsInt<A> && kIsInt<decltype(e)>) {
            // Exact integer power by squaring (wrapping), as numpy does for integers.
            if constexpr (std::is_signed_v<decltype(e)>) {
              if (e < 0) {
                if constexpr (std::is_signed_v<A>) {
                  if (x == -1) return e % 2 ? -1 : 1;
                }
                return x == 1 ? 1 : 0;  // |x| > 1 gives a fraction, truncated
              }
            }
            // decltype(x) (== A here) rather than A: clang instantiates non-dependent types
            // even in a discarded constexpr branch, and A may be a float type there.
            using U = std::make_unsigned_t<decltype(x)>;
            uint64_t base = static_cast<uint64_t>(static_cast<U>(x)), r = 1;
            for (uint64_t k = static_cast<uint64_t>(e); k; k >>= 1) {
              if (k & 1) r *= base;
              base *= base;
            }
            return static_cast<A>(static_cast<U>(r));
          } else {
            double v = std::pow(static_cast<double>(x), static_cast<double>(e));
            if constexpr (kIsInt<A>) {
              // max() + 1 is a power of two, exact as a double (max() itself rounds up to it
              // for 64 bits, where `v <= max()` let 2^63 through to an undefined conversion).
              if (!(v >= static_cast<double>(std::numeric_limits<A>::min()) &&
                    v < static_cast<double>(std::numeric_limits<A>::max()) + 1.0)) {
                return std::numeric_limits<A>::min();
              }
            }
            return static_cast<Compute<A>>(v);
          }
        });
        return absl::OkStatus();
      });
    });
  });

  for (const char* op : {"Min", "Max", "Sum", "Mean"}) {
    const std::string name = op;
    const unsigned types = name == "Min" || name == "Max" ? kNumeric : kFloats;
    register_kernel(name, 6, 0, [name, types](KernelContext& ctx) {
      // Min/Max accept integers from opset 12.
      const unsigned allowed = types == kNumeric && ctx.opset < 12 ? kFloats : types;
      if (name == "Min") {
        return variadic(ctx, allowed, false, [](auto a, auto b) { return min_of(a, b); });
      }
      if (name == "Max") {
        return variadic(ctx, allowed, false, [](auto a, auto b) { return max_of(a, b); });
      }
      return variadic(ctx, allowed, name == "Mean", [](auto a, auto b) { return a + b; });
    });
  }
}

void register_comparisons() {
  auto compare = [](const std::string& op, int since, auto pred) {
    register_kernel(op, since, 0, [op, pred](KernelContext& ctx) -> absl::Status {
      ASSIGN_OR_RETURN(const Tensor* a, need(ctx, 0));
      if (a->dtype() == TensorProto::STRING && op == "Equal") {
        ASSIGN_OR_RETURN(const Tensor* b, need(ctx, 1));
        RETURN_IF_ERROR(same_types(ctx, {a, b}));
        ASSIGN_OR_RETURN(std::vector<int64_t> shape, broadcast_shape({a->dims(), b->dims()}));
        ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, TensorProto::BOOL, shape));
        BroadcastIterator it(shape, {a->dims(), b->dims()});
        for (int64_t i = 0; i < y->size(); ++i, it.next()) {
          y->data<bool>()[i] = a->strings()[it.offset(0)] == b->strings()[it.offset(1)];
        }
        return absl::OkStatus();
      }
      const unsigned allowed = op == "Equal" ? kAll : kNumeric;
      return binary(ctx, allowed, true,
                    [pred](auto x, auto y, absl::Status&) { return pred(x, y); });
    });
  };
  compare("Equal", 7, [](auto a, auto b) { return a == b; });
  compare("Less", 7, [](auto a, auto b) { return a < b; });
  compare("Greater", 7, [](auto a, auto b) { return a > b; });
  compare("LessOrEqual", 12, [](auto a, auto b) { return a <= b; });
  compare("GreaterOrEqual", 12, [](auto a, auto b) { return a >= b; });

  auto logic = [](const std::string& op, auto f) {
    register_kernel(op, 7, 0, [f](KernelContext& ctx) {
      return binary(ctx, kBool, true, [f](auto a, auto b, absl::Status&) { return f(a, b); });
    });
  };
  logic("And", [](bool a, bool b) { return a && b; });
  logic("Or", [](bool a, bool b) { return a || b; });
  logic("Xor", [](bool a, bool b) { return a != b; });
  register_kernel("Not", 1, 0,
                  [](KernelContext& ctx) { return unary(ctx, kBool, [](auto x) { return !x; }); });

  register_kernel("Where", 9, 0, [](KernelContext& ctx) -> absl::Status {
    ASSIGN_OR_RETURN(const Tensor* c, need(ctx, 0));
    ASSIGN_OR_RETURN(const Tensor* x, need(ctx, 1));
    ASSIGN_OR_RETURN(const Tensor* z, need(ctx, 2));
    if (c->dtype() != TensorProto::BOOL) return absl::InvalidArgumentError("Where: bad condition");
    RETURN_IF_ERROR(same_types(ctx, {x, z}));
    ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                     broadcast_shape({c->dims(), x->dims(), z->dims()}));
    ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), shape));
    BroadcastIterator it(shape, {c->dims(), x->dims(), z->dims()});
    const bool* pc = c->data<bool>();
    const int64_t n = y->size();
    if (x->dtype() == TensorProto::STRING) {
      for (int64_t i = 0; i < n; ++i, it.next()) {
        y->strings()[i] =
            pc[it.offset(0)] ? x->strings()[it.offset(1)] : z->strings()[it.offset(2)];
      }
      return absl::OkStatus();
    }
    const size_t es = x->element_size();
    if (es == 0) return absl::UnimplementedError("Where: unsupported element type");
    const char* px = x->data<char>();
    const char* pz = z->data<char>();
    char* py = y->data<char>();
    for (int64_t i = 0; i < n; ++i, it.next()) {
      const char* src = pc[it.offset(0)] ? px + it.offset(1) * es : pz + it.offset(2) * es;
      std::memcpy(py + i * es, src, es);
    }
    return absl::OkStatus();
  });
}

double sigmoid(double x) {
  return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x));
}

void register_unary_math() {
  register_kernel("Neg", 6, 0, [](KernelContext& ctx) {
    return unary(ctx, kFloats | kSigned, [](auto x) {
      using C = decltype(x);
      if constexpr (kIsInt<C>) {
        return static_cast<C>(0 - static_cast<std::make_unsigned_t<C>>(x));
      } else {
        return -x;
      }
    });
  });
  register_kernel("Abs", 6, 0, [](KernelContext& ctx) {
    return unary(ctx, kNumeric, [](auto x) {
      using C = decltype(x);
      if constexpr (std::is_unsigned_v<C>) {
        return x;
      } else if constexpr (kIsInt<C>) {
        return x < 0 ? static_cast<C>(0 - static_cast<std::make_unsigned_t<C>>(x)) : x;
      } else {
        return std::fabs(x);
      }
    });
  });
  register_kernel("Sign", 9, 0, [](KernelContext& ctx) {
    return unary(ctx, kNumeric, [](auto x) {
      using C = decltype(x);
      if constexpr (kIsFloat<C>) {
        if (std::isnan(x)) return x;
      }
      return static_cast<C>((C{0} < x) - (x < C{0}));
    });
  });
  register_kernel("Relu", 6, 0, [](KernelContext& ctx) {
    // Integer types from opset 14.
    return unary(ctx, ctx.opset >= 14 ? kFloats | kSigned : kFloats, [](auto x) {
      using C = decltype(x);
      return x > C{0} ? x : C{0};
    });
  });
  float_unary("Sqrt", 6, [](double x) { return std::sqrt(x); });
  float_unary("Reciprocal", 6, [](double x) { return 1.0 / x; });
  float_unary("Exp", 6, [](double x) { return std::exp(x); });
  float_unary("Log", 6, [](double x) { return std::log(x); });
  float_unary("Erf", 9, [](double x) { return std::erf(x); });
  float_unary("Sin", 7, [](double x) { return std::sin(x); });
  float_unary("Cos", 7, [](double x) { return std::cos(x); });
  float_unary("Floor", 6, [](double x) { return std::floor(x); });
  float_unary("Ceil", 6, [](double x) { return std::ceil(x); });
  // Halves round to even (the default floating-point rounding mode).
  float_unary("Round", 11, [](double x) { return std::nearbyint(x); });
  float_unary("Tanh", 6, [](double x) { return std::tanh(x); });
  float_unary("Sigmoid", 6, sigmoid);
  // log(1 + e^x) without overflow for large x.
  float_unary("Softplus", 1, [](double x) {
    return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  });
  float_unary("HardSwish", 14, [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); });
}

void register_activations() {
  register_kernel("LeakyRelu", 6, 0, [](KernelContext& ctx) {
    const double alpha = ctx.node.attr_float("alpha", 0.01f);
    return unary(ctx, kFloats, [alpha](double x) { return x >= 0 ? x : alpha * x; });
  });
  register_kernel("Elu", 6, 0, [](KernelContext& ctx) {
    const double alpha = ctx.node.attr_float("alpha", 1.0f);
    return unary(ctx, kFloats, [alpha](double x) { return x >= 0 ? x : alpha * std::expm1(x); });
  });
  register_kernel("Selu", 6, 0, [](KernelContext& ctx) {
    const double alpha = ctx.node.attr_float("alpha", 1.67326319217681884765625f);
    const double gamma = ctx.node.attr_float("gamma", 1.05070102214813232421875f);
    return unary(ctx, kFloats,
                 [alpha, gamma](double x) { return gamma * (x > 0 ? x : alpha * std::expm1(x)); });
  });
  register_kernel("HardSigmoid", 6, 0, [](KernelContext& ctx) {
    const double alpha = ctx.node.attr_float("alpha", 0.2f);
    const double beta = ctx.node.attr_float("beta", 0.5f);
    return unary(ctx, kFloats,
                 [alpha, beta](double x) { return std::clamp(alpha * x + beta, 0.0, 1.0); });
  });
  register_kernel("Gelu", 20, 0, [](KernelContext& ctx) -> absl::Status {
    const std::string approximate = ctx.node.attr_string("approximate", "none");
    if (approximate == "none") return unary(ctx, kFloats, gelu_erf);
    if (approximate == "tanh") return unary(ctx, kFloats, gelu_tanh);
    return absl::InvalidArgumentError("Gelu: bad approximate attribute " + approximate);
  });
  register_kernel("Clip", 6, 0, [](KernelContext& ctx) -> absl::Status {
    ASSIGN_OR_RETURN(const Tensor* x, need(ctx, 0));
    if (ctx.opset < 11) {
      const double lo = ctx.node.attr_float("min", -std::numeric_limits<float>::max());
      const double hi = ctx.node.attr_float("max", std::numeric_limits<float>::max());
      return unary(ctx, kFloats, [lo, hi](double v) { return std::min(std::max(v, lo), hi); });
    }
    const Tensor* lo = ctx.input(1);
    const Tensor* hi = ctx.input(2);
    for (const Tensor* b : {lo, hi}) {
      if (b == nullptr) continue;
      if (b->dtype() != x->dtype() || b->size() != 1) {
        return absl::InvalidArgumentError("Clip: min/max must be scalars of the input type");
      }
    }
    return visit(x->dtype(), ctx.opset >= 12 ? kNumeric : kFloats, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      using C = Compute<T>;
      C l = lo ? static_cast<C>(lo->data<T>()[0]) : std::numeric_limits<C>::lowest();
      C h = hi ? static_cast<C>(hi->data<T>()[0]) : std::numeric_limits<C>::max();
      if constexpr (kIsFloat<T>) {
        if (!lo) l = -std::numeric_limits<double>::infinity();
        if (!hi) h = std::numeric_limits<double>::infinity();
      }
      return unary(ctx, kNumeric, [l, h](auto v) {
        using V = decltype(v);
        V r = v < static_cast<V>(l) ? static_cast<V>(l) : v;
        return r > static_cast<V>(h) ? static_cast<V>(h) : r;
      });
    });
  });
}

// Shortest text that reads back as the same float (what numpy prints for float32 values).
std::string float_to_string(double v, int32_t dtype) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "INF" : "-INF";
  char buf[64];
  std::to_chars_result r = dtype == TensorProto::DOUBLE
                               ? std::to_chars(buf, buf + sizeof(buf), v)
                               : std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v));
  return std::string(buf, r.ptr);
}

absl::Status cast(KernelContext& ctx, int32_t to) {
  ASSIGN_OR_RETURN(const Tensor* x, need(ctx, 0));
  const int32_t from = x->dtype();
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, to, x->dims()));
  const int64_t n = x->size();
  const bool from_float = is_float_type(from);
  if (from == TensorProto::STRING || to == TensorProto::STRING) {
    if (from == to) {
      y->strings() = x->strings();
      return absl::OkStatus();
    }
    if (to == TensorProto::STRING) {
      if (!from_float && !is_integer_type(from) && from != TensorProto::BOOL) {
        return absl::UnimplementedError("Cast: unsupported source type");
      }
      for (int64_t i = 0; i < n; ++i) {
        if (from_float) {
          y->strings()[i] = float_to_string(x->get_double(i), from);
        } else if (from == TensorProto::BOOL) {
          y->strings()[i] = x->get_int64(i) ? "True" : "False";
        } else if (from == TensorProto::UINT64) {
          y->strings()[i] = std::to_string(x->data<uint64_t>()[i]);
        } else {
          y->strings()[i] = std::to_string(x->get_int64(i));
        }
      }
      return absl::OkStatus();
    }
    if (!is_float_type(to) && !is_integer_type(to)) {
      return absl::UnimplementedError("Cast: unsupported target type");
    }
    for (int64_t i = 0; i < n; ++i) {
      const std::string& s = x->strings()[i];
      char* end = nullptr;
      if (is_float_type(to)) {
        double v = std::strtod(s.c_str(), &end);
        if (end == s.c_str()) return absl::InvalidArgumentError("Cast: not a number: " + s);
        y->set_double(i, v);
      } else {
        long long v = std::strtoll(s.c_str(), &end, 10);
        if (end == s.c_str()) return absl::InvalidArgumentError("Cast: not a number: " + s);
        y->set_int64(i, v);
      }
    }
    return absl::OkStatus();
  }
  auto numeric = [](int32_t t) {
    return is_float_type(t) || is_integer_type(t) || t == TensorProto::BOOL;
  };
  if (!numeric(from) || !numeric(to)) return absl::UnimplementedError("Cast: unsupported type");
  // ONNX 1.12 truncates when narrowing to bfloat16, later versions (and runtimes) round to
  // nearest even; the result is ambiguous, so such casts are not evaluated.
  if (to == TensorProto::BFLOAT16 && from != to && from_float && from != TensorProto::FLOAT16) {
    return absl::UnimplementedError("Cast: rounding to bfloat16 differs between ONNX versions");
  }
  if (from == to) {
    std::memcpy(y->data<char>(), x->data<char>(), x->bytes());
  } else if (from_float || is_float_type(to)) {
    for (int64_t i = 0; i < n; ++i) {
      poll_every(i);
      y->set_double(i, x->get_double(i));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      poll_every(i);
      y->set_int64(i, x->get_int64(i));
    }
  }
  return absl::OkStatus();
}

void register_misc() {
  register_kernel("Identity", 1, 0, [](KernelContext& ctx) -> absl::Status {
    ASSIGN_OR_RETURN(const Tensor* x, need(ctx, 0));
    ctx.outputs.at(0) = *x;  // a copy is bounded by the input, already within the limits
    return absl::OkStatus();
  });
  register_kernel("Cast", 6, 0, [](KernelContext& ctx) -> absl::Status {
    const auto* to = ctx.node.attr("to");
    if (to == nullptr) return absl::InvalidArgumentError("Cast: missing 'to'");
    return cast(ctx, static_cast<int32_t>(to->i()));
  });
  register_kernel("CastLike", 15, 0, [](KernelContext& ctx) -> absl::Status {
    ASSIGN_OR_RETURN(const Tensor* like, need(ctx, 1));
    return cast(ctx, like->dtype());
  });
}

}  // namespace

void register_elementwise_kernels() {
  register_arithmetic();
  register_comparisons();
  register_unary_math();
  register_activations();
  register_misc();
}

}  // namespace graft::eval
