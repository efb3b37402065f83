// Calls of model-local functions become the nodes of the function's body: the formal inputs
// read the call's actual inputs, the call's outputs are the body's results, and attribute
// references (`ref_attr_name`) take the call's attributes. Exporters (PyTorch's dynamo exporter,
// ONNX Script) wrap modules in functions; inlined, their nodes are open to every other pass and
// to runtimes that do not optimize across calls. Exact: the same nodes compute the same values.
//
//  - Every copied value gets a fresh model-wide name (Graph::copy_nodes), nested subgraphs
//    included, so a body name never clashes with or shadows one at the call site. The call's
//    output names are kept (graph outputs too).
//  - An attribute reference the call does not set is dropped, so the op's default applies (as
//    the ONNX IR says for IR 8, and as the reference evaluator runs calls). A reference whose
//    declared type differs from the call's attribute, or to a graph attribute, leaves the call.
//  - A missing optional input (empty name or past the call's inputs) makes the formal absent:
//    the body's nodes see an absent input (a call is left when that input is one a body op
//    requires). A missing output is simply not used. A call whose
//    used output is an unbound formal, or with more inputs or outputs than the function, stays.
//  - Opsets: a function is inlined into a graph only where every domain it imports or uses
//    resolves to the same version as in the function; a domain the target does not import is
//    added at the function's version. A model's opset is never raised and no op changes version.
//  - Nested calls are inlined callees first (each body once), so a call of a function calling
//    others becomes their nodes in one run. Functions on a call cycle, or calling one (ONNX
//    forbids recursion; a hostile model may have it anyway), are never inlined. Calls inside If
//    branches and Loop/Scan bodies are inlined too.
//  - Growth: nothing is inlined unless the model with every call expanded stays within
//    max_growth times its size (64 bytes per node plus its attributes' bytes, so a large
//    Constant called many times counts; 1 MiB always fits). Hostile models nest calls to grow
//    exponentially; all or nothing keeps the decision the same in every pipeline round.
//  - Left alone: functions in the ONNX domains (a runtime may bind the standard op instead),
//    functions with fields newer than libonnx 1.12 knows (attribute defaults, overloads), two
//    functions of the same name, calls holding subgraph attributes.
//
// Functions that had calls and have none left are removed, with the model's import of their
// domain when nothing else uses it. keep_functions=true turns the pass off.
#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/ir/operands.h"
#include "core/ir/saturating.h"
#include "core/passes/passes.h"
#include "core/passes/rewriter.h"

namespace graft {

namespace {

constexpr char kKeepFunctions[] = "keep_functions";
constexpr char kMaxGrowth[] = "max_growth";
// Below this many size units (see node_size) the budget never stops inlining.
constexpr uint64_t kAlwaysAllowedSize = 1 << 20;

using FunctionKey = std::pair<std::string, std::string>;  // domain ("" for ai.onnx), name

std::string normal_domain(std::string_view d) {
  return ir::is_onnx_domain(d) ? std::string() : std::string(d);
}

bool standard_domain(std::string_view d) {
  return ir::is_onnx_domain(d) || d == "ai.onnx.ml" || d == "ai.onnx.preview.training";
}

// Every graph under `root` (itself included), parents first.
std::vector<ir::Graph*> graph_tree(ir::Graph* root) {
  std::vector<ir::Graph*> out{root};
  for (size_t i = 0; i < out.size(); ++i)
    for (ir::Node* n : out[i]->nodes())
      for (const auto& sub : n->subgraphs()) out.push_back(sub.graph.get());
  return out;
}

// What a node costs to hold: a fixed share plus its proto's bytes (attribute tensors, strings).
uint64_t node_size(const ir::Node& n) { return 64 + n.proto().ByteSizeLong(); }

struct FunctionInfo {
  ir::Function* fn = nullptr;
  bool eligible = false;        // may be inlined somewhere (not counting opsets and the budget)
  std::vector<size_t> callees;  // indices into the pass's function list, with repeats
  // Attribute references in the body (any depth): referenced name, declared type.
  std::vector<std::pair<std::string, int>> refs;
  std::vector<std::string> domains;  // imported or used by the body's nodes (normalised)
  // Size (node_size summed) of the body with every call of an eligible function expanded.
  uint64_t expanded = 0;
  bool called_before = false;
};

class InlineFunctions final : public Pass {
 public:
  std::string_view name() const override { return "inline_functions"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    PassResult result;
    if (ctx.bool_option(kKeepFunctions) || model.functions().empty()) return result;
    model_ = &model;
    Rewriter rw(model);
    rw_ = &rw;
    collect(model);
    // All or nothing: the model with every eligible call expanded must fit the budget. Inlining
    // does not change that expanded size, so a later round decides the same way: the model can
    // never grow by max_growth once per round.
    uint64_t now = 0, expanded = expanded_size(&model.graph());
    for (ir::Graph* g : model.all_graphs())
      for (const ir::Node* n : g->nodes()) now = sat_add(now, node_size(*n));
    for (const FunctionInfo& info : infos_)
      if (!info.eligible || !info.called_before)
        expanded = sat_add(expanded, expanded_size(info.fn->body.get()));
    const uint64_t growth = static_cast<uint64_t>(ctx.int_option(kMaxGrowth));
    const uint64_t budget = std::max<uint64_t>(kAlwaysAllowedSize, sat_mul(now, growth));
    if (expanded > budget) return result;

    // Bodies first, callees before callers, so each body is flat before it is copied anywhere;
    // then the main graph.
    for (size_t f : order_) inline_calls(model.functions()[f].body.get(), result);
    inline_calls(&model.graph(), result);
    if (remove_unused_functions(model)) result.changed = true;
    return result;
  }

