#include "core/eval/executor.h"

#include <climits>
#include <cstring>
#include <memory>
#include <unordered_set>

#include <absl/strings/str_cat.h>

#include "core/base/status.h"
#include "core/eval/budget.h"
#include "core/ir/operands.h"
#include "core/memory/allocator.h"

namespace graft::eval {

namespace {

// Values are unique objects across all graphs of a model, so one map serves every scope: a
// subgraph reads captured outer values from the same environment.
using Env = std::unordered_map<const ir::Value*, Tensor>;

// Model-local functions may call other functions; ONNX forbids recursion, this bounds it.
constexpr int kMaxCallDepth = 64;

bool same_domain(std::string_view a, std::string_view b) {
  return ir::is_onnx_domain(a) ? ir::is_onnx_domain(b) : a == b;
}

// Whether a graph (or a nested subgraph) has attributes referring to the calling node's.
bool has_attribute_refs(const ir::Graph& g) {
  for (const ir::Node* n : g.nodes()) {
    for (const auto& a : n->attributes())
      if (!a.ref_attr_name().empty()) return true;
    for (const auto& s : n->subgraphs())
      if (has_attribute_refs(*s.graph)) return true;
  }
  return false;
}

// Replaces attribute references in `nodes` (and their subgraphs) by the caller's attributes of
// the referenced names; a reference to an attribute the caller does not set is dropped, so the
// op's default applies.
void resolve_attribute_refs(google::protobuf::RepeatedPtrField<onnx::NodeProto>* nodes,
                            const ir::Node& caller) {
  for (auto& node : *nodes) {
    auto* attrs = node.mutable_attribute();
    for (int i = 0; i < attrs->size();) {
      onnx::AttributeProto* a = attrs->Mutable(i);
      if (!a->ref_attr_name().empty()) {
        const onnx::AttributeProto* value = caller.attr(a->ref_attr_name());
        if (value == nullptr) {
          attrs->DeleteSubrange(i, 1);
          continue;
        }
        std::string name = a->name();
        *a = *value;
        a->set_name(name);
      }
      if (a->has_g()) resolve_attribute_refs(a->mutable_g()->mutable_node(), caller);
      for (auto& g : *a->mutable_graphs()) resolve_attribute_refs(g.mutable_node(), caller);
      ++i;
    }
  }
}

class Executor {
 public:
  Executor(const ir::Model& model, const Limits& limits, int depth)
      : model_(model), limits_(limits), depth_(depth) {}

  void set_observer(const ValueObserver* observer) { observer_ = observer; }

  // Binds graph `g`'s inputs to `args` (nullptr or missing: an absent optional input).
  void bind_inputs(const ir::Graph& g, const std::vector<const Tensor*>& args, Env& env) {
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      const ir::Value* v = g.inputs()[i].value;
      if (i < args.size() && args[i] != nullptr) {
        env[v] = *args[i];
        absent_.erase(v);
      } else {
        env.erase(v);
        absent_.insert(v);
      }
    }
  }

  // Marks values of `g` read anywhere inside `sub` (node inputs or subgraph outputs, at any
  // depth) as used by the node at position `at` of `g`, which holds `sub`.
  static void note_captures(const ir::Graph& sub, const ir::Graph& g, size_t at,
                            std::unordered_map<const ir::Value*, size_t>& last_use) {
    for (const ir::Node* n : sub.nodes()) {
      for (const ir::Value* v : n->inputs())
        if (v && v->owner() == &g) last_use[v] = at;
      for (const auto& s : n->subgraphs()) note_captures(*s.graph, g, at, last_use);
    }
    for (const auto& out : sub.outputs())
      if (out.value->owner() == &g) last_use[out.value] = at;
  }

  // Like note_captures, for the first node of `g` (at position `at`) that reads each value.
  static void note_first_captures(const ir::Graph& sub, const ir::Graph& g, size_t at,
                                  std::unordered_map<const ir::Value*, size_t>& first_use) {
    for (const ir::Node* n : sub.nodes()) {
      for (const ir::Value* v : n->inputs())
        if (v && v->owner() == &g) first_use.emplace(v, at);
      for (const auto& s : n->subgraphs()) note_first_captures(*s.graph, g, at, first_use);
    }
    for (const auto& out : sub.outputs())
      if (out.value->owner() == &g) first_use.emplace(out.value, at);
  }

