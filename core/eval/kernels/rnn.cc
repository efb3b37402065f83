// Recurrent kernels: RNN, GRU and LSTM (all directions, layouts, optional inputs, activation
// lists, clip, input_forget, linear_before_reset) and Dropout in inference.
//
// One shared driver walks directions, batch entries and time steps (sequence_lens respected:
// steps past a sequence's length leave zeros in Y and do not change its state); the ops differ
// only in their cell. Arithmetic is in double, rounded to the output type once.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include "core/eval/kernel.h"
#include "core/eval/kernels.h"
#include "core/eval/kernels/common.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

// ---------------------------------------------------------------------------------------------
// Activations as the RNN ops name them. Alphas and betas are consumed in list order by the
// functions that take them; the others use their operator defaults.

struct Activation {
  enum Kind {
    kRelu,
    kTanh,
    kSigmoid,
    kAffine,
    kLeakyRelu,
    kThresholdedRelu,
    kScaledTanh,
    kHardSigmoid,
    kElu,
    kSoftsign,
    kSoftplus
  };
  Kind kind = kSigmoid;
  double alpha = 0;
  double beta = 0;

  double operator()(double x) const {
    switch (kind) {
      case kRelu:
        return x > 0 ? x : 0;
      case kTanh:
        return std::tanh(x);
      case kSigmoid:
        return 1 / (1 + std::exp(-x));
      case kAffine:
        return alpha * x + beta;
      case kLeakyRelu:
        return x >= 0 ? x : alpha * x;
      case kThresholdedRelu:
        return x > alpha ? x : 0;
      case kScaledTanh:
        return alpha * std::tanh(beta * x);
      case kHardSigmoid:
        return std::clamp(alpha * x + beta, 0.0, 1.0);
      case kElu:
        return x >= 0 ? x : alpha * (std::exp(x) - 1);
      case kSoftsign:
        return x / (1 + std::abs(x));
      case kSoftplus:
        return std::log1p(std::exp(-std::abs(x))) + std::max(x, 0.0);
    }
    return x;
  }
};

struct ActivationInfo {
  const char* name;
  Activation::Kind kind;
  int params;  // how many of (alpha, beta) it consumes
  double alpha;
  double beta;
};

constexpr ActivationInfo kActivations[] = {
    {"relu", Activation::kRelu, 0, 0, 0},
    {"tanh", Activation::kTanh, 0, 0, 0},
    {"sigmoid", Activation::kSigmoid, 0, 0, 0},
    {"affine", Activation::kAffine, 2, 1.0, 0.0},
    {"leakyrelu", Activation::kLeakyRelu, 1, 0.01, 0},
    {"thresholdedrelu", Activation::kThresholdedRelu, 1, 1.0, 0},
    {"scaledtanh", Activation::kScaledTanh, 2, 1.0, 1.0},
    {"hardsigmoid", Activation::kHardSigmoid, 2, 0.2, 0.5},
    {"elu", Activation::kElu, 1, 1.0, 0},
    {"softsign", Activation::kSoftsign, 0, 0, 0},
    {"softplus", Activation::kSoftplus, 0, 0, 0},
};