 private:
  void collect(ir::Model& model) {
    auto& fns = model.functions();
    infos_.assign(fns.size(), {});
    std::map<FunctionKey, size_t> count;
    for (size_t i = 0; i < fns.size(); ++i) {
      infos_[i].fn = &fns[i];
      ++count[{normal_domain(fns[i].rest.domain()), fns[i].rest.name()}];
    }
    index_.clear();
    for (size_t i = 0; i < fns.size(); ++i) {
      FunctionKey key{normal_domain(fns[i].rest.domain()), fns[i].rest.name()};
      if (count[key] == 1) index_[key] = i;
    }
    for (size_t i = 0; i < fns.size(); ++i) {
      FunctionInfo& info = infos_[i];
      const ir::Function& fn = fns[i];
      std::unordered_set<std::string> domains;
      for (const auto& op : fn.rest.opset_import()) domains.insert(normal_domain(op.domain()));
      bool readable = true;
      for (ir::Graph* g : graph_tree(fn.body.get())) {
        if (g->rest().sparse_initializer_size() > 0 || !g->initializers().empty()) readable = false;
        for (ir::Node* n : g->nodes()) {
          domains.insert(normal_domain(n->domain()));
          for (const auto& a : n->attributes()) {
            if (a.ref_attr_name().empty()) continue;
            if (a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS)
              readable = false;
            info.refs.emplace_back(a.ref_attr_name(), static_cast<int>(a.type()));
          }
          if (auto callee = find(*n)) info.callees.push_back(*callee);
        }
      }
      info.domains.assign(domains.begin(), domains.end());
      std::sort(info.domains.begin(), info.domains.end());
      info.eligible = readable && !standard_domain(fn.rest.domain()) &&
                      index_.count({normal_domain(fn.rest.domain()), fn.rest.name()}) &&
                      fn.rest.unknown_fields().empty();
      for (size_t c : info.callees) infos_[c].called_before = true;
    }
    for (ir::Graph* g : graph_tree(&model.graph()))
      for (ir::Node* n : g->nodes())
        if (auto callee = find(*n)) infos_[*callee].called_before = true;

    // Kahn's algorithm over "calls": a function comes after every function it calls. Functions
    // on a cycle, or calling one, never become ready: they are not inlined.
    std::vector<size_t> pending(fns.size());
    std::vector<std::vector<size_t>> callers(fns.size());
    for (size_t i = 0; i < fns.size(); ++i) {
      std::vector<size_t> distinct = infos_[i].callees;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      pending[i] = distinct.size();
      for (size_t c : distinct) callers[c].push_back(i);
    }
    order_.clear();
    std::deque<size_t> ready;
    for (size_t i = 0; i < fns.size(); ++i)
      if (pending[i] == 0) ready.push_back(i);
    std::vector<bool> acyclic(fns.size(), false);
    while (!ready.empty()) {
      size_t f = ready.front();
      ready.pop_front();
      acyclic[f] = true;
      order_.push_back(f);
      for (size_t caller : callers[f])
        if (--pending[caller] == 0) ready.push_back(caller);
    }
    for (size_t i = 0; i < fns.size(); ++i) {
      if (acyclic[i]) continue;
      infos_[i].eligible = false;
      order_.push_back(i);  // calls of acyclic functions in its body are still inlined
    }
    for (size_t f : order_) infos_[f].expanded = expanded_size(fns[f].body.get());
  }