  absl::Status run_graph(const ir::Graph& g, Env& env) {
    ASSIGN_OR_RETURN(const Plan* plan, plan_for(g));
    const ir::ExternalData* external = g.model()->external_data().get();
    auto load = [&](const ir::Value* v) -> absl::Status {
      if (env.count(v)) return absl::OkStatus();  // a fed graph input overrides its default
      // Read in place, the model's immutable tensor shared (Tensor::view_of): runs do not copy
      // the weights. Charged to the budget as a copy would be.
      ASSIGN_OR_RETURN(
          env[v], Tensor::view_of(v->shared_initializer(), limits_.max_tensor_bytes, external));
      return absl::OkStatus();
    };
    for (ir::Value* v : g.initializers())
      if (!plan->loaded_late.count(v)) RETURN_IF_ERROR(load(v));
    for (size_t i = 0; i < plan->nodes.size(); ++i) {
      for (const ir::Value* v : plan->loads_before[i]) RETURN_IF_ERROR(load(v));
      RETURN_IF_ERROR(run_node(*plan->nodes[i], env));
      for (const ir::Value* v : plan->dies_after[i]) env.erase(v);
    }
    return absl::OkStatus();
  }

 private:
  // The order a graph's nodes run in and when each of its values is freed: after the last node
  // that reads it (directly or from a subgraph), or at once if nothing reads it, so peak memory
  // follows the live values, not the whole graph. Outputs stay for the caller; a subgraph's
  // initializers stay too, as Loop and Scan bodies run again. Built once per graph: a Loop body
  // runs once per iteration.
  // Building it also checks every node's operands against its schema, once per graph: a
  // required input that is absent is an error here, not a null dereference later.
  struct Plan {
    absl::Status status;
    std::vector<ir::Node*> nodes;
    std::vector<std::vector<const ir::Value*>> dies_after;  // per node
    // External initializers of the main graph are read just before their first reader (and
    // freed after their last, like any value), so a run holds the weights in use, not all of
    // them. Per node; and the set of them, which is not read up front.
    std::vector<std::vector<const ir::Value*>> loads_before;
    std::unordered_set<const ir::Value*> loaded_late;
  };
  absl::StatusOr<const Plan*> plan_for(const ir::Graph& g) {
    auto [it, inserted] = plans_.try_emplace(&g);
    Plan& plan = it->second;
    if (!inserted) {
      RETURN_IF_ERROR(plan.status);
      return &plan;
    }
    plan.nodes = g.nodes();
    for (const ir::Node* n : plan.nodes)
      if (auto st = ir::check_operands(*n, /*clamp_to_known_opset=*/true); !st.ok())
        return plan.status = st;
    std::unordered_map<const ir::Value*, size_t> last_use;
    for (size_t i = 0; i < plan.nodes.size(); ++i) {
      for (const ir::Value* v : plan.nodes[i]->inputs())
        if (v && v->owner() == &g) last_use[v] = i;
      for (const auto& sub : plan.nodes[i]->subgraphs()) note_captures(*sub.graph, g, i, last_use);
    }
    for (const auto& out : g.outputs()) last_use[out.value] = SIZE_MAX;
    plan.dies_after.resize(plan.nodes.size());
    for (const auto& [v, i] : last_use)
      if (i != SIZE_MAX && !(v->is_initializer() && g.parent())) plan.dies_after[i].push_back(v);
    for (size_t i = 0; i < plan.nodes.size(); ++i)
      for (const ir::Value* v : plan.nodes[i]->outputs())
        if (v && !last_use.count(v)) plan.dies_after[i].push_back(v);
    plan.loads_before.resize(plan.nodes.size());
    if (!g.parent()) {
      std::unordered_map<const ir::Value*, size_t> first_use;
      for (size_t i = 0; i < plan.nodes.size(); ++i) {
        for (const ir::Value* v : plan.nodes[i]->inputs())
          if (v && v->owner() == &g) first_use.emplace(v, i);
        for (const auto& sub : plan.nodes[i]->subgraphs())
          note_first_captures(*sub.graph, g, i, first_use);
      }
      for (const ir::Value* v : g.initializers()) {
        auto it = first_use.find(v);
        // One that is also a graph output is read up front, as before.
        if (it == first_use.end() || !ir::is_external(*v->initializer()) || last_use[v] == SIZE_MAX)
          continue;
        plan.loads_before[it->second].push_back(v);
        plan.loaded_late.insert(v);
      }
    }
    return &plan;
  }

