#include "core/eval/verify.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include <absl/strings/ascii.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/base/status.h"
#include "core/eval/executor.h"
#include "core/ir/op_params.h"
#include "core/ir/tensor.h"

namespace graft::eval {

namespace {

constexpr std::string_view kCannotRun = "the evaluator cannot run ";

std::string dims_string(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

// A dim_param that is a sum of names and integers, as exporters write tied dims
// ("past_sequence_length + 1", "past_sequence_length + sequence_length"): its terms with their
// signs, or nullopt for a plain name (or anything else).
struct DimTerm {
  int sign;
  std::string name;  // empty: a constant
  int64_t value;
};
std::optional<std::vector<DimTerm>> dim_expression(const std::string& param) {
  if (param.find_first_of("+-") == std::string::npos) return std::nullopt;
  std::vector<DimTerm> terms;
  int sign = 1;
  size_t i = 0;
  auto skip = [&] {
    while (i < param.size() && param[i] == ' ') ++i;
  };
  while (true) {
    skip();
    const size_t start = i;
    while (i < param.size() && (std::isalnum(static_cast<unsigned char>(param[i])) ||
                                param[i] == '_' || param[i] == '.'))
      ++i;
    const std::string term = param.substr(start, i - start);
    if (term.empty() || term.size() > 18) return std::nullopt;
    if (std::all_of(term.begin(), term.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      // Bounded so that the sum of at most 8 terms cannot overflow (dims are at most 2^31).
      const int64_t v = std::stoll(term);
      if (v > (int64_t{1} << 31)) return std::nullopt;
      terms.push_back({sign, "", v});
    } else if (std::isdigit(static_cast<unsigned char>(term[0])))
      return std::nullopt;
    else
      terms.push_back({sign, term, 0});
    skip();
    if (i == param.size()) break;
    if (param[i] != '+' && param[i] != '-') return std::nullopt;
    sign = param[i] == '+' ? 1 : -1;
    ++i;
  }
  if (terms.size() < 2 || terms.size() > 8) return std::nullopt;
  return terms;
}

// How the random inputs' symbolic dims are sized in one attempt: every one default_dim, or by
// role (VerifyOptions::representative_dims) divided by role_divisor.
struct Sizing {
  int64_t default_dim = 1;
  int64_t role_divisor = 0;  // 0: default_dim for all
  // Sequence and time dims (role size 128) times this: tried when a window (a convolution's
  // receptive field, a pool) is larger than the input, as an audio front-end's is on 128
  // samples; 125 gives 16000, one second at 16 kHz.
  int64_t time_multiplier = 1;
  // A tie the graph implies between dims it names apart: `tied` = the sum of `tie` (a decoder's
  // total_sequence = past_sequence + sequence). Empty: none.
  std::string tied = {};
  std::vector<DimTerm> tie = {};
};

// The ties to try when the original does not run at role sizes for a reason other than length
// (a shape mismatch): one dim the sum of two others, among the dim_params of the main graph's
// inputs that are not leading (batch) dims, given or expressions; the last dim of an integer
// input (a mask's length) first. Only for 3 to 5 such names (at most 30 ties).
std::vector<std::pair<std::string, std::vector<DimTerm>>> dim_ties(const ir::Model& model,
                                                                   const VerifyOptions& options) {
  std::vector<std::string> names, masks;
  std::set<std::string> leading;
  for (const auto& in : model.graph().inputs()) {
    if (in.value->is_initializer() || !in.info.type().has_tensor_type() ||
        options.shapes.count(in.value->name()))
      continue;
    const auto& tt = in.info.type().tensor_type();
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      if (!d.has_dim_param() || d.dim_param().empty() || options.dims.count(d.dim_param()) ||
          dim_expression(d.dim_param()))
        continue;
      if (i == 0 && tt.shape().dim_size() >= 2) leading.insert(d.dim_param());
      if (std::find(names.begin(), names.end(), d.dim_param()) == names.end())
        names.push_back(d.dim_param());
      if (i == tt.shape().dim_size() - 1 && is_integer_type(tt.elem_type()))
        masks.push_back(d.dim_param());
    }
  }
  names.erase(std::remove_if(names.begin(), names.end(),
                             [&](const std::string& n) { return leading.count(n) > 0; }),
              names.end());
  if (names.size() < 3 || names.size() > 5) return {};
  std::stable_partition(names.begin(), names.end(), [&](const std::string& n) {
    return std::find(masks.begin(), masks.end(), n) != masks.end();
  });
  std::vector<std::pair<std::string, std::vector<DimTerm>>> ties;
  for (size_t c = 0; c < names.size(); ++c)
    for (size_t a = 0; a < names.size(); ++a)
      for (size_t b = a + 1; b < names.size(); ++b)
        if (a != c && b != c) ties.push_back({names[c], {{1, names[a], 0}, {1, names[b], 0}}});
  return ties;
}

// Whether a failed run of the original says its inputs were too short: a window larger than
// the input, or outputs that are all empty (a front-end that drops its last frame).
bool too_short(const absl::Status& error) {
  return absl::StrContains(error.message(), "window larger than") ||
         absl::StrContains(error.message(), "every output is empty");
}

// The sizes tried after `failed` when its inputs were too short: longer sequences and time axes,
// not smaller ones; none otherwise.
std::vector<Sizing> longer_sizes(const Sizing& failed, const absl::Status& error) {
  if (!too_short(error) || failed.time_multiplier > 1) return {};
  if (failed.role_divisor > 0) return {{1, 1, 8}, {1, 1, 125}};
  return {{1024, 0, 1}, {16384, 0, 1}};
}

// The size of symbolic dim `index` of an input by its role: a leading (batch) dim 1, an image's
// height and width (a rank-4 float input with 1, 3 or 4 channels, NCHW or NHWC) 224, any other
// (sequence, time, count) 128.
int64_t role_size(const onnx::TypeProto::Tensor& tt, int index) {
  const int rank = tt.shape().dim_size();
  if (index == 0 && rank >= 2) return 1;
  if (rank == 4 && is_float_type(tt.elem_type())) {
    auto fixed = [&](int i) {
      const auto& d = tt.shape().dim(i);
      return d.has_dim_value() ? d.dim_value() : -1;
    };
    auto channels = [&](int i) { return fixed(i) == 1 || fixed(i) == 3 || fixed(i) == 4; };
    if (channels(1) && index >= 2) return 224;
    if (!channels(1) && channels(3) && (index == 1 || index == 2)) return 224;
  }
  return 128;
}

// Dims of a main graph input: an explicit shape, else the declared dims with symbolic ones
// resolved from the options, then by `sizing` (a dim_param keeps the size it first got, in
// `params`).
absl::StatusOr<std::vector<int64_t>> input_dims(const std::string& name,
                                                const onnx::TypeProto::Tensor& tt,
                                                const VerifyOptions& options, Sizing sizing,
                                                std::map<std::string, int64_t>& params,
                                                bool* defaulted) {
  if (auto it = options.shapes.find(name); it != options.shapes.end()) {
    if (tt.has_shape() && tt.shape().dim_size() != static_cast<int>(it->second.size()))
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' has rank ",
                                                     tt.shape().dim_size(), ", shape ",
                                                     dims_string(it->second), " given"));
    return it->second;
  }
  if (!tt.has_shape())
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "' has unknown rank; give its shape"));
  std::vector<int64_t> dims;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0) {
      dims.push_back(d.dim_value());
      continue;
    }
    auto it = d.has_dim_param() ? options.dims.find(d.dim_param()) : options.dims.end();
    if (it != options.dims.end()) {
      dims.push_back(it->second);
      continue;
    }
    *defaulted = true;
    if (auto p = d.has_dim_param() ? params.find(d.dim_param()) : params.end(); p != params.end()) {
      dims.push_back(p->second);
      continue;
    }
    int64_t size = sizing.default_dim;
    if (sizing.role_divisor > 0) {
      const int64_t role = role_size(tt, static_cast<int>(dims.size()));
      size = std::max<int64_t>(
          1, (role == 128 ? role * sizing.time_multiplier : role) / sizing.role_divisor);
    }
    // A sum of other dims, written in the name ("past_sequence_length + 1") or a tie being tried
    // (Sizing::tie): each named term takes its own size (given, already chosen, or this dim's
    // role size, shared from then on), the sum is the dim.
    std::optional<std::vector<DimTerm>> terms;
    if (d.has_dim_param())
      terms = !sizing.tie.empty() && d.dim_param() == sizing.tied ? sizing.tie
                                                                  : dim_expression(d.dim_param());
    if (terms) {
      int64_t sum = 0;
      for (const DimTerm& t : *terms) {
        int64_t v = t.value;
        if (!t.name.empty()) {
          auto given = options.dims.find(t.name);
          v = given != options.dims.end() ? given->second
                                          : params.try_emplace(t.name, size).first->second;
        }
        sum += t.sign * v;
      }
      if (sum >= 1 && sum <= (int64_t{1} << 31)) size = sum;
    }
    if (d.has_dim_param()) params[d.dim_param()] = size;
    dims.push_back(size);
  }
  return dims;
}