  // Size of the graphs under `root` with every call of an eligible function expanded (callees'
  // `expanded` must be known: order_ computes them callees first).
  uint64_t expanded_size(ir::Graph* root) const {
    uint64_t size = 0;
    for (ir::Graph* g : graph_tree(root))
      for (const ir::Node* n : g->nodes()) {
        auto f = find(*n);
        size = sat_add(size, f && infos_[*f].eligible ? infos_[*f].expanded : node_size(*n));
      }
    return size;
  }

  std::optional<size_t> find(const ir::Node& n) const {
    auto it = index_.find({normal_domain(n.domain()), n.op_type()});
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }

  // The root graph (main graph or a function body) enclosing `g`, and its import list.
  static const ir::Graph* root_of(const ir::Graph* g) {
    while (g->parent()) g = g->parent()->graph();
    return g;
  }

  // Whether `info`'s body resolves every domain it imports or uses to the version it has in
  // `root`; the domains `root` does not import yet are returned in `missing` (with versions).
  static bool opsets_compatible(const FunctionInfo& info, const ir::Graph& root,
                                std::vector<std::pair<std::string, int64_t>>& missing) {
    missing.clear();
    for (const std::string& d : info.domains) {
      const int64_t own = info.fn->body->opset(d);
      const int64_t there = root.opset(d);
      if (own == there) continue;
      if (there != 0 || own == 0) return false;
      missing.emplace_back(d, own);
    }
    return true;
  }

  // Whether a node of `root` or of a subgraph in it is of `domain` (normalized).
  static bool uses_domain(const ir::Graph& root, const std::string& domain) {
    std::vector<const ir::Graph*> graphs = {&root};
    while (!graphs.empty()) {
      const ir::Graph* g = graphs.back();
      graphs.pop_back();
      for (const ir::Node* n : g->nodes()) {
        if (normal_domain(n->domain()) == domain) return true;
        for (const auto& sub : n->subgraphs()) graphs.push_back(sub.graph.get());
      }
    }
    return false;
  }

  // Whether the call's attributes can stand for every reference of the body. A call in a
  // function body may pass a reference of its own on; elsewhere a reference is invalid.
  static bool attributes_fit(const FunctionInfo& info, const ir::Node& call, bool in_function) {
    for (const auto& [ref, type] : info.refs) {
      const onnx::AttributeProto* a = call.attr(ref);
      if (!a) continue;
      if (type != onnx::AttributeProto::UNDEFINED && a->type() != type) return false;
      if (!in_function && !a->ref_attr_name().empty()) return false;
    }
    return true;
  }

  // Attribute references of `n` (and of the nodes of its subgraphs) take the call's attributes.
  static void substitute(ir::Node* n, const ir::Node& call) {
    bool refs = false;
    for (const auto& a : n->attributes()) refs |= !a.ref_attr_name().empty();
    if (refs) {
      auto* attrs = n->mutable_proto().mutable_attribute();
      for (int i = 0; i < attrs->size();) {
        onnx::AttributeProto* a = attrs->Mutable(i);
        if (a->ref_attr_name().empty()) {
          ++i;
          continue;
        }
        const onnx::AttributeProto* value = call.attr(a->ref_attr_name());
        if (!value) {
          attrs->DeleteSubrange(i, 1);
          continue;
        }
        std::string name = a->name();
        *a = *value;
        a->set_name(name);
        ++i;
      }
    }
    for (const auto& sub : n->subgraphs())
      for (ir::Node* inner : sub.graph->nodes()) substitute(inner, call);
  }