  absl::StatusOr<const Tensor*> get(const ir::Value* v, const Env& env) {
    if (v == nullptr) return absl::InvalidArgumentError("a required input is missing");
    auto it = env.find(v);
    if (it == env.end())
      return absl::InvalidArgumentError(absl::StrCat("no value for '", v->name(), "'"));
    return &it->second;
  }

  // The node's inputs; nullptr for absent optional inputs (also unbound function inputs).
  absl::StatusOr<std::vector<const Tensor*>> gather_inputs(const ir::Node& n, const Env& env) {
    std::vector<const Tensor*> inputs;
    for (ir::Value* v : n.inputs()) {
      if (!v || absent_.count(v)) {
        inputs.push_back(nullptr);
        continue;
      }
      ASSIGN_OR_RETURN(const Tensor* t, get(v, env));
      inputs.push_back(t);
    }
    return inputs;
  }

  const ir::Function* find_function(const ir::Node& n) const {
    for (const auto& fn : model_.functions())
      if (fn.rest.name() == n.op_type() && same_domain(fn.rest.domain(), n.domain())) return &fn;
    return nullptr;
  }

  absl::Status run_node(const ir::Node& n, Env& env) {
    if (limits_.should_continue && *limits_.should_continue) {
      RETURN_IF_ERROR((*limits_.should_continue)());
    }
    absl::Status st = dispatch(n, env);
    if (st.ok() && observer_ && *observer_) {
      for (const ir::Value* out : n.outputs()) {
        auto it = out ? env.find(out) : env.end();
        if (it != env.end()) (*observer_)(*out, it->second);
      }
    }
    return st;
  }

  absl::Status dispatch(const ir::Node& n, Env& env) {
    if (const ir::Function* fn = find_function(n)) return run_function(n, *fn, env);
    if (n.is("If")) return run_if(n, env);
    if (n.is("Loop")) return run_loop(n, env);
    if (n.is("Scan")) return run_scan(n, env);
    ASSIGN_OR_RETURN(auto inputs, gather_inputs(n, env));
    ASSIGN_OR_RETURN(auto outputs, run_kernel(n, std::move(inputs), limits_));
    for (size_t i = 0; i < n.outputs().size(); ++i)
      if (ir::Value* out = n.output(i)) env[out] = std::move(outputs[i]);
    return absl::OkStatus();
  }

  const ir::Graph* subgraph(const ir::Node& n, std::string_view attr) {
    for (const auto& s : n.subgraphs())
      if (s.attr_name == attr) return s.graph.get();
    return nullptr;
  }