// The values an integer input takes by what the model does with it: indices into a constant
// table (Gather's, along its axis; RotaryEmbedding's position ids, the caches' rows) span the
// table; indices into a table computed at run time (a rotary cache sliced to the total length,
// as Hugging Face decoders do) are positions, 0, 1, ... along the input's last axis (capped at
// the rows of the constant the table is sliced from, when known), which every such table
// covers; a mask (1 - m, a Where condition, a name with "mask") is 0 or 1; others [0, int_max].
// Followed through casts and ops that move values.
struct IntRange {
  int64_t lo = 0, hi = 0;
  bool positions = false;
  // For positions into a table computed at run time: that table and the axis read.
  const ir::Value* table = nullptr;
  int64_t axis = 0;
  std::string why{};  // the use that says so, for the report (InputNote)
  // A selector (a scalar compared with constants: a sample rate, a mode id): the values the
  // graph tests, taken in turn by the input sets (odd sets, when one value is tested for
  // equality, take half of it: the other branch).
  std::vector<int64_t> selects{};
  bool mask() const { return !positions && lo == 0 && hi == 1; }
};

// The rows along `axis` of the constant a table computed at run time is cut from (through
// Slice and Cast, which keep the axes), or -1.
int64_t source_rows(const ir::Value* table, int64_t axis, int depth) {
  for (; table != nullptr && depth > 0; --depth) {
    if (const onnx::TensorProto* c = ir::constant_header(table)) {
      if (axis < 0) axis += c->dims_size();
      return axis >= 0 && axis < c->dims_size() ? c->dims(static_cast<int>(axis)) : -1;
    }
    const ir::Node* p = table->producer();
    if (p == nullptr || !p->is_onnx_domain() || !(p->is("Slice") || p->is("Cast"))) return -1;
    table = p->input(0);
  }
  return -1;
}

// True when `v` is declared with static dims holding one element (a scalar, [1], [1, 1]).
bool one_element(const ir::Value* v) {
  const onnx::TypeProto* t = v->type();
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return false;
  for (const auto& d : t->tensor_type().shape().dim())
    if (!d.has_dim_value() || d.dim_value() != 1) return false;
  return true;
}

std::optional<IntRange> range_by_use(const ir::Value* v, int depth) {
  if (depth == 0) return std::nullopt;
  for (const auto& u : v->uses()) {
    const ir::Node* n = u.node;
    // Position ids: standard RotaryEmbedding's input 3 (caches at 1), com.microsoft's input 1
    // (caches at 2), with 2-D caches (positions, width).
    const bool ms = n->domain() == "com.microsoft";
    if (n->op_type() == "RotaryEmbedding" && (n->is_onnx_domain() || ms) &&
        u.index == (ms ? 1 : 3)) {
      const onnx::TensorProto* cache = ir::constant_header(n->input(ms ? 2 : 1));
      if (cache && cache->dims_size() == 2 && cache->dims(0) > 0)
        return IntRange{.hi = cache->dims(0) - 1,
                        .why = absl::StrCat("position ids of ", n->op_type(), " (a cache of ",
                                            cache->dims(0), " rows)")};
    }
    if (!n->is_onnx_domain()) continue;
    if (n->is("Gather") && u.index == 1 && n->input(0)) {
      const onnx::TensorProto* table = ir::constant_header(n->input(0));
      if (!table) {
        const int64_t rows = source_rows(n->input(0), n->attr_int("axis", 0), 8);
        if (rows == 0) continue;
        return IntRange{.hi = rows > 0 ? rows - 1 : std::numeric_limits<int64_t>::max(),
                        .positions = true,
                        .table = n->input(0),
                        .axis = n->attr_int("axis", 0),
                        .why = absl::StrCat("positions into '", n->input(0)->name(),
                                            "', a table computed at run time")};
      }
      int64_t axis = n->attr_int("axis", 0);
      if (axis < 0) axis += table->dims_size();
      if (axis >= 0 && axis < table->dims_size() && table->dims(static_cast<int>(axis)) > 0)
        return IntRange{.hi = table->dims(static_cast<int>(axis)) - 1,
                        .why = absl::StrCat("indices into '", n->input(0)->name(), "' (",
                                            table->dims(static_cast<int>(axis)), " rows)")};
    }
    if ((n->is("Equal") || n->is("Greater") || n->is("Less") || n->is("GreaterOrEqual") ||
         n->is("LessOrEqual")) &&
        n->inputs().size() == 2 && one_element(v)) {
      const ir::Value* other = n->input(1 - u.index);
      auto c = other ? ir::constant_ints(other) : std::nullopt;  // integer inputs: int constants
      if (c && c->size() == 1 && std::llabs((*c)[0]) < (int64_t{1} << 60)) {
        const int64_t k = (*c)[0];
        // The other branch: for x > k (or k < x) and x <= k, k + 1; for x < k and x >= k, k - 1.
        const bool above = (u.index == 0) == (n->is("Greater") || n->is("LessOrEqual"));
        return IntRange{.lo = k,
                        .hi = k,
                        .why = absl::StrCat("a selector: ", n->op_type(), " '", n->name(),
                                            "' tests it against ", k),
                        .selects = {k, n->is("Equal") ? k / 2
                                       : above        ? k + 1
                                                      : k - 1}};
      }
    }
    if (n->is("Where") && u.index == 0)
      return IntRange{.hi = 1, .why = "a mask: a Where condition"};
    if (n->is("Sub") && u.index == 1 && n->input(0)) {
      auto values = ir::constant_doubles(n->input(0));
      if (values && values->size() == 1 && (*values)[0] == 1)
        return IntRange{.hi = 1, .why = "a mask: read as 1 - m"};
    }
    if ((n->is("Cast") || (ir::moves_values(*n) && u.index == 0)) && n->output(0))
      if (auto r = range_by_use(n->output(0), depth - 1)) return r;
  }
  return std::nullopt;
}