// The activations of each direction (forward's first), `defaults` when the node names none. A
// list naming only one direction's functions for a bidirectional op is used for both.
absl::StatusOr<std::vector<Activation>> parse_activations(const KernelContext& ctx,
                                                          const std::vector<std::string>& defaults,
                                                          int directions) {
  const size_t per_direction = defaults.size();
  std::vector<std::string> names;
  std::vector<float> alphas, betas;
  for (const auto& a : ctx.node.attributes()) {
    if (a.name() == "activations") names.assign(a.strings().begin(), a.strings().end());
    if (a.name() == "activation_alpha") alphas.assign(a.floats().begin(), a.floats().end());
    if (a.name() == "activation_beta") betas.assign(a.floats().begin(), a.floats().end());
  }
  if (names.empty()) {
    for (int d = 0; d < directions; ++d)
      names.insert(names.end(), defaults.begin(), defaults.end());
  } else if (names.size() == per_direction && directions == 2) {
    // One direction's functions, with their parameters, serve both.
    auto twice = [](auto& v) {
      auto copy = v;
      v.insert(v.end(), copy.begin(), copy.end());
    };
    twice(names);
    twice(alphas);
    twice(betas);
  }
  if (names.size() != per_direction * directions) {
    return invalid(ctx, absl::StrCat("expected ", per_direction * directions, " activations, got ",
                                     names.size()));
  }
  std::vector<Activation> out;
  size_t next_alpha = 0, next_beta = 0;
  for (const std::string& name : names) {
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const ActivationInfo* info = nullptr;
    for (const auto& candidate : kActivations) {
      if (lower == candidate.name) info = &candidate;
    }
    if (info == nullptr) return unimplemented(ctx, absl::StrCat("activation ", name));
    Activation act{info->kind, info->alpha, info->beta};
    if (info->params >= 1 && next_alpha < alphas.size()) act.alpha = alphas[next_alpha++];
    if (info->params >= 2 && next_beta < betas.size()) act.beta = betas[next_beta++];
    out.push_back(act);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Shared driver.

// out[r] += sum_k m[r * cols + k] * v[k] for r in [0, rows).
void matvec_add(const double* m, int64_t rows, int64_t cols, const double* v, double* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = m + r * cols;
    double acc = 0;
    for (int64_t k = 0; k < cols; ++k) acc += row[k] * v[k];
    out[r] += acc;
  }
}

// One direction's parameters, as seen by a cell.
struct DirectionParams {
  const double* w;   // [gates * hidden, input]
  const double* r;   // [gates * hidden, hidden]
  const double* wb;  // [gates * hidden]
  const double* rb;  // [gates * hidden]
  const double* p;   // LSTM peepholes [3 * hidden] (i, o, f) or nullptr
  const Activation* act;
};

// Advances one sequence by one step: reads x (input_size) and the state h (hidden) and c
// (hidden, LSTM only), and overwrites h and c. `scratch` holds at least 2 * gates * hidden.
using Cell = std::function<void(const DirectionParams&, const double* x, double* h, double* c,
                                double* scratch)>;

struct RnnSpec {
  int gates;                          // rows of W per hidden unit: 1 RNN, 3 GRU, 4 LSTM
  bool has_cell;                      // LSTM: initial_c input 6, Y_c output 2, P input 7
  std::vector<std::string> defaults;  // activations of one direction
};

absl::Status run_rnn(KernelContext& ctx, const RnnSpec& spec,
                     const std::function<Cell(const std::vector<Activation>&)>& make_cell) {
  const ir::Node& node = ctx.node;
  const Tensor* x_t = ctx.input(0);
  const Tensor* w_t = ctx.input(1);
  const Tensor* r_t = ctx.input(2);
  if (x_t == nullptr || w_t == nullptr || r_t == nullptr) return invalid(ctx, "missing X, W or R");
  if (!is_float_type(x_t->dtype())) return unimplemented(ctx, "non-float element type");
  if (x_t->rank() != 3 || w_t->rank() != 3 || r_t->rank() != 3)
    return invalid(ctx, "X, W and R must have rank 3");

  const std::string direction = node.attr_string("direction", "forward");
  int directions;
  if (direction == "forward" || direction == "reverse") {
    directions = 1;
  } else if (direction == "bidirectional") {
    directions = 2;
  } else {
    return invalid(ctx, "direction must be forward, reverse or bidirectional");
  }
  const int64_t layout = ctx.opset >= 14 ? node.attr_int("layout", 0) : 0;
  if (layout != 0 && layout != 1) return invalid(ctx, "layout must be 0 or 1");
  const int64_t seq = x_t->dims()[layout == 0 ? 0 : 1];
  const int64_t batch = x_t->dims()[layout == 0 ? 1 : 0];
  const int64_t input_size = x_t->dims()[2];
  const int64_t hidden = r_t->dims()[2];
  const int64_t g = spec.gates;
  if (const auto* a = node.attr("hidden_size"); a != nullptr && a->i() != hidden)
    return invalid(ctx, "hidden_size does not match R");
  if (w_t->dims() != std::vector<int64_t>{directions, g * hidden, input_size})
    return invalid(ctx, "W has the wrong shape");
  if (r_t->dims() != std::vector<int64_t>{directions, g * hidden, hidden})
    return invalid(ctx, "R has the wrong shape");
  const double work = static_cast<double>(seq) * static_cast<double>(batch) * directions *
                      static_cast<double>(g * hidden) * static_cast<double>(input_size + hidden);
  // Refused at once when the run's work budget cannot pay for it; charged step by step below.
  RETURN_IF_ERROR(ctx.afford(work));

  Scratch<double> w = to_doubles(*w_t), r = to_doubles(*r_t), x = to_doubles(*x_t);
  Scratch<double> b(static_cast<size_t>(directions * 2 * g * hidden), 0.0);
  if (const Tensor* b_t = ctx.input(3)) {
    if (b_t->dims() != std::vector<int64_t>{directions, 2 * g * hidden})
      return invalid(ctx, "B has the wrong shape");
    b = to_doubles(*b_t);
  }
  std::vector<int64_t> lens(static_cast<size_t>(batch), seq);
  if (const Tensor* l_t = ctx.input(4)) {
    if (l_t->dims() != std::vector<int64_t>{batch}) return invalid(ctx, "sequence_lens shape");
    for (int64_t i = 0; i < batch; ++i) {
      lens[i] = l_t->get_int64(i);
      if (lens[i] < 0 || lens[i] > seq) return invalid(ctx, "sequence_lens out of range");
    }
  }
  // State tensors [directions, batch, hidden] (layout 0) or [batch, directions, hidden].
  const std::vector<int64_t> state_dims = layout == 0
                                              ? std::vector<int64_t>{directions, batch, hidden}
                                              : std::vector<int64_t>{batch, directions, hidden};
  auto state_index = [&](int64_t d, int64_t bi) {
    return layout == 0 ? (d * batch + bi) * hidden : (bi * directions + d) * hidden;
  };
  Scratch<double> h0(static_cast<size_t>(directions * batch * hidden), 0.0);
  Scratch<double> c0 = h0;
  if (const Tensor* t = ctx.input(5)) {
    if (t->dims() != state_dims) return invalid(ctx, "initial_h has the wrong shape");
    h0 = to_doubles(*t);
  }
  Scratch<double> p;
  if (spec.has_cell) {
    if (const Tensor* t = ctx.input(6)) {
      if (t->dims() != state_dims) return invalid(ctx, "initial_c has the wrong shape");
      c0 = to_doubles(*t);
    }
    if (const Tensor* t = ctx.input(7)) {
      if (t->dims() != std::vector<int64_t>{directions, 3 * hidden})
        return invalid(ctx, "P has the wrong shape");
      p = to_doubles(*t);
    }
  }

  ASSIGN_OR_RETURN(const std::vector<Activation> acts,
                   parse_activations(ctx, spec.defaults, directions));
  const Cell cell = make_cell(acts);

  const int32_t dtype = x_t->dtype();
  Tensor* y = nullptr;
  Tensor* y_h = nullptr;
  Tensor* y_c = nullptr;
  if (node.output(0) != nullptr) {
    ASSIGN_OR_RETURN(
        y, ctx.make_output(0, dtype,
                           layout == 0 ? std::vector<int64_t>{seq, directions, batch, hidden}
                                       : std::vector<int64_t>{batch, seq, directions, hidden}));
  }
  if (node.output(1) != nullptr) {
    ASSIGN_OR_RETURN(y_h, ctx.make_output(1, dtype, state_dims));
  }
  if (spec.has_cell && node.output(2) != nullptr) {
    ASSIGN_OR_RETURN(y_c, ctx.make_output(2, dtype, state_dims));
  }

  Scratch<double> h(static_cast<size_t>(hidden)), c(static_cast<size_t>(hidden));
  Scratch<double> scratch(static_cast<size_t>(2 * g * hidden));
  const size_t per_direction = spec.defaults.size();
  for (int d = 0; d < directions; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    DirectionParams params{w.data() + d * g * hidden * input_size,
                           r.data() + d * g * hidden * hidden,
                           b.data() + d * 2 * g * hidden,
                           b.data() + d * 2 * g * hidden + g * hidden,
                           p.empty() ? nullptr : p.data() + d * 3 * hidden,
                           acts.data() + d * per_direction};
    for (int64_t bi = 0; bi < batch; ++bi) {
      const int64_t s0 = state_index(d, bi);
      std::copy(h0.begin() + s0, h0.begin() + s0 + hidden, h.begin());
      std::copy(c0.begin() + s0, c0.begin() + s0 + hidden, c.begin());
      const int64_t len = lens[bi];
      for (int64_t step = 0; step < len; ++step) {
        spend_work(static_cast<uint64_t>(g * hidden) * static_cast<uint64_t>(input_size + hidden));
        const int64_t t = reverse ? len - 1 - step : step;
        const double* xt =
            x.data() + (layout == 0 ? (t * batch + bi) : (bi * seq + t)) * input_size;
        cell(params, xt, h.data(), c.data(), scratch.data());
        if (y != nullptr) {
          const int64_t base = layout == 0 ? ((t * directions + d) * batch + bi) * hidden
                                           : ((bi * seq + t) * directions + d) * hidden;
          for (int64_t k = 0; k < hidden; ++k) y->set_double(base + k, h[k]);
        }
      }
      for (int64_t k = 0; k < hidden; ++k) {
        if (y_h != nullptr) y_h->set_double(s0 + k, h[k]);
        if (y_c != nullptr) y_c->set_double(s0 + k, c[k]);
      }
    }
  }
  return absl::OkStatus();
}

// Pre-activation clipping (the `clip` attribute), identity when absent.
std::function<double(double)> make_clip(const ir::Node& node) {
  if (node.attr("clip") == nullptr) return [](double v) { return v; };
  const double limit = node.attr_float("clip", 0);
  return [limit](double v) { return std::clamp(v, -limit, limit); };
}

// gates = W x + Wb + R h + Rb (all gates at once).
void gate_inputs(const DirectionParams& p, int64_t rows, int64_t input_size, int64_t hidden,
                 const double* x, const double* h, double* gates) {
  for (int64_t k = 0; k < rows; ++k) gates[k] = p.wb[k] + p.rb[k];
  matvec_add(p.w, rows, input_size, x, gates);
  matvec_add(p.r, rows, hidden, h, gates);
}

absl::Status rnn(KernelContext& ctx) {
  const auto clip = make_clip(ctx.node);
  RnnSpec spec{1, false, {"Tanh"}};
  const int64_t input_size =
      ctx.input(0) && ctx.input(0)->rank() > 0 ? ctx.input(0)->dims().back() : 0;
  return run_rnn(ctx, spec, [&](const std::vector<Activation>&) -> Cell {
    return [&](const DirectionParams& p, const double* x, double* h, double*, double* gates) {
      const int64_t hidden = ctx.input(2)->dims()[2];
      gate_inputs(p, hidden, input_size, hidden, x, h, gates);
      for (int64_t k = 0; k < hidden; ++k) h[k] = p.act[0](clip(gates[k]));
    };
  });
}

absl::Status gru(KernelContext& ctx) {
  const auto clip = make_clip(ctx.node);
  const bool linear_before_reset = ctx.node.attr_int("linear_before_reset", 0) != 0;
  RnnSpec spec{3, false, {"Sigmoid", "Tanh"}};
  const int64_t input_size =
      ctx.input(0) && ctx.input(0)->rank() > 0 ? ctx.input(0)->dims().back() : 0;
  return run_rnn(ctx, spec, [&](const std::vector<Activation>&) -> Cell {
    return [&](const DirectionParams& p, const double* x, double* h, double*, double* scratch) {
      const int64_t hidden = ctx.input(2)->dims()[2];
      // Gate order z, r, h. xs = W x + Wb; rs = R h + Rb for z and r (and h when linear).
      double* xs = scratch;
      double* rs = scratch + 3 * hidden;
      for (int64_t k = 0; k < 3 * hidden; ++k) {
        xs[k] = p.wb[k];
        rs[k] = p.rb[k];
      }
      matvec_add(p.w, 3 * hidden, input_size, x, xs);
      matvec_add(p.r, 2 * hidden, hidden, h, rs);
      double* z = xs;
      double* r = xs + hidden;
      for (int64_t k = 0; k < hidden; ++k) {
        z[k] = p.act[0](clip(z[k] + rs[k]));
        r[k] = p.act[0](clip(r[k] + rs[hidden + k]));
      }
      double* hh = rs + 2 * hidden;  // the candidate's recurrent term
      if (linear_before_reset) {
        matvec_add(p.r + 2 * hidden * hidden, hidden, hidden, h, hh);
        for (int64_t k = 0; k < hidden; ++k) hh[k] *= r[k];
      } else {
        // R_h (r . h) + Rb_h; rs[0..hidden) is free again and holds r . h.
        for (int64_t k = 0; k < hidden; ++k) rs[k] = r[k] * h[k];
        matvec_add(p.r + 2 * hidden * hidden, hidden, hidden, rs, hh);
      }
      for (int64_t k = 0; k < hidden; ++k) {
        const double candidate = p.act[1](clip(xs[2 * hidden + k] + hh[k]));
        h[k] = (1 - z[k]) * candidate + z[k] * h[k];
      }
    };
  });
}

absl::Status lstm(KernelContext& ctx) {
  const auto clip = make_clip(ctx.node);
  const bool input_forget = ctx.node.attr_int("input_forget", 0) != 0;
  RnnSpec spec{4, true, {"Sigmoid", "Tanh", "Tanh"}};
  const int64_t input_size =
      ctx.input(0) && ctx.input(0)->rank() > 0 ? ctx.input(0)->dims().back() : 0;
  return run_rnn(ctx, spec, [&](const std::vector<Activation>&) -> Cell {
    return [&](const DirectionParams& p, const double* x, double* h, double* c, double* gates) {
      const int64_t hidden = ctx.input(2)->dims()[2];
      // Gate order i, o, f, c; peepholes i, o, f.
      gate_inputs(p, 4 * hidden, input_size, hidden, x, h, gates);
      const Activation& f = p.act[0];
      const Activation& g = p.act[1];
      const Activation& hact = p.act[2];
      for (int64_t k = 0; k < hidden; ++k) {
        double gi = gates[k], go = gates[hidden + k], gf = gates[2 * hidden + k],
               gc = gates[3 * hidden + k];
        if (p.p != nullptr) {
          gi += p.p[k] * c[k];
          gf += p.p[2 * hidden + k] * c[k];
        }
        const double i = f(clip(gi));
        const double forget = input_forget ? 1 - i : f(clip(gf));
        const double cand = g(clip(gc));
        c[k] = forget * c[k] + i * cand;
        if (p.p != nullptr) go += p.p[hidden + k] * c[k];
        const double o = f(clip(go));
        h[k] = o * hact(c[k]);
      }
    };
  });
}

// ---------------------------------------------------------------------------------------------
// Dropout: the identity at inference. Training with a nonzero ratio is random, so Unimplemented.

absl::Status dropout(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (x == nullptr) return invalid(ctx, "missing input");
  if (x->dtype() == TensorProto::STRING) return invalid(ctx, "string input");
  bool training = false;
  double ratio = 0.5;
  if (ctx.opset < 7) {
    training = ctx.node.attr_int("is_test", 0) == 0;
    ratio = ctx.node.attr_float("ratio", 0.5f);
  } else if (ctx.opset < 12) {
    ratio = ctx.node.attr_float("ratio", 0.5f);
  } else {
    if (const Tensor* r = ctx.input(1)) {
      if (r->size() != 1) return invalid(ctx, "ratio must be a scalar");
      ratio = r->get_double(0);
    }
    if (const Tensor* t = ctx.input(2)) {
      if (t->size() != 1) return invalid(ctx, "training_mode must be a scalar");
      training = t->get_int64(0) != 0;
    }
  }
  // Training with ratio 0 keeps every element and scales by 1 / (1 - 0).
  if (training && ratio != 0) return unimplemented(ctx, "random dropout in training mode");
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, x->dtype(), x->dims()));
  std::memcpy(out->data<char>(), x->data<char>(), x->bytes());
  if (ctx.node.output(1) != nullptr) {
    // The mask is bool from opset 10, the data type before.
    const int32_t mask_type = ctx.opset >= 10 ? TensorProto::BOOL : x->dtype();
    ASSIGN_OR_RETURN(Tensor * mask, ctx.make_output(1, mask_type, x->dims()));
    for (int64_t i = 0; i < x->size(); ++i) mask->set_double(i, 1.0);
  }
  return absl::OkStatus();
}

}  // namespace

void register_rnn_kernels() {
  register_kernel("RNN", 1, 0, rnn);
  register_kernel("GRU", 1, 0, gru);
  register_kernel("LSTM", 1, 0, lstm);
  register_kernel("Dropout", 1, 0, dropout);
}

}  // namespace graft::eval