  absl::Status run_if(const ir::Node& n, Env& env) {
    ASSIGN_OR_RETURN(const Tensor* cond, get(n.input(0), env));
    if (cond->size() != 1) return absl::InvalidArgumentError("If condition must have 1 element");
    const ir::Graph* branch = subgraph(n, cond->get_int64(0) ? "then_branch" : "else_branch");
    if (!branch) return absl::InvalidArgumentError("If without its branch");
    RETURN_IF_ERROR(run_graph(*branch, env));
    if (branch->outputs().size() != n.outputs().size())
      return absl::InvalidArgumentError("If branch output count differs from the node's");
    for (size_t i = 0; i < n.outputs().size(); ++i) {
      ASSIGN_OR_RETURN(const Tensor* t, get(branch->outputs()[i].value, env));
      if (ir::Value* out = n.output(i)) env[out] = *t;
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
      ASSIGN_OR_RETURN(const Tensor* t, get(m, env));
      max_trips = t->get_int64(0);
    }
    bool cond = true;
    if (ir::Value* c = n.input(1)) {
      ASSIGN_OR_RETURN(const Tensor* t, get(c, env));
      cond = t->get_int64(0) != 0;
    }
    std::vector<Tensor> state;
    for (size_t i = 0; i < carried; ++i) {
      ASSIGN_OR_RETURN(const Tensor* t, get(n.input(2 + i), env));
      state.push_back(*t);
    }
    std::vector<std::vector<Tensor>> scan_values(scans);
    // A loop with no trip count runs until its condition turns false; bound it anyway.
    constexpr int64_t kMaxIterations = 1 << 20;
    for (int64_t i = 0; i < max_trips && cond; ++i) {
      spend_work(1 + carried + scans);
      if (i >= kMaxIterations)
        return absl::ResourceExhaustedError("Loop ran more than 2^20 iterations");
      ASSIGN_OR_RETURN(Tensor iter,
                       Tensor::zeros(onnx::TensorProto::INT64, {}, limits_.max_tensor_bytes));
      ASSIGN_OR_RETURN(Tensor cond_t,
                       Tensor::zeros(onnx::TensorProto::BOOL, {}, limits_.max_tensor_bytes));
      iter.set_int64(0, i);
      cond_t.set_int64(0, cond ? 1 : 0);
      env[body->inputs()[0].value] = std::move(iter);
      env[body->inputs()[1].value] = std::move(cond_t);
      for (size_t k = 0; k < carried; ++k) env[body->inputs()[2 + k].value] = state[k];
      RETURN_IF_ERROR(run_graph(*body, env));
      ASSIGN_OR_RETURN(const Tensor* c, get(body->outputs()[0].value, env));
      cond = c->get_int64(0) != 0;
      for (size_t k = 0; k < carried; ++k) {
        ASSIGN_OR_RETURN(const Tensor* t, get(body->outputs()[1 + k].value, env));
        state[k] = *t;
      }
      for (size_t k = 0; k < scans; ++k) {
        ASSIGN_OR_RETURN(const Tensor* t, get(body->outputs()[1 + carried + k].value, env));
        scan_values[k].push_back(*t);
      }
    }
    for (size_t k = 0; k < carried; ++k)
      if (ir::Value* out = n.output(k)) env[out] = std::move(state[k]);
    for (size_t k = 0; k < scans; ++k) {
      ir::Value* out = n.output(carried + k);
      if (!out) continue;
      ASSIGN_OR_RETURN(env[out], stack(scan_values[k]));
    }
    return absl::OkStatus();
  }