IntRange int_range(const ir::Value* input, const VerifyOptions& options) {
  if (auto r = range_by_use(input, 8)) return *r;
  if (absl::StrContains(absl::AsciiStrToLower(input->name()), "mask"))
    return {.hi = 1, .why = "a mask (by its name)"};
  return {.hi = std::max<int64_t>(0, options.int_max), .why = "no use says more"};
}

absl::StatusOr<Tensor> make_input(const ir::Value* input, const onnx::TypeProto* type,
                                  const VerifyOptions& options, Sizing sizing,
                                  std::map<std::string, int64_t>& params, bool* defaulted,
                                  std::mt19937& rng, int trial, std::string* how) {
  const std::string& name = input->name();
  if (!type || !type->has_tensor_type() || !type->tensor_type().has_elem_type())
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is not a typed tensor"));
  const auto& tt = type->tensor_type();
  const int32_t dtype = tt.elem_type();
  if (!is_float_type(dtype) && !is_integer_type(dtype) && dtype != onnx::TensorProto::BOOL)
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' has element type ",
                                                   onnx::TensorProto::DataType_Name(dtype),
                                                   " (random inputs are numeric or bool)"));
  ASSIGN_OR_RETURN(auto dims, input_dims(name, tt, options, sizing, params, defaulted));
  for (int64_t d : dims)
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("input '", name, "': negative dim"));
  ASSIGN_OR_RETURN(Tensor t, Tensor::zeros(dtype, dims, options.max_tensor_bytes));
  auto fixed = options.values.find(name);
  auto given = options.ranges.find(name);
  const bool ranged = given != options.ranges.end();
  std::uniform_real_distribution<double> real(ranged ? given->second.first : -options.float_range,
                                              ranged ? given->second.second : options.float_range);
  // Non-negative and small by default, so integer inputs also work as indices and counts; by
  // use where the model says more (int_range); as given (ranges) before all of that.
  const IntRange range =
      ranged ? IntRange{.lo = static_cast<int64_t>(std::ceil(given->second.first)),
                        .hi = static_cast<int64_t>(std::floor(given->second.second)),
                        .why = "given"}
      : is_integer_type(dtype) ? int_range(input, options)
                               : IntRange{0, options.int_max};
  std::uniform_int_distribution<int64_t> integer(range.lo, std::max(range.lo, range.hi));
  std::uniform_int_distribution<int64_t> boolean(0, 1);
  // A mask is what a tokenizer makes: ones, then padding zeros in at most the last half of each
  // row (its last dim). Random 0/1 would mask whole rows of attention, which no input does and
  // which makes a softmax NaN.
  if (fixed == options.values.end() && !ranged && is_integer_type(dtype) && range.positions) {
    const int64_t row = t.dims().empty() ? 1 : std::max<int64_t>(t.dims().back(), 1);
    for (int64_t i = 0; i < t.size(); ++i) t.set_int64(i, std::min(i % row, range.hi));
    *how = absl::StrCat("positions 0..", std::min(row - 1, range.hi),
                        " along the last axis: ", range.why);
    return t;
  }
  if (fixed == options.values.end() && !ranged && !range.selects.empty()) {
    const int64_t value = range.selects[static_cast<size_t>(trial) % range.selects.size()];
    for (int64_t i = 0; i < t.size(); ++i) t.set_int64(i, value);
    *how = absl::StrCat(absl::StrJoin(range.selects, ", then "),
                        ", in turn over the input sets (each branch): ", range.why);
    return t;
  }
  if (fixed == options.values.end() && !ranged && is_integer_type(dtype) && range.mask()) {
    const int64_t row = t.dims().empty() ? 1 : std::max<int64_t>(t.dims().back(), 1);
    std::uniform_int_distribution<int64_t> padding(0, row / 2);
    int64_t keep = row;
    for (int64_t i = 0; i < t.size(); ++i) {
      if (i % row == 0) keep = row - padding(rng);
      t.set_int64(i, i % row < keep ? 1 : 0);
    }
    *how =
        absl::StrCat("ones, then padding zeros in at most the last half of each row: ", range.why);
    return t;
  }
  if (fixed != options.values.end())
    *how = absl::StrCat("value ", fixed->second, " (given)");
  else if (ranged)
    *how = is_float_type(dtype)
               ? absl::StrCat("uniform in [", given->second.first, ", ", given->second.second,
                              ") (given)")
               : absl::StrCat("integers in [", range.lo, ", ", range.hi, "] (given)");
  else if (is_float_type(dtype))
    *how = absl::StrCat("uniform in [", -options.float_range, ", ", options.float_range, ")");
  else if (dtype == onnx::TensorProto::BOOL)
    *how = "false or true";
  else
    *how = absl::StrCat("integers in [", range.lo, ", ", range.hi, "]: ", range.why);
  for (int64_t i = 0; i < t.size(); ++i) {
    if (fixed != options.values.end()) {
      if (is_float_type(dtype))
        t.set_double(i, fixed->second);
      else
        t.set_int64(i, static_cast<int64_t>(fixed->second));
    } else if (is_float_type(dtype)) {
      t.set_double(i, real(rng));
    } else if (dtype == onnx::TensorProto::BOOL) {
      t.set_int64(i, boolean(rng));
    } else {
      t.set_int64(i, integer(rng));
    }
  }
  return t;
}

// The sizes tried, in order, until the original runs: by role from the full sizes down
// (representative_dims), else the first of 1, 16, 64, 256 (a window larger than the input means
// the dims are too small), or default_dim alone. By role, one size for every dim comes last:
// dims the graph ties without naming them alike (silero_vad's state [2, ?, 128] and its audio
// [?, ?], both batch) only agree when all dims are one size.
std::vector<Sizing> sizes_to_try(const VerifyOptions& options) {
  if (options.default_dim > 0) return {{options.default_dim, 0}};
  if (options.representative_dims)
    return {{1, 1}, {1, 4}, {1, 16}, {1, 0}, {16, 0}, {64, 0}, {256, 0}};
  return {{1, 0}, {16, 0}, {64, 0}, {256, 0}};
}