  void inline_calls(ir::Graph* root, PassResult& result) {
    for (ir::Graph* g : graph_tree(root))
      for (ir::Node* n : g->nodes())
        if (!n->dead())
          if (auto f = find(*n); f && infos_[*f].eligible && inline_call(*g, n, infos_[*f]))
            result.add();
  }

  // Every node in `nodes` and in their subgraphs has the inputs its schema requires.
  static bool operands_fit(const std::vector<ir::Node*>& nodes) {
    std::vector<const ir::Node*> stack(nodes.begin(), nodes.end());
    while (!stack.empty()) {
      const ir::Node* n = stack.back();
      stack.pop_back();
      if (!ir::check_operands(*n).ok()) return false;
      for (const auto& sub : n->subgraphs())
        for (const ir::Node* inner : sub.graph->nodes()) stack.push_back(inner);
    }
    return true;
  }

  bool inline_call(ir::Graph& g, ir::Node* call, const FunctionInfo& info) {
    const ir::Graph& body = *info.fn->body;
    if (call->inputs().size() > body.inputs().size() ||
        call->outputs().size() > body.outputs().size() || !call->subgraphs().empty() ||
        !attributes_fit(info, *call, root_of(&g) != &model_->graph()))
      return false;
    if (info.fn->body.get() == root_of(&g)) return false;  // never into itself
    std::vector<std::pair<std::string, int64_t>> missing;
    if (!opsets_compatible(info, *root_of(&g), missing)) return false;
    // A domain the target does not import but its own nodes already use (a model without an
    // import for the default domain, say) is not added: the import would give those nodes a
    // version, and with it rules they were never held to (a malformed If would become invalid).
    for (const auto& [domain, version] : missing)
      if (uses_domain(*root_of(&g), domain)) return false;

    // Body values -> what the copy reads or computes instead: formals -> actuals.
    std::unordered_map<const ir::Value*, ir::Value*> values;
    for (size_t i = 0; i < body.inputs().size(); ++i)
      values[body.inputs()[i].value] = call->input(i);  // nullptr: absent
    for (size_t i = 0; i < call->outputs().size(); ++i) {
      const ir::Value* result = body.outputs()[i].value;
      auto formal = values.find(result);
      if (call->output(i) && formal != values.end() && !formal->second) return false;
    }
    std::vector<const ir::Node*> srcs;
    for (const ir::Node* n : body.nodes()) srcs.push_back(n);
    std::vector<ir::Node*> copies = g.copy_nodes(srcs, [&](ir::Value* v) -> ir::Value* {
      auto it = values.find(v);
      return it == values.end() ? nullptr : it->second;
    });
    if (!srcs.empty() && copies.empty()) return false;
    // The imports the copies need come first: a node's version, and with it what its schema
    // requires, comes from its graph's imports (in a graph that did not import the default
    // domain, a copied Max had no version and no rules until the import gave it both).
    const ir::Graph* root = root_of(&g);
    if (!missing.empty())
      model_->edit_opset_imports(root, [&](ir::Model::OpsetImports& imports) {
        for (const auto& [domain, version] : missing) {
          auto* op = imports.Add();
          op->set_domain(domain);
          op->set_version(version);
        }
      });
    // A formal the call leaves absent may feed an input the body's op requires (a call that is
    // not valid ONNX, or a hostile one): the copies would not be a valid model. They and the
    // imports just added (the last ones) go again and the call stays.
    if (!operands_fit(copies)) {
      for (auto it = copies.rbegin(); it != copies.rend(); ++it) rw_->erase(*it);
      if (!missing.empty())
        model_->edit_opset_imports(root, [&](ir::Model::OpsetImports& imports) {
          const int added = static_cast<int>(missing.size());
          imports.DeleteSubrange(imports.size() - added, added);
        });
      return false;
    }
    std::unordered_set<const ir::Node*> created;
    for (size_t k = 0; k < srcs.size(); ++k) {
      created.insert(copies[k]);
      substitute(copies[k], *call);
      for (size_t i = 0; i < srcs[k]->outputs().size(); ++i)
        if (ir::Value* out = srcs[k]->output(i)) values[out] = copies[k]->output(i);
    }
    // The call's outputs take over the body's results; a name moves onto the copied node
    // computing it (once: a result listed twice makes the second output read the first), or an
    // Identity keeps an interface name.
    for (size_t i = 0; i < call->outputs().size(); ++i) {
      ir::Value* out = call->output(i);
      if (!out) continue;
      const ir::Value* body_out = body.outputs()[i].value;
      ir::Value* result = values[body_out];
      ir::Node* p = result->producer();
      rw_->replace_all_uses(out, result, /*allow_identity=*/true,
                            /*keep_name=*/p && created.count(p) > 0);
      if (result->dead()) values[body_out] = out;  // renamed to `out`
    }
    rw_->erase(call);
    return true;
  }