  // A call of a model-local function: its body runs with the inputs bound. Bodies without
  // attribute references run in place (their values are distinct objects, so they share this
  // environment); bodies with references run as a separate model built for the caller's
  // attributes (cached per caller).
  absl::Status run_function(const ir::Node& n, const ir::Function& fn, Env& env) {
    if (depth_ >= kMaxCallDepth)
      return absl::InvalidArgumentError(
          absl::StrCat("function calls nested deeper than ", kMaxCallDepth, " (recursion?)"));
    const ir::Graph& body = *fn.body;
    if (n.inputs().size() > body.inputs().size() || n.outputs().size() > body.outputs().size())
      return absl::InvalidArgumentError(
          absl::StrCat("call of function ", n.op_type(), " has too many inputs or outputs"));
    ASSIGN_OR_RETURN(auto args, gather_inputs(n, env));
    std::vector<Tensor> results;
    if (!has_attribute_refs(body)) {
      ++depth_;
      bind_inputs(body, args, env);
      absl::Status st = run_graph(body, env);
      --depth_;
      RETURN_IF_ERROR(st);
      for (size_t i = 0; i < n.outputs().size(); ++i) {
        if (!n.output(i)) continue;
        ASSIGN_OR_RETURN(const Tensor* t, get(body.outputs()[i].value, env));
        env[n.output(i)] = *t;
      }
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(const ir::Model* instance, instantiate(n, fn));
    const ir::Graph& g = instance->graph();
    Executor sub(*instance, limits_, depth_ + 1);
    Env sub_env;
    sub.bind_inputs(g, args, sub_env);
    RETURN_IF_ERROR(sub.run_graph(g, sub_env));
    for (size_t i = 0; i < n.outputs().size(); ++i) {
      if (!n.output(i)) continue;
      auto it = sub_env.find(g.outputs()[i].value);
      if (it == sub_env.end())
        return absl::InvalidArgumentError(
            absl::StrCat("function ", n.op_type(), " output ", i, " is not computed"));
      env[n.output(i)] = std::move(it->second);
    }
    return absl::OkStatus();
  }

  // The body of `fn` with the caller's attributes substituted, as a model whose main graph has
  // the function's inputs and outputs (and every local function, for nested calls).
  absl::StatusOr<const ir::Model*> instantiate(const ir::Node& caller, const ir::Function& fn) {
    std::string key = absl::StrCat(fn.rest.domain(), ":", fn.rest.name());
    for (const auto& a : caller.attributes()) absl::StrAppend(&key, "|", a.SerializeAsString());
    if (auto it = instances_.find(key); it != instances_.end()) return it->second.get();
    if (saved_functions_.empty()) {
      // save_function only reads the function (to_proto uses it the same way on a const model).
      for (const auto& f : model_.functions())
        save_function(const_cast<ir::Function&>(f), &saved_functions_.emplace_back(), false);
    }
    const onnx::FunctionProto* proto = nullptr;
    for (const auto& f : saved_functions_)
      if (f.name() == fn.rest.name() && same_domain(f.domain(), fn.rest.domain())) proto = &f;
    if (proto == nullptr) return absl::InternalError("function not found after saving");
    onnx::ModelProto m;
    m.set_ir_version(model_.rest().ir_version());
    *m.mutable_opset_import() =
        proto->opset_import().empty() ? model_.rest().opset_import() : proto->opset_import();
    onnx::GraphProto* g = m.mutable_graph();
    g->set_name(proto->name());
    *g->mutable_node() = proto->node();
    resolve_attribute_refs(g->mutable_node(), caller);
    for (const auto& in : proto->input()) g->add_input()->set_name(in);
    for (const auto& out : proto->output()) g->add_output()->set_name(out);
    for (const auto& f : saved_functions_) *m.add_functions() = f;
    auto model = ir::Model::from_proto(std::move(m));
    if (!model.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("function ", fn.rest.name(), ": ", std::string(model.status().message())));
    (*model)->set_external_data(model_.external_data());  // Constant values may be external
    const ir::Model* result = model->get();
    instances_[key] = std::move(*model);
    return result;
  }

  // Scan: opset 9+ (state variables, then scan inputs along scan_input_axes, directions per
  // input and output) and opset 8 (optional sequence_lens, batch axis 0, sequence axis 1).
  absl::Status run_scan(const ir::Node& n, Env& env) {
    const ir::Graph* body = subgraph(n, "body");
    if (!body) return absl::InvalidArgumentError("Scan without a body");
    const int64_t m = n.attr_int("num_scan_inputs", -1);
    const bool v8 = n.opset() < 9;
    const int64_t first = v8 ? 1 : 0;  // position of the first state variable
    const int64_t count = static_cast<int64_t>(n.inputs().size()) - first;
    if (m < 1 || m > count) return absl::InvalidArgumentError("Scan: bad num_scan_inputs");
    const int64_t states = count - m;
    if (static_cast<int64_t>(body->inputs().size()) != count ||
        static_cast<int64_t>(body->outputs().size()) < states)
      return absl::InvalidArgumentError("Scan body signature does not match the node");
    const int64_t k_out = static_cast<int64_t>(body->outputs().size()) - states;
    if (static_cast<int64_t>(n.outputs().size()) > states + k_out)
      return absl::InvalidArgumentError("Scan has more outputs than its body");
    ASSIGN_OR_RETURN(auto args, gather_inputs(n, env));
    for (int64_t i = first; i < first + count; ++i)
      if (args[i] == nullptr) return absl::InvalidArgumentError("Scan input is missing");

    auto ints_attr = [&](const char* name, int64_t size) -> absl::StatusOr<std::vector<int64_t>> {
      std::vector<int64_t> v = n.attr_ints(name).value_or(std::vector<int64_t>(size, 0));
      if (static_cast<int64_t>(v.size()) != size)
        return absl::InvalidArgumentError(absl::StrCat("Scan: ", name, " needs ", size, " values"));
      return v;
    };
    ScanSpec spec;
    ASSIGN_OR_RETURN(spec.in_reverse, ints_attr(v8 ? "directions" : "scan_input_directions", m));
    if (v8) {
      spec.in_axes.assign(m, 0);
      spec.out_axes.assign(k_out, 0);
      spec.out_reverse.assign(k_out, 0);
    } else {
      ASSIGN_OR_RETURN(spec.in_axes, ints_attr("scan_input_axes", m));
      ASSIGN_OR_RETURN(spec.out_axes, ints_attr("scan_output_axes", k_out));
      ASSIGN_OR_RETURN(spec.out_reverse, ints_attr("scan_output_directions", k_out));
    }

    std::vector<Tensor> final_states(states);
    std::vector<Tensor> scan_outputs(k_out);
    if (!v8) {
      std::vector<Tensor> init;
      for (int64_t i = 0; i < states; ++i) init.push_back(*args[i]);
      std::vector<const Tensor*> inputs(args.begin() + states, args.end());
      int64_t length = -1;
      for (int64_t j = 0; j < m; ++j) {
        const Tensor& t = *inputs[j];
        int64_t& axis = spec.in_axes[j];
        if (axis < 0) axis += t.rank();
        if (axis < 0 || axis >= t.rank())
          return absl::InvalidArgumentError("Scan: scan_input_axes out of range");
        if (length >= 0 && t.dims()[axis] != length)
          return absl::InvalidArgumentError("Scan inputs differ in sequence length");
        length = t.dims()[axis];
      }
      std::vector<std::vector<Tensor>> parts;
      RETURN_IF_ERROR(
          scan_loop(*body, spec, std::move(init), inputs, length, env, &final_states, &parts));
      for (int64_t k = 0; k < k_out; ++k) {
        ASSIGN_OR_RETURN(scan_outputs[k],
                         stack_axis(parts[k], spec.out_axes[k], length, spec.out_reverse[k] != 0));
      }
    } else {
      // Opset 8: each batch entry is a separate scan over axis 1; results stack on axis 0.
      const Tensor& first_scan = *args[first + states];
      if (first_scan.rank() < 2) return absl::InvalidArgumentError("Scan inputs need rank >= 2");
      const int64_t batch = first_scan.dims()[0], max_len = first_scan.dims()[1];
      for (int64_t i = first; i < first + count; ++i) {
        const Tensor& t = *args[i];
        const bool scanned = i >= first + states;
        if (t.rank() < (scanned ? 2 : 1) || t.dims()[0] != batch ||
            (scanned && t.dims()[1] != max_len))
          return absl::InvalidArgumentError("Scan inputs differ in batch or sequence length");
      }
      std::vector<int64_t> lens(batch, max_len);
      if (const Tensor* l = args[0]) {
        if (l->size() != batch) return absl::InvalidArgumentError("Scan: sequence_lens size");
        for (int64_t b = 0; b < batch; ++b) {
          lens[b] = l->get_int64(b);
          if (lens[b] < 0 || lens[b] > max_len)
            return absl::InvalidArgumentError("Scan: sequence_lens out of range");
        }
      }
      std::vector<std::vector<Tensor>> per_batch_states(states), per_batch_outputs(k_out);
      for (int64_t b = 0; b < batch; ++b) {
        std::vector<Tensor> init;
        std::vector<Tensor> sliced;
        for (int64_t i = 0; i < states; ++i) {
          ASSIGN_OR_RETURN(Tensor t, slice_axis(*args[first + i], 0, b));
          init.push_back(std::move(t));
        }
        for (int64_t j = 0; j < m; ++j) {
          ASSIGN_OR_RETURN(Tensor t, slice_axis(*args[first + states + j], 0, b));
          sliced.push_back(std::move(t));
        }
        std::vector<const Tensor*> inputs;
        for (const auto& t : sliced) inputs.push_back(&t);
        std::vector<Tensor> finals(states);
        std::vector<std::vector<Tensor>> parts;
        RETURN_IF_ERROR(
            scan_loop(*body, spec, std::move(init), inputs, lens[b], env, &finals, &parts));
        for (int64_t i = 0; i < states; ++i) per_batch_states[i].push_back(std::move(finals[i]));
        for (int64_t k = 0; k < k_out; ++k) {
          ASSIGN_OR_RETURN(Tensor t, stack_axis(parts[k], 0, max_len, false));
          per_batch_outputs[k].push_back(std::move(t));
        }
      }
      for (int64_t i = 0; i < states; ++i) {
        ASSIGN_OR_RETURN(final_states[i], stack_axis(per_batch_states[i], 0, batch, false));
      }
      for (int64_t k = 0; k < k_out; ++k) {
        ASSIGN_OR_RETURN(scan_outputs[k], stack_axis(per_batch_outputs[k], 0, batch, false));
      }
    }
    for (int64_t i = 0; i < states; ++i)
      if (ir::Value* out = n.output(i)) env[out] = std::move(final_states[i]);
    for (int64_t k = 0; k < k_out; ++k)
      if (ir::Value* out = n.output(states + k)) env[out] = std::move(scan_outputs[k]);
    return absl::OkStatus();
  }

  struct ScanSpec {
    std::vector<int64_t> in_axes, in_reverse, out_axes, out_reverse;
  };

  // Runs `length` iterations of a Scan body: per-iteration slices of `inputs` along their axes,
  // states carried. `parts[k]` receives scan output k of each iteration in iteration order.
  absl::Status scan_loop(const ir::Graph& body, const ScanSpec& spec, std::vector<Tensor> state,
                         const std::vector<const Tensor*>& inputs, int64_t length, Env& env,
                         std::vector<Tensor>* final_states,
                         std::vector<std::vector<Tensor>>* parts) {
    const size_t states = state.size();
    const size_t k_out = body.outputs().size() - states;
    parts->assign(k_out, {});
    for (int64_t t = 0; t < length; ++t) {
      for (size_t i = 0; i < states; ++i) env[body.inputs()[i].value] = state[i];
      for (size_t j = 0; j < inputs.size(); ++j) {
        ASSIGN_OR_RETURN(
            env[body.inputs()[states + j].value],
            slice_axis(*inputs[j], spec.in_axes[j], spec.in_reverse[j] ? length - 1 - t : t));
      }
      RETURN_IF_ERROR(run_graph(body, env));
      for (size_t i = 0; i < states; ++i) {
        ASSIGN_OR_RETURN(const Tensor* v, get(body.outputs()[i].value, env));
        state[i] = *v;
      }
      for (size_t k = 0; k < k_out; ++k) {
        ASSIGN_OR_RETURN(const Tensor* v, get(body.outputs()[states + k].value, env));
        (*parts)[k].push_back(*v);
      }
    }
    *final_states = std::move(state);
    return absl::OkStatus();
  }

  // Copies `count` elements (strings too) between tensors of the same type.
  static void copy_elements(const Tensor& src, int64_t from, Tensor& dst, int64_t to,
                            int64_t count) {
    if (src.dtype() == onnx::TensorProto::STRING) {
      for (int64_t i = 0; i < count; ++i) dst.strings()[to + i] = src.strings()[from + i];
      return;
    }
    const size_t es = src.element_size();
    std::memcpy(dst.data<char>() + to * es, src.data<char>() + from * es, count * es);
  }

  // Element `index` along `axis` of `t` (that axis removed).
  absl::StatusOr<Tensor> slice_axis(const Tensor& t, int64_t axis, int64_t index) {
    if (axis < 0 || axis >= t.rank() || index < 0 || index >= t.dims()[axis])
      return absl::InvalidArgumentError("Scan: slice out of range");
    std::vector<int64_t> dims = t.dims();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= dims[d];
    for (int64_t d = axis + 1; d < t.rank(); ++d) inner *= dims[d];
    const int64_t n = dims[axis];
    dims.erase(dims.begin() + axis);
    ASSIGN_OR_RETURN(Tensor out, Tensor::zeros(t.dtype(), dims, limits_.max_tensor_bytes));
    for (int64_t o = 0; o < outer; ++o)
      copy_elements(t, (o * n + index) * inner, out, o * inner, inner);
    return out;
  }

  // Stacks `parts` (same shape) along a new axis `axis` of size `length` (negative: counted
  // from the end of the result's rank); part t goes to position t, or length - 1 - t when
  // `reverse`; positions past the parts stay zero (padding of shorter sequences).
  absl::StatusOr<Tensor> stack_axis(const std::vector<Tensor>& parts, int64_t axis, int64_t length,
                                    bool reverse) {
    if (parts.empty())
      return absl::UnimplementedError("Scan output with zero iterations (unknown shape)");
    std::vector<int64_t> dims = parts[0].dims();
    const int64_t rank = static_cast<int64_t>(dims.size()) + 1;
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank)
      return absl::InvalidArgumentError("Scan: output axis out of range");
    for (const auto& p : parts)
      if (p.dims() != dims || p.dtype() != parts[0].dtype())
        return absl::InvalidArgumentError("Scan outputs differ in shape or type across iterations");
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= dims[d];
    for (size_t d = axis; d < dims.size(); ++d) inner *= dims[d];
    dims.insert(dims.begin() + axis, length);
    ASSIGN_OR_RETURN(Tensor out, Tensor::zeros(parts[0].dtype(), dims, limits_.max_tensor_bytes));
    for (size_t t = 0; t < parts.size(); ++t) {
      const int64_t pos = reverse ? length - 1 - static_cast<int64_t>(t) : static_cast<int64_t>(t);
      for (int64_t o = 0; o < outer; ++o)
        copy_elements(parts[t], o * inner, out, (o * length + pos) * inner, inner);
    }
    return out;
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
    ASSIGN_OR_RETURN(Tensor out, Tensor::zeros(parts[0].dtype(), dims, limits_.max_tensor_bytes));
    size_t offset = 0;
    for (const auto& p : parts) {
      std::memcpy(out.data<char>() + offset, p.data<char>(), p.bytes());
      offset += p.bytes();
    }
    return out;
  }