// The random inputs of input set `trial` at `sizing`, into `feeds` (their bytes added to
// `input_bytes`); `dims_used`, when given, gets "name=[dims], ...".
absl::Status make_feeds(const ir::Model& original, const VerifyOptions& options, Sizing sizing,
                        int trial, std::map<std::string, int64_t>& params,
                        std::map<std::string, Tensor>& feeds, uint64_t& input_bytes,
                        bool& defaulted, std::string* dims_used,
                        std::vector<InputNote>* notes = nullptr) {
  std::mt19937 rng(options.seed + static_cast<uint32_t>(trial));
  for (const auto& in : original.graph().inputs()) {
    // An initializer listed as an input keeps its default in both models.
    if (in.value->is_initializer()) continue;
    const onnx::TypeProto* type = in.info.has_type() ? &in.info.type() : in.value->type();
    std::string how;
    ASSIGN_OR_RETURN(Tensor t, make_input(in.value, type, options, sizing, params, &defaulted, rng,
                                          trial, &how));
    if (notes) notes->push_back({in.value->name(), t.dims(), std::move(how)});
    input_bytes += t.bytes();
    if (dims_used)
      absl::StrAppend(dims_used, dims_used->empty() ? "" : ", ", in.value->name(), "=",
                      dims_string(t.dims()));
    feeds.emplace(in.value->name(), std::move(t));
  }
  return absl::OkStatus();
}

// Positions into a table the graph computes at run time (a rotary cache sliced to the total
// length, past + sequence): which inputs they are, and the table each indexes.
struct PositionInput {
  std::string name;
  const ir::Value* table;
  int64_t axis;
};
std::vector<PositionInput> position_inputs(const ir::Model& original,
                                           const VerifyOptions& options) {
  std::vector<PositionInput> out;
  for (const auto& in : original.graph().inputs()) {
    const ir::Value* v = in.value;
    if (v->is_initializer() || options.values.count(v->name()) || options.ranges.count(v->name()))
      continue;
    const onnx::TypeProto* type = in.info.has_type() ? &in.info.type() : v->type();
    if (!type || !type->has_tensor_type() || !is_integer_type(type->tensor_type().elem_type()))
      continue;
    const IntRange r = int_range(v, options);
    if (r.positions && r.table) out.push_back({v->name(), r.table, r.axis});
  }
  return out;
}

// Shifts positions so that a sequence of `seq` tokens sits at the end of a table of `rows`:
// arange(rows - seq, rows) per row, which is arange(past, past + seq) when the table is cut to
// the total length. Positions that already reach the end are left as they are. Returns the first
// position, 0 when nothing moved.
int64_t shift_positions(Tensor& t, int64_t rows) {
  const int64_t seq = t.dims().empty() ? 1 : std::max<int64_t>(t.dims().back(), 1);
  const int64_t offset = rows - seq;
  if (offset <= 0) return 0;
  for (int64_t i = 0; i < t.size(); ++i) t.set_int64(i, offset + i % seq);
  return offset;
}

VerifyResult not_verifiable(const absl::Status& status, std::string_view what) {
  VerifyResult r;
  r.status = VerifyStatus::kNotVerifiable;
  r.unsupported_op = unsupported_op_of(status);
  if (!r.unsupported_op.empty())
    r.message = absl::StrCat(std::string(what), " uses ", r.unsupported_op,
                             ", which the reference evaluator cannot run (",
                             std::string(status.message()), ")");
  else
    r.message = absl::StrCat(std::string(what), ": ", std::string(status.message()));
  return r;
}

// Compares one output; updates the worst differences in `r`. Returns a description of the
// first disagreement beyond tolerance, or "".
// Sums for one output's OutputError over the input sets.
struct ErrorSums {
  double max_abs = 0, max_magnitude = 0, dot = 0, aa = 0, bb = 0;
  bool non_finite = false;  // a difference involving NaN or infinity
};

std::string compare(const std::string& name, const Tensor& a, const Tensor& b,
                    const VerifyOptions& options, VerifyResult& r, ErrorSums* sums, bool lossy) {
  const bool both_float = is_float_type(a.dtype()) && is_float_type(b.dtype());
  if (a.dtype() != b.dtype() && !(lossy && both_float))
    return absl::StrCat("output '", name, "': element type ",
                        onnx::TensorProto::DataType_Name(a.dtype()), " became ",
                        onnx::TensorProto::DataType_Name(b.dtype()));
  if (a.dims() != b.dims())
    return absl::StrCat("output '", name, "': shape ", dims_string(a.dims()), " became ",
                        dims_string(b.dims()));
  if (a.dtype() == onnx::TensorProto::STRING) {
    for (size_t i = 0; i < a.strings().size(); ++i)
      if (a.strings()[i] != b.strings()[i])
        return absl::StrCat("output '", name, "' [", i, "]: \"", a.strings()[i], "\" became \"",
                            b.strings()[i], "\"");
    return "";
  }
  std::string first;
  const bool floats = is_float_type(a.dtype());
  // Half-precision outputs carry ~3 (float16) or ~2 (bfloat16) significant digits: a tolerance
  // below two of their units in the last place would flag pure rounding.
  double rtol = options.rtol;
  if (a.dtype() == onnx::TensorProto::FLOAT16) rtol = std::max(rtol, 2.0 / 1024);
  if (a.dtype() == onnx::TensorProto::BFLOAT16) rtol = std::max(rtol, 2.0 / 128);
  for (int64_t i = 0; i < a.size(); ++i) {
    if (!floats) {
      if (a.get_int64(i) != b.get_int64(i) && first.empty())
        first = absl::StrCat("output '", name, "' [", i, "]: ", a.get_int64(i), " became ",
                             b.get_int64(i));
      continue;
    }
    const double x = a.get_double(i), y = b.get_double(i);
    if (sums != nullptr) {
      if (std::isfinite(x)) sums->max_magnitude = std::max(sums->max_magnitude, std::abs(x));
      if (std::isfinite(x) && std::isfinite(y)) {
        sums->dot += x * y;
        sums->aa += x * x;
        sums->bb += y * y;
      }
    }
    if ((std::isnan(x) && std::isnan(y)) || x == y) continue;
    const double diff = std::isfinite(x) && std::isfinite(y) ? std::abs(x - y) : INFINITY;
    if (sums != nullptr) {
      if (std::isfinite(diff))
        sums->max_abs = std::max(sums->max_abs, diff);
      else
        sums->non_finite = true;
    }
    const double rel = diff / std::max(std::abs(x), 1e-30);
    if (diff > r.max_abs_diff || std::isnan(diff)) {
      r.max_abs_diff = std::isnan(diff) ? INFINITY : diff;
      r.worst_output = name;
    }
    r.max_rel_diff = std::max(r.max_rel_diff, std::isnan(rel) ? INFINITY : rel);
    if (!lossy && !(diff <= options.atol + rtol * std::abs(x)) && first.empty())
      first = absl::StrCat("output '", name, "' [", i, "]: ", x, " became ", y);
  }
  return first;
}

