#include "core/eval/executor.h"

#include <climits>
#include <cstring>

#include <absl/strings/str_cat.h>

namespace graft::eval {

namespace {

// Values are unique objects across all graphs of a model, so one map serves every scope: a
// subgraph reads captured outer values from the same environment.
using Env = std::unordered_map<const ir::Value*, Tensor>;

class Executor {
 public:
  explicit Executor(const Limits& limits) : limits_(limits) {}

  absl::Status run_graph(const ir::Graph& g, Env& env) {
    for (ir::Value* v : g.initializers()) {
      if (env.count(v)) continue;  // a fed graph input overrides its default
      auto t = Tensor::from_proto(*v->initializer(), limits_.max_tensor_bytes);
      if (!t.ok()) return t.status();
      env[v] = std::move(*t);
    }
    for (ir::Node* n : g.nodes())
      if (auto st = run_node(*n, env); !st.ok()) return st;
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<const Tensor*> get(const ir::Value* v, const Env& env) {
    auto it = env.find(v);
    if (it == env.end())
      return absl::InvalidArgumentError(absl::StrCat("no value for '", v->name(), "'"));
    return &it->second;
  }

  absl::Status run_node(const ir::Node& n, Env& env) {
    if (n.is("If")) return run_if(n, env);
    if (n.is("Loop")) return run_loop(n, env);
    const Kernel* kernel = find_kernel(n.op_type(), n.domain(), n.opset());
    if (!kernel)
      return absl::UnimplementedError(
          absl::StrCat("the evaluator cannot run ", n.op_type(), " (opset ", n.opset(), ")"));
    KernelContext ctx{n, n.opset(), {}, {}, limits_};
    for (ir::Value* v : n.inputs()) {
      if (!v) {
        ctx.inputs.push_back(nullptr);
        continue;
      }
      auto t = get(v, env);
      if (!t.ok()) return t.status();
      ctx.inputs.push_back(*t);
    }
    ctx.outputs.resize(n.outputs().size());
    if (auto st = (*kernel)(ctx); !st.ok())
      return absl::Status(
          st.code(), absl::StrCat(n.op_type(), " '", n.name(), "': ", std::string(st.message())));
    for (size_t i = 0; i < n.outputs().size(); ++i)
      if (ir::Value* out = n.output(i)) env[out] = std::move(ctx.outputs[i]);
    return absl::OkStatus();
  }

  const ir::Graph* subgraph(const ir::Node& n, std::string_view attr) {
    for (const auto& s : n.subgraphs())
      if (s.attr_name == attr) return s.graph.get();
    return nullptr;
  }

  absl::Status run_if(const ir::Node& n, Env& env) {
    auto cond = get(n.input(0), env);
    if (!cond.ok()) return cond.status();
    if ((*cond)->size() != 1) return absl::InvalidArgumentError("If condition must have 1 element");
    const ir::Graph* branch = subgraph(n, (*cond)->get_int64(0) ? "then_branch" : "else_branch");
    if (!branch) return absl::InvalidArgumentError("If without its branch");
    if (auto st = run_graph(*branch, env); !st.ok()) return st;
    if (branch->outputs().size() != n.outputs().size())
      return absl::InvalidArgumentError("If branch output count differs from the node's");
    for (size_t i = 0; i < n.outputs().size(); ++i) {
      auto t = get(branch->outputs()[i].value, env);
      if (!t.ok()) return t.status();
      if (ir::Value* out = n.output(i)) env[out] = **t;
    }
    return absl::OkStatus();
  }

  // Loop(M, cond, v_initial...) with body(iter, cond, v...) -> (cond, v..., scan...).
  absl::Status run_loop(const ir::Node& n, Env& env) {
    const ir::Graph* body = subgraph(n, "body");
    if (!body) return absl::InvalidArgumentError("Loop without a body");
    const size_t carried = n.inputs().size() >= 2 ? n.inputs().size() - 2 : 0;
    if (body->inputs().size() != carried + 2 || body->outputs().size() < carried + 1)
      return absl::InvalidArgumentError("Loop body signature does not match the node");
    const size_t scans = body->outputs().size() - 1 - carried;
    int64_t max_trips = INT64_MAX;
    if (ir::Value* m = n.input(0)) {
      auto t = get(m, env);
      if (!t.ok()) return t.status();
      max_trips = (*t)->get_int64(0);
    }
    bool cond = true;
    if (ir::Value* c = n.input(1)) {
      auto t = get(c, env);
      if (!t.ok()) return t.status();
      cond = (*t)->get_int64(0) != 0;
    }
    std::vector<Tensor> state;
    for (size_t i = 0; i < carried; ++i) {
      auto t = get(n.input(2 + i), env);
      if (!t.ok()) return t.status();
      state.push_back(**t);
    }
    std::vector<std::vector<Tensor>> scan_values(scans);
    // A loop with no trip count runs until its condition turns false; bound it anyway.
    constexpr int64_t kMaxIterations = 1 << 20;
    for (int64_t i = 0; i < max_trips && cond; ++i) {
      if (i >= kMaxIterations)
        return absl::ResourceExhaustedError("Loop ran more than 2^20 iterations");
      auto iter = Tensor::zeros(onnx::TensorProto::INT64, {}, limits_.max_tensor_bytes);
      auto cond_t = Tensor::zeros(onnx::TensorProto::BOOL, {}, limits_.max_tensor_bytes);
      if (!iter.ok()) return iter.status();
      if (!cond_t.ok()) return cond_t.status();
      iter->set_int64(0, i);
      cond_t->set_int64(0, cond ? 1 : 0);
      env[body->inputs()[0].value] = std::move(*iter);
      env[body->inputs()[1].value] = std::move(*cond_t);
      for (size_t k = 0; k < carried; ++k) env[body->inputs()[2 + k].value] = state[k];
      if (auto st = run_graph(*body, env); !st.ok()) return st;
      auto c = get(body->outputs()[0].value, env);
      if (!c.ok()) return c.status();
      cond = (*c)->get_int64(0) != 0;
      for (size_t k = 0; k < carried; ++k) {
        auto t = get(body->outputs()[1 + k].value, env);
        if (!t.ok()) return t.status();
        state[k] = **t;
      }
      for (size_t k = 0; k < scans; ++k) {
        auto t = get(body->outputs()[1 + carried + k].value, env);
        if (!t.ok()) return t.status();
        scan_values[k].push_back(**t);
      }
    }
    for (size_t k = 0; k < carried; ++k)
      if (ir::Value* out = n.output(k)) env[out] = std::move(state[k]);
    for (size_t k = 0; k < scans; ++k) {
      ir::Value* out = n.output(carried + k);
      if (!out) continue;
      auto stacked = stack(scan_values[k]);
      if (!stacked.ok()) return stacked.status();
      env[out] = std::move(*stacked);
    }
    return absl::OkStatus();
  }

  // Scan outputs: the per-iteration tensors stacked along a new first axis.
  absl::StatusOr<Tensor> stack(const std::vector<Tensor>& parts) {
    if (parts.empty())
      return absl::UnimplementedError("Loop scan output with zero iterations (unknown shape)");
    std::vector<int64_t> dims = parts[0].dims();
    for (const auto& p : parts)
      if (p.dims() != dims || p.dtype() != parts[0].dtype())
        return absl::InvalidArgumentError("Loop scan outputs differ in shape or type");
    if (parts[0].dtype() == onnx::TensorProto::STRING)
      return absl::UnimplementedError("Loop scan outputs of strings");
    dims.insert(dims.begin(), static_cast<int64_t>(parts.size()));
    auto out = Tensor::zeros(parts[0].dtype(), dims, limits_.max_tensor_bytes);
    if (!out.ok()) return out.status();
    size_t offset = 0;
    for (const auto& p : parts) {
      std::memcpy(out->data<char>() + offset, p.data<char>(), p.bytes());
      offset += p.bytes();
    }
    return out;
  }

  Limits limits_;
};

}  // namespace

absl::StatusOr<std::vector<Tensor>> run_model(const ir::Model& model,
                                              const std::map<std::string, Tensor>& feeds,
                                              const Limits& limits) {
  Env env;
  const ir::Graph& g = model.graph();
  for (const auto& in : g.inputs()) {
    auto it = feeds.find(in.value->name());
    if (it != feeds.end()) {
      env[in.value] = it->second;
    } else if (!in.value->is_initializer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph input '", in.value->name(), "' is not fed"));
    }
  }
  Executor exec(limits);
  if (auto st = exec.run_graph(g, env); !st.ok()) return st;
  std::vector<Tensor> outputs;
  for (const auto& out : g.outputs()) {
    auto it = env.find(out.value);
    if (it == env.end())
      return absl::InternalError(absl::StrCat("output '", out.value->name(), "' not computed"));
    outputs.push_back(it->second);
  }
  return outputs;
}

}  // namespace graft::eval