  // Removes the functions that had calls before and have none now (a removed body's calls no
  // longer count), and the model's imports of domains nothing uses any more.
  bool remove_unused_functions(ir::Model& model) {
    auto& fns = model.functions();
    std::vector<size_t> calls(fns.size(), 0);
    std::vector<std::vector<size_t>> callees(fns.size());
    for (ir::Graph* g : graph_tree(&model.graph()))
      for (ir::Node* n : g->nodes())
        if (auto f = find(*n)) ++calls[*f];
    for (size_t i = 0; i < fns.size(); ++i)
      for (ir::Graph* g : graph_tree(fns[i].body.get()))
        for (ir::Node* n : g->nodes())
          if (auto f = find(*n)) {
            ++calls[*f];
            callees[i].push_back(*f);
          }
    std::vector<bool> removed(fns.size(), false);
    std::vector<size_t> work;
    for (size_t i = 0; i < fns.size(); ++i)
      if (infos_[i].called_before && calls[i] == 0) work.push_back(i);
    while (!work.empty()) {
      size_t f = work.back();
      work.pop_back();
      if (removed[f]) continue;
      removed[f] = true;
      for (size_t c : callees[f])
        if (--calls[c] == 0 && infos_[c].called_before) work.push_back(c);
    }
    if (std::find(removed.begin(), removed.end(), true) == removed.end()) return false;
    std::unordered_set<std::string> dropped_domains;
    std::vector<ir::Function> kept;
    for (size_t i = 0; i < fns.size(); ++i) {
      if (removed[i])
        dropped_domains.insert(fns[i].rest.domain());
      else
        kept.push_back(std::move(fns[i]));
    }
    fns = std::move(kept);
    index_.clear();  // indices no longer hold
    // Imports of the removed functions' domains that no node and no function uses any more.
    for (const auto& fn : fns) dropped_domains.erase(fn.rest.domain());
    for (ir::Graph* g : model.all_graphs())
      for (ir::Node* n : g->nodes()) dropped_domains.erase(n->domain());
    model.edit_opset_imports(nullptr, [&](ir::Model::OpsetImports& imports) {
      for (int i = imports.size() - 1; i >= 0; --i)
        if (!standard_domain(imports.Get(i).domain()) &&
            dropped_domains.count(imports.Get(i).domain()))
          imports.DeleteSubrange(i, 1);
    });
    model.touch();
    return true;
  }

  ir::Model* model_ = nullptr;
  Rewriter* rw_ = nullptr;
  std::vector<FunctionInfo> infos_;
  std::map<FunctionKey, size_t> index_;
  std::vector<size_t> order_;  // callees before callers; cyclic ones last
};

}  // namespace

PassInfo inline_functions_pass() {
  return describe<InlineFunctions>(
      {.name = "inline_functions",
       .level = 2,
       .description = "calls of model-local functions become the nodes of their bodies "
                      "(nested calls too); functions left without calls are removed",
       .options = {boolean_option(kKeepFunctions, false,
                                  "keep every function call as it is (turns the pass off)"),
                   integer_option(kMaxGrowth, 8, 1, 1 << 20,
                                  "inline only if the model with every call expanded is at "
                                  "most this many times its size (nodes counted with their "
                                  "attributes' bytes; 1 MiB always fits)")}});
}

}  // namespace graft