OutputError error_of(const std::string& name, const ErrorSums& s) {
  OutputError e;
  e.name = name;
  e.max_abs = s.non_finite ? INFINITY : s.max_abs;
  e.rel = e.max_abs == 0 ? 0 : e.max_abs / std::max(s.max_magnitude, 1e-30);
  if (s.aa == 0 && s.bb == 0)
    e.cosine = 1;
  else if (s.aa == 0 || s.bb == 0)
    e.cosine = 0;
  else
    e.cosine = std::clamp(s.dot / (std::sqrt(s.aa) * std::sqrt(s.bb)), -1.0, 1.0);
  return e;
}

}  // namespace

void set_memory_budget(VerifyOptions* options, uint64_t max_live_bytes) {
  options->max_live_bytes = max_live_bytes;
  options->max_tensor_bytes = std::min(options->max_tensor_bytes, max_live_bytes);
}

absl::Status validate(const VerifyOptions& o) {
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  auto dim_ok = [&](int64_t d) { return d >= 0 && d <= kMaxDim; };
  if (o.default_dim < 0 || o.default_dim > kMaxDim)
    return absl::InvalidArgumentError(absl::StrCat("verify: default dim must be 1..", kMaxDim,
                                                   " (0: automatic), got ", o.default_dim));
  for (const auto& [name, d] : o.dims)
    if (!dim_ok(d))
      return absl::InvalidArgumentError(
          absl::StrCat("verify: dim '", name, "' must be 0..", kMaxDim, ", got ", d));
  for (const auto& [name, shape] : o.shapes)
    for (int64_t d : shape)
      if (!dim_ok(d))
        return absl::InvalidArgumentError(absl::StrCat("verify: shape of '", name, "' has dim ", d,
                                                       " (must be 0..", kMaxDim, ")"));
  for (const auto& [name, range] : o.ranges) {
    constexpr double kMaxValue = 9223372036854775807.0;  // 2^63: integer inputs take them too
    const auto [low, high] = range;
    if (!(std::fabs(low) < kMaxValue) || !(std::fabs(high) < kMaxValue) || !(low <= high) ||
        !std::isfinite(high - low))
      return absl::InvalidArgumentError(
          absl::StrCat("verify: the range of '", name.substr(0, 200), "' must be LOW <= HIGH, ",
                       "finite numbers of magnitude below 2^63, got [", low, ", ", high, "]"));
  }
  if (o.max_trials < 0 || o.max_trials > kMaxInputSets)
    return absl::InvalidArgumentError(
        absl::StrCat("verify: max_trials must be 0..", kMaxInputSets, ", got ", o.max_trials));
  if (o.trials < 1 || o.trials > kMaxInputSets)
    return absl::InvalidArgumentError(
        absl::StrCat("verify: trials must be 1..", kMaxInputSets, ", got ", o.trials));
  if (o.input_sets.size() > static_cast<size_t>(kMaxInputSets))
    return absl::InvalidArgumentError(
        absl::StrCat("verify: at most ", kMaxInputSets, " input sets, got ", o.input_sets.size()));
  if (!(o.rtol >= 0) || !(o.atol >= 0))
    return absl::InvalidArgumentError("verify: tolerances must be non-negative numbers");
  if (!(o.float_range >= 0) || o.int_max < 0)
    return absl::InvalidArgumentError("verify: input ranges must be non-negative");
  return absl::OkStatus();
}

absl::StatusOr<Tensor> parse_input_tensor(std::string_view bytes, uint64_t max_bytes,
                                          std::string* name) {
  onnx::TensorProto proto;
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return absl::InvalidArgumentError("not a serialized onnx.TensorProto");
  if (name != nullptr) *name = proto.name();
  if (ir::is_external(proto) || proto.external_data_size() > 0)
    return absl::InvalidArgumentError(
        "the tensor refers to external data; input data must be inline");
  if (proto.has_segment()) return absl::InvalidArgumentError("segmented tensors are not supported");
  // Values the message carries, counted so that any tensor consistent with its dims carries at
  // least one per element (raw bytes, or typed entries, or strings).
  uint64_t held = proto.raw_data().size();
  held += static_cast<uint64_t>(proto.float_data_size()) + proto.double_data_size() +
          proto.int32_data_size() + proto.int64_data_size() + proto.uint64_data_size() +
          proto.string_data_size();
  uint64_t count = 1;
  bool zero = false, over = false;
  for (int64_t d : proto.dims()) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("negative dim ", d));
    if (d == 0) zero = true;
    if (!over && d > 0 && count > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
      over = true;
    else if (!over)
      count *= static_cast<uint64_t>(d);
  }
  if (zero) count = 0, over = false;
  if (over || count > held)
    return absl::InvalidArgumentError(
        absl::StrCat("dims [", absl::StrJoin(proto.dims(), ","), "] declare ",
                     over ? std::string("more than 2^64") : absl::StrCat(count),
                     " elements, but the tensor holds data for at most ", held));
  auto t = Tensor::from_proto(proto, max_bytes);
  if (!t.ok()) {
    // Inconsistent data (wrong raw_data length or field count), an unsupported type, or more
    // than max_bytes: all the sender's to fix.
    return absl::InvalidArgumentError(std::string(t.status().message()));
  }
  return t;
}

namespace {

// A client's name in a message, cut short.
std::string quoted(const std::string& name) {
  return absl::StrCat("'", name.size() > 200 ? name.substr(0, 200) + "..." : name, "'");
}

std::string dtype_name(int32_t dtype) {
  if (ir::is_4bit(dtype)) return dtype == ir::kInt4 ? "INT4" : "UINT4";
  return onnx::TensorProto::DataType_IsValid(dtype) ? onnx::TensorProto::DataType_Name(dtype)
                                                    : absl::StrCat(dtype);
}

}  // namespace

std::string input_set_label(const std::string& what) {
  return what == "verify" ? "verify input set" : absl::StrCat(what, " set");
}