  const ir::Model& model_;
  Limits limits_;
  std::unordered_map<const ir::Graph*, Plan> plans_;
  int depth_;
  // Unbound optional inputs of function bodies: nodes see them as absent.
  std::unordered_set<const ir::Value*> absent_;
  const ValueObserver* observer_ = nullptr;
  std::vector<onnx::FunctionProto> saved_functions_;
  std::map<std::string, std::unique_ptr<ir::Model>> instances_;
};

}  // namespace

absl::StatusOr<std::vector<Tensor>> run_model(const ir::Model& model,
                                              const std::map<std::string, Tensor>& feeds,
                                              const Limits& limits, RunStats* stats) {
  return run_model(model, feeds, limits, stats, nullptr);
}

absl::StatusOr<std::vector<Tensor>> run_model(const ir::Model& model,
                                              const std::map<std::string, Tensor>& feeds,
                                              const Limits& limits, RunStats* stats,
                                              const ValueObserver* observer) {
  std::function<absl::Status()> poll;
  if (limits.should_continue && *limits.should_continue) poll = *limits.should_continue;
  auto budget = Budget::make(limits.max_live_bytes, limits.max_work, std::move(poll));
  BudgetScope scope(budget.get());
  // Runs after the environment below is gone: what the run held is free by then.
  struct Report {
    const Budget& budget;
    RunStats* stats;
    ~Report() {
      if (stats) *stats = {budget.peak_bytes(), budget.work()};
      memory::after_large_run(budget.peak_bytes());
    }
  } report{*budget, stats};
  // Declared after the budget: the environment's tensors release their charge into it.
  Env env;
  const ir::Graph& g = model.graph();
  try {
    for (const auto& in : g.inputs()) {
      auto it = feeds.find(in.value->name());
      if (it != feeds.end()) {
        env[in.value] = it->second;
      } else if (!in.value->is_initializer()) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph input '", in.value->name(), "' is not fed"));
      }
    }
    Executor exec(model, limits, 0);
    exec.set_observer(observer);
    if (observer && *observer)
      for (const auto& in : g.inputs())
        if (auto it = env.find(in.value); it != env.end()) (*observer)(*in.value, it->second);
    RETURN_IF_ERROR(exec.run_graph(g, env));
    std::vector<Tensor> outputs;
    for (const auto& out : g.outputs()) {
      auto it = env.find(out.value);
      if (it == env.end())
        return absl::InternalError(absl::StrCat("output '", out.value->name(), "' not computed"));
      // Moved, not copied (a copy would count twice against the budget), unless the graph
      // lists the same value again later.
      bool again = false;
      for (size_t k = outputs.size() + 1; k < g.outputs().size(); ++k)
        again = again || g.outputs()[k].value == out.value;
      outputs.push_back(again ? it->second : std::move(it->second));
    }
    return outputs;
  } catch (const Stop& stop) {
    return stop.status();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("the evaluator ran out of memory");
  }
}

}  // namespace graft::eval