absl::Status check_input_sets(const ir::Model& model,
                              const std::vector<std::map<std::string, Tensor>>& sets,
                              const std::string& what) {
  if (sets.size() > static_cast<size_t>(kMaxInputSets))
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": at most ", kMaxInputSets, " input sets, got ", sets.size()));
  const ir::Graph& g = model.graph();
  for (size_t s = 0; s < sets.size(); ++s) {
    const std::string where = absl::StrCat(input_set_label(what), " ", s + 1);
    for (const auto& [name, tensor] : sets[s]) {
      bool input = false, initializer = false;
      for (const auto& in : g.inputs())
        if (in.value->name() == name) (in.value->is_initializer() ? initializer : input) = true;
      if (!input)
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": ", quoted(name),
            initializer ? " is an initializer (it keeps its value), not an input to feed"
                        : " is not an input of the model"));
    }
    // dim_param -> (size, the input that gave it)
    std::map<std::string, std::pair<int64_t, std::string>> symbols;
    for (const auto& in : g.inputs()) {
      if (in.value->is_initializer()) continue;
      const std::string& name = in.value->name();
      const std::string prefix = absl::StrCat(where, ", input ", quoted(name), ": ");
      auto it = sets[s].find(name);
      if (it == sets[s].end())
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": no tensor for input ", quoted(name),
                         " (every input that is not an initializer needs one)"));
      const Tensor& t = it->second;
      const onnx::TypeProto* type = in.info.has_type() ? &in.info.type() : in.value->type();
      if (type == nullptr || !type->has_tensor_type())
        return absl::InvalidArgumentError(
            absl::StrCat(prefix, "the model does not declare it a tensor"));
      const auto& tt = type->tensor_type();
      if (tt.elem_type() != onnx::TensorProto::UNDEFINED && tt.elem_type() != t.dtype())
        return absl::InvalidArgumentError(
            absl::StrCat(prefix, "element type ", dtype_name(t.dtype()), ", the model declares ",
                         dtype_name(tt.elem_type())));
      if (!tt.has_shape()) continue;
      if (tt.shape().dim_size() != t.rank())
        return absl::InvalidArgumentError(
            absl::StrCat(prefix, "shape ", dims_string(t.dims()), " has rank ", t.rank(),
                         ", the model declares rank ", tt.shape().dim_size()));
      for (int i = 0; i < tt.shape().dim_size(); ++i) {
        const auto& d = tt.shape().dim(i);
        const int64_t size = t.dims()[static_cast<size_t>(i)];
        if (d.has_dim_value() && d.dim_value() >= 0) {
          if (size != d.dim_value())
            return absl::InvalidArgumentError(absl::StrCat(prefix, "shape ", dims_string(t.dims()),
                                                           ": dim ", i, " is ", size,
                                                           ", the model declares ", d.dim_value()));
        } else if (d.has_dim_param() && !d.dim_param().empty()) {
          auto [known, added] = symbols.emplace(d.dim_param(), std::make_pair(size, name));
          if (!added && known->second.first != size)
            return absl::InvalidArgumentError(absl::StrCat(
                prefix, "shape ", dims_string(t.dims()), ": dim ", i, " (", quoted(d.dim_param()),
                ") is ", size, ", but ", quoted(d.dim_param()), " is ", known->second.first,
                " in input ", quoted(known->second.second)));
        }
      }
    }
  }
  return absl::OkStatus();
}

const char* verify_status_name(VerifyStatus s) {
  switch (s) {
    case VerifyStatus::kVerified:
      return "verified";
    case VerifyStatus::kNotVerifiable:
      return "not_verifiable";
    case VerifyStatus::kMismatch:
      return "mismatch";
  }
  return "?";
}

std::string unsupported_op_of(const absl::Status& status) {
  if (!absl::IsUnimplemented(status)) return "";
  std::string_view m(status.message().data(), status.message().size());
  const size_t at = m.find(kCannotRun);
  if (at == std::string_view::npos) return "";
  std::string_view rest = m.substr(at + kCannotRun.size());
  return std::string(rest.substr(0, rest.find(' ')));
}

Verifier::Verifier(const ir::Model& original, const VerifyOptions& options) : options_(options) {
  for (const auto& out : original.graph().outputs()) output_names_.push_back(out.value->name());
  // Shapes and ranges describe random inputs; given sets make them irrelevant.
  if (options.input_sets.empty()) {
    auto is_input = [&](const std::string& name) {
      for (const auto& in : original.graph().inputs())
        if (in.value->name() == name) return true;
      return false;
    };
    std::vector<std::pair<const char*, const std::string*>> named;
    for (const auto& [name, shape] : options.shapes) named.emplace_back("shape", &name);
    for (const auto& [name, range] : options.ranges) named.emplace_back("range", &name);
    for (const auto& [what, name] : named)
      if (!is_input(*name)) {
        failure_ =
            not_verifiable(absl::InvalidArgumentError(absl::StrCat("a ", what, " is given for '",
                                                                   *name, "', which is no input")),
                           "inputs");
        return;
      }
  }
  if (!options.input_sets.empty()) {
    for (const auto& feeds : options.input_sets) {
      auto outputs = run(original, feeds);
      if (!outputs.ok()) {
        failure_ = not_verifiable(outputs.status(), "the original model");
        feeds_.clear();
        expected_.clear();
        return;
      }
      feeds_.push_back(feeds);
      expected_.push_back(std::move(*outputs));
    }
    for (const auto& in : original.graph().inputs()) {
      auto t = options.input_sets[0].find(in.value->name());
      if (t == options.input_sets[0].end()) continue;
      input_notes_.push_back({t->first, t->second.dims(),
                              absl::StrCat("given (", options.input_sets.size(),
                                           options.input_sets.size() == 1 ? " set)" : " sets)")});
    }
    return;
  }
  std::vector<Sizing> attempts = sizes_to_try(options);
  bool ties_tried = false;
  const std::vector<PositionInput> positions = position_inputs(original, options);
  std::optional<VerifyResult> first_failure;
  bool stop = false;
  for (size_t attempt = 0; attempt < attempts.size() && !stop; ++attempt) {
    feeds_.clear();
    expected_.clear();
    bool defaulted = false;
    std::optional<VerifyResult> failure;
    // Representative sizes may be more than the budget affords: such an attempt's runs get a
    // share of what is left, so that smaller ones still can.
    const bool shrinking = options.representative_dims && attempt + 1 < attempts.size();
    std::map<std::string, int64_t> params;
    std::map<std::string, int64_t> position_rows;  // PositionInput name -> its table's rows
    std::vector<InputNote> notes;                  // how the first set's inputs were made
    const uint64_t work_before = work_spent_;
    std::string dims_used;
    // Inputs too short for the model (a window longer than them, outputs all empty): longer
    // sizes next, before any smaller ones.
    auto try_longer_next = [&](const absl::Status& error) {
      if (!defaulted || options.default_dim != 0) return;
      const auto longer = longer_sizes(attempts[attempt], error);
      attempts.insert(attempts.begin() + static_cast<std::ptrdiff_t>(attempt) + 1, longer.begin(),
                      longer.end());
      // A shape mismatch at the first role sizes: the dims the graph ties, tried next at the
      // same sizes (once).
      if (longer.empty() && !ties_tried && attempts[attempt].role_divisor > 0 &&
          attempts[attempt].tie.empty() && absl::IsInvalidArgument(error)) {
        ties_tried = true;
        std::vector<Sizing> tied;
        for (auto& [dim, terms] : dim_ties(original, options)) {
          Sizing t = attempts[attempt];
          t.tied = std::move(dim);
          t.tie = std::move(terms);
          tied.push_back(std::move(t));
        }
        attempts.insert(attempts.begin() + static_cast<std::ptrdiff_t>(attempt) + 1, tied.begin(),
                        tied.end());
      }
    };
    // An input set beyond the trials' (seeded by `trial`), at the sizes they settled on and with
    // their positions: more measured sets, and the calibration sets.
    auto another_set = [&](int trial) -> std::optional<std::map<std::string, Tensor>> {
      std::map<std::string, Tensor> feeds;
      uint64_t input_bytes = 0;
      bool unused = false;
      if (!make_feeds(original, options, attempts[attempt], trial, params, feeds, input_bytes,
                      unused, nullptr)
               .ok())
        return std::nullopt;
      for (const auto& [name, rows] : position_rows) shift_positions(feeds.at(name), rows);
      return feeds;
    };
    for (int trial = 0; trial < std::max(1, options.trials) && !failure; ++trial) {
      std::map<std::string, Tensor> feeds;
      uint64_t input_bytes = 0;
      if (auto st = make_feeds(original, options, attempts[attempt], trial, params, feeds,
                               input_bytes, defaulted, trial == 0 ? &dims_used : nullptr,
                               trial == 0 ? &notes : nullptr);
          !st.ok()) {
        failure = not_verifiable(st, "inputs");
        break;
      }
      // Positions into a table cut to the total length at run time: the first set's run (with
      // positions 0, 1, ..., which any such table holds) tells the table's rows, and every set
      // then takes the last positions, arange(past, past + seq).
      if (trial == 0 && !positions.empty()) {
        position_rows.clear();
        const ValueObserver observe = [&](const ir::Value& v, const Tensor& t) {
          for (const PositionInput& p : positions) {
            const int64_t axis = p.axis < 0 ? p.axis + t.rank() : p.axis;
            if (&v == p.table && axis >= 0 && axis < t.rank())
              position_rows.try_emplace(p.name, t.dims()[static_cast<size_t>(axis)]);
          }
        };
        (void)run(original, feeds, shrinking ? 3 * static_cast<uint64_t>(options.trials) : 1,
                  &observe);
      }
      for (const auto& [name, rows] : position_rows) {
        const int64_t first = shift_positions(feeds.at(name), rows);
        if (trial == 0 && first > 0)
          for (InputNote& note : notes)
            if (note.name == name)
              note.how = absl::StrCat("positions ", first, "..", rows - 1,
                                      ": the last rows of a table the graph cuts to ", rows,
                                      " rows at run time (past + sequence)");
      }
      if (attempt > 0 && !options.representative_dims &&
          input_bytes > options.max_auto_input_bytes) {
        failure = first_failure;  // larger sizes only grow; report the smallest size's error
        stop = true;
        break;
      }
      if (options.representative_dims && input_bytes > options.max_auto_input_bytes && shrinking &&
          defaulted) {
        failure = not_verifiable(absl::ResourceExhaustedError(absl::StrCat(
                                     "inputs of ", input_bytes, " bytes at ", dims_used)),
                                 "inputs");
        break;
      }
      // Each try at representative sizes may use 1/(3 * trials) of what is left, so that the
      // candidates measured against it (as many runs again each) fit in the budget too.
      auto outputs = run(original, feeds,
                         shrinking ? 3 * static_cast<uint64_t>(std::max(1, options.trials)) : 1);
      if (!outputs.ok()) {
        failure = not_verifiable(outputs.status(), "the original model");
        try_longer_next(outputs.status());
        // Unsupported ops and cancellation do not depend on the dims' sizes; resource limits
        // do only when there are smaller sizes to try.
        if (absl::IsUnimplemented(outputs.status()) || absl::IsDeadlineExceeded(outputs.status()) ||
            absl::IsCancelled(outputs.status()) ||
            (absl::IsResourceExhausted(outputs.status()) && !(shrinking && defaulted)))
          stop = true;
        break;
      }
      // Outputs with no element compare equal whatever the candidate computes: sizes that
      // give only those measure nothing (a log-mel front-end on fewer samples than a frame).
      if (defaulted && options.default_dim == 0 && !outputs->empty() &&
          std::all_of(outputs->begin(), outputs->end(),
                      [](const Tensor& t) { return t.size() == 0; })) {
        const absl::Status empty = absl::InvalidArgumentError(
            absl::StrCat("every output is empty at ", dims_used, "; longer inputs are needed"));
        failure = not_verifiable(empty, "the original model");
        try_longer_next(empty);
        break;
      }
      feeds_.push_back(std::move(feeds));
      expected_.push_back(std::move(*outputs));
    }
    // The candidates measured against these runs cost as much again each: sizes that leave no
    // room for two of them are too large.
    const uint64_t used = work_spent_ - work_before;
    if (!failure && shrinking && defaulted && options.max_work &&
        used > (options.max_work - std::min(options.max_work, work_spent_)) / 2)
      failure =
          not_verifiable(absl::ResourceExhaustedError(absl::StrCat(
                             "at ", dims_used, " the original's runs cost ", used,
                             " operations, more than the work budget leaves for the candidates")),
                         "the original model");
    // Cheap runs: more sets, while the original's runs together cost at most 1/16 of the
    // budget (the candidates cost as much again each). A set that cannot be made or run ends
    // the growth, not the verification.
    if (!failure && options.max_trials > static_cast<int>(feeds_.size()) && options.max_work &&
        !feeds_.empty()) {
      const uint64_t per_set = (work_spent_ - work_before) / feeds_.size();
      while (static_cast<int>(feeds_.size()) < options.max_trials &&
             work_spent_ - work_before + per_set <= options.max_work / 16) {
        auto feeds = another_set(static_cast<int>(feeds_.size()));
        if (!feeds) break;
        auto outputs = run(original, *feeds, 16);
        if (!outputs.ok()) break;
        feeds_.push_back(std::move(*feeds));
        expected_.push_back(std::move(*outputs));
      }
    }
    if (!failure) {
      // Calibration sets: the same sizes (params hold the trials' dims), other seeds; with
      // max_trials, as many as the trials grew to.
      const int calibration_sets =
          options.max_trials > 0
              ? std::max(options.calibration_sets,
                         options.calibration_sets > 0 ? static_cast<int>(feeds_.size()) : 0)
              : options.calibration_sets;
      for (int k = 0; k < calibration_sets; ++k) {
        auto feeds = another_set(1000 + k);
        if (!feeds) break;
        calibration_feeds_.push_back(std::move(*feeds));
      }
      default_dim_used_ =
          defaulted && attempts[attempt].role_divisor == 0 ? attempts[attempt].default_dim : 0;
      if (const Sizing& s = attempts[attempt]; defaulted && !s.tie.empty())
        absl::StrAppend(&dims_used, " (", s.tied, " = ", s.tie[0].name, " + ", s.tie[1].name, ")");
      if (defaulted) dims_used_ = std::move(dims_used);
      input_notes_ = std::move(notes);
      failure_.reset();
      return;
    }
    if (!first_failure) first_failure = failure;
    failure_ = first_failure;
    if (!defaulted) stop = true;  // no input has a defaulted dim: other sizes change nothing
  }
  feeds_.clear();
  expected_.clear();
  calibration_feeds_.clear();
}

Verifier::~Verifier() = default;

absl::StatusOr<std::vector<Tensor>> Verifier::run(const ir::Model& model,
                                                  const std::map<std::string, Tensor>& feeds,
                                                  uint64_t share,
                                                  const ValueObserver* observer) const {
  Limits limits;
  limits.max_tensor_bytes = options_.max_tensor_bytes;
  limits.max_live_bytes = options_.max_live_bytes;
  limits.should_continue = options_.should_continue ? &options_.should_continue : nullptr;
  limits.max_work = 0;
  if (options_.max_work) {
    if (work_spent_ >= options_.max_work)
      return absl::ResourceExhaustedError(absl::StrCat("verification's work budget of ",
                                                       options_.max_work, " operations is spent"));
    limits.max_work = (options_.max_work - work_spent_) / std::max<uint64_t>(share, 1);
  }
  RunStats stats;
  auto outputs = run_model(model, feeds, limits, &stats, observer);
  work_spent_ += stats.work;
  return outputs;
}

VerifyResult Verifier::check(const ir::Model& candidate) const {
  return compare_runs(candidate, /*lossy=*/false);
}

VerifyResult Verifier::measure(const ir::Model& candidate) const {
  return compare_runs(candidate, /*lossy=*/true);
}

size_t Verifier::output_index(const std::string& name) const {
  return static_cast<size_t>(std::find(output_names_.begin(), output_names_.end(), name) -
                             output_names_.begin());
}

VerifyResult Verifier::compare_runs(const ir::Model& candidate, bool lossy) const {
  if (failure_) return *failure_;
  VerifyResult r;
  std::string first;
  std::vector<ErrorSums> sums(output_names_.size());
  std::vector<TaskJudge> judges;
  if (lossy)
    for (const TaskGate& gate : options_.task_gates) {
      bool known = true;
      for (const std::string& name : gate.group) known &= output_index(name) < output_names_.size();
      if (known) judges.emplace_back(gate);
    }
  // A lossy candidate may take a float input in another float type (float16 inputs): it gets
  // the same values, converted.
  std::map<std::string, int32_t> retyped;
  if (lossy && !feeds_.empty())
    for (const auto& in : candidate.graph().inputs()) {
      const onnx::TypeProto* type = in.info.has_type() ? &in.info.type() : in.value->type();
      if (type == nullptr || !type->has_tensor_type()) continue;
      const int32_t dtype = type->tensor_type().elem_type();
      auto fed = feeds_[0].find(in.value->name());
      if (fed != feeds_[0].end() && fed->second.dtype() != dtype && is_float_type(dtype) &&
          is_float_type(fed->second.dtype()))
        retyped[in.value->name()] = dtype;
    }
  for (size_t trial = 0; trial < feeds_.size(); ++trial) {
    std::map<std::string, Tensor> converted;
    for (const auto& [name, dtype] : retyped) {
      const Tensor& from = feeds_[trial].at(name);
      auto to = Tensor::zeros(dtype, from.dims(), options_.max_tensor_bytes);
      if (!to.ok()) return not_verifiable(to.status(), "the optimized model's inputs");
      for (int64_t i = 0; i < from.size(); ++i) to->set_double(i, from.get_double(i));
      converted.emplace(name, std::move(*to));
    }
    std::map<std::string, Tensor> retyped_feeds;
    if (!converted.empty()) {
      retyped_feeds = feeds_[trial];
      for (auto& [name, t] : converted) retyped_feeds.insert_or_assign(name, std::move(t));
    }
    auto actual = run(candidate, converted.empty() ? feeds_[trial] : retyped_feeds);
    if (!actual.ok()) {
      // A candidate the budget cannot run says nothing about its numbers either.
      if (absl::IsUnimplemented(actual.status()) || absl::IsDeadlineExceeded(actual.status()) ||
          absl::IsCancelled(actual.status()) || absl::IsResourceExhausted(actual.status()))
        return not_verifiable(actual.status(), "the optimized model");
      r.status = VerifyStatus::kMismatch;
      r.message = absl::StrCat("the optimized model fails where the original runs: ",
                               std::string(actual.status().message()));
      return r;
    }
    const auto& expected = expected_[trial];
    if (actual->size() != expected.size()) {
      r.status = VerifyStatus::kMismatch;
      r.message = absl::StrCat(expected.size(), " outputs became ", actual->size());
      return r;
    }
    // A detection group's outputs that hold its rows are compared on the matched rows only.
    std::map<size_t, std::pair<Tensor, Tensor>> matched_rows;
    for (TaskJudge& judge : judges) {
      if (judge.gate().kind != TaskKind::kDetection) continue;
      std::vector<size_t> at;
      std::vector<const Tensor*> a, b;
      for (const std::string& name : judge.gate().group) {
        at.push_back(output_index(name));
        a.push_back(&expected[at.back()]);
        b.push_back(&(*actual)[at.back()]);
      }
      auto match = match_detections(a, b);
      if (!match.ok()) continue;  // compared as written: a changed row count is a mismatch
      judge.add(*match);
      std::vector<int64_t> rows_a, rows_b;
      for (const auto& [x, y] : match->pairs) {
        rows_a.push_back(x);
        rows_b.push_back(y);
      }
      for (size_t k : match->row_outputs) {
        auto ga = gather_rows(*a[k], match->axis, rows_a, options_.max_tensor_bytes);
        auto gb = gather_rows(*b[k], match->axis, rows_b, options_.max_tensor_bytes);
        if (!ga.ok()) return not_verifiable(ga.status(), "the matched detections");
        if (!gb.ok()) return not_verifiable(gb.status(), "the matched detections");
        matched_rows.insert_or_assign(at[k], std::make_pair(std::move(*ga), std::move(*gb)));
      }
    }
    for (size_t i = 0; i < expected.size(); ++i) {
      auto rows = matched_rows.find(i);
      const Tensor& want = rows != matched_rows.end() ? rows->second.first : expected[i];
      const Tensor& got = rows != matched_rows.end() ? rows->second.second : (*actual)[i];
      std::string diff = compare(output_names_[i], want, got, options_, r, &sums[i], lossy);
      if (first.empty() && !diff.empty())
        first = feeds_.size() > 1 ? absl::StrCat(diff, " (input set ", trial + 1, ")") : diff;
      for (TaskJudge& judge : judges)
        if (judge.gate().kind != TaskKind::kDetection && judge.gate().output == output_names_[i])
          judge.add(want, got);
    }
  }
  for (size_t i = 0; i < output_names_.size(); ++i)
    if (!expected_.empty() && is_float_type(expected_[0][i].dtype()))
      r.outputs.push_back(error_of(output_names_[i], sums[i]));
  for (const TaskJudge& judge : judges) r.tasks.push_back(judge.result());
  r.inputs = input_notes_;
  if (!first.empty()) {
    r.status = VerifyStatus::kMismatch;
    r.message = absl::StrCat(first, "; worst absolute difference ", r.max_abs_diff, " in '",
                             r.worst_output, "'");
    return r;
  }
  r.status = VerifyStatus::kVerified;
  r.message =
      absl::StrCat(expected_.size(), expected_.size() == 1 ? " input set, " : " input sets, ",
                   output_names_.size(), output_names_.size() == 1 ? " output" : " outputs",
                   "; worst absolute difference ", r.max_abs_diff);
  if (default_dim_used_ > 0)
    absl::StrAppend(&r.message, "; symbolic dims set to ", default_dim_used_);
  if (!dims_used_.empty() && default_dim_used_ == 0)
    absl::StrAppend(&r.message, "; inputs ", dims_used_);
  return r;
}

VerifyResult verify(const ir::Model& original, const ir::Model& optimized,
                    const VerifyOptions& options) {
  return Verifier(original, options).check(optimized);
}

}  // namespace graft::eval
