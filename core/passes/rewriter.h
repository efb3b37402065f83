// The rewriter: every edit a pass makes goes through it, so an edit cannot leave the graph
// half-done (a used value without a producer, a graph output renamed, a dangling constant).
//
//  - replace_all_uses(from, to): readers of `from` read `to`. Names that are interface — the
//    outputs of `from`'s own graph — stay: the name moves onto `to`'s producer when it can, else
//    an Identity(to) produces it (or nothing changes, if the caller forbids the Identity).
//  - replace_node(node, replacements): each output of `node` replaced, then `node` erased.
//  - erase(node): removes a node whose outputs nobody reads, then the Constant nodes and
//    initializers that only it read.
//  - add_node / add_constant: new nodes and values named after the node they replace.
//
// Edits are transactional: a Transaction (a checkpoint of the model's journal, ir::Model) undoes
// every edit made after it unless committed, so a rule or pass that gives up half-way leaves the
// model exactly as it was. The rule driver (rules.h) opens one around every rule it tries, and
// listens to the edits to re-queue what changed.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <onnx/onnx_pb.h>

#include "core/ir/model.h"

namespace graft {

class Rewriter {
 public:
  explicit Rewriter(ir::Model& model) : model_(model) {}
  ir::Model& model() { return model_; }

  // Every edit after construction is undone by rollback() or the destructor unless commit() is
  // called first. Transactions nest.
  class Transaction {
   public:
    explicit Transaction(Rewriter& rw)
        : rw_(rw), checkpoint_(rw.model_.checkpoint()), added_(rw.added_log_.size()) {}
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    ~Transaction() { rollback(); }
    // Keeps the edits.
    void commit();
    // Undoes the edits (nothing after commit()).
    void rollback();
    // Whether an edit was made since the transaction began (undone or not).
    bool edited() const;

   private:
    Rewriter& rw_;
    ir::Model::Checkpoint checkpoint_;
    size_t added_;
    bool open_ = true;
  };

  // Called with every node added or whose inputs or attributes changed, and with the readers of
  // every replaced value.
  std::function<void(ir::Node*)> on_touch;

  // Every reader of `from` (nodes in any graph, outputs of nested graphs) reads `to` instead.
  // When `to` is computed by a node this rewriter added, it takes `from`'s name.
  // When `from` is an output of its own graph, the graph keeps the output name: `to`'s producer
  // is renamed to output `from` when `to` is a node output of that same graph that is not
  // itself one of its outputs; otherwise an Identity is inserted if `allow_identity`, else
  // nothing changes and false is returned.
  // With `keep_name`, `from`'s name moves onto `to`'s producer whenever it can, interface or
  // not (for readable results, e.g. an inlined branch keeping the If's output names).
  bool replace_all_uses(ir::Value* from, ir::Value* to, bool allow_identity = true,
                        bool keep_name = false);

  // Replaces each output i of `node` by replacements[i] (nullptr: the output must be unused),
  // then erases `node`. False, with nothing changed, when an output cannot be replaced (see
  // replace_all_uses with allow_identity).
  bool replace_node(ir::Node* node, const std::vector<ir::Value*>& replacements,
                    bool allow_identity = true);

  // Removes `node` if none of its outputs is read (false otherwise), then every Constant node and
  // initializer (not a graph input) that no longer has a reader.
  bool erase(ir::Node* node);
  // Removes an initializer or Constant-produced value nobody reads (and its Constant node).
  void erase_if_unused(ir::Value* v);
  // After a rewrite stopped reading `v`: erases v's producer if none of its outputs is read any
  // more (nor a graph output), then likewise the producers of its inputs, recursively. What
  // would otherwise stay until prune, and meanwhile count as readers of the values it reads
  // (single_use), hiding them from the fusions that run before prune.
  void erase_unread_producers(ir::Value* v);

  // A node in graph `g` computing `op` from `inputs`, with `outputs` fresh outputs. Names derive
  // from `origin` (the node being replaced) when given.
  ir::Node* add_node(ir::Graph& g, std::string_view op, const std::vector<ir::Value*>& inputs,
                     size_t outputs = 1, const ir::Node* origin = nullptr,
                     std::string_view domain = "");
  // A constant readable in `g`: an initializer where the model and graph allow new ones (see
  // can_hold_new_initializers), else a Constant node.
  ir::Value* add_constant(ir::Graph& g, onnx::TensorProto tensor, std::string_view name_hint);

  // `node`'s single output becomes the constant `tensor` (same name and readers): an
  // initializer where the graph may hold new ones, else a Constant node. Then as erase().
  bool replace_with_constant(ir::Node* node, onnx::TensorProto tensor);
  // The same for every output of `node` (tensors[i] for output i; unused outputs are dropped).
  bool replace_with_constants(ir::Node* node, std::vector<onnx::TensorProto> tensors);

  // In-place edits (the node's outputs change meaning; their facts are dropped). A constant
  // input left without readers is erased.
  void set_input(ir::Node* node, size_t index, ir::Value* v);
  // All of `node`'s inputs (the old ones past the new count are dropped).
  void set_inputs(ir::Node* node, const std::vector<ir::Value*>& inputs);
  void set_attr(ir::Node* node, onnx::AttributeProto attr);
  void remove_attr(ir::Node* node, std::string_view name);

  // Positional interfaces of subgraphs and their nodes (a Loop's carried values: its inputs and
  // outputs, its body's inputs and outputs, removed together; the caller keeps the op's meaning).
  // Removes unread output `i` of `node` (later outputs move down one); false while it is read.
  bool remove_output(ir::Node* node, size_t i);
  // Removes output `i` of subgraph `g`, then the nodes that computed only it (false for a graph
  // that is not a subgraph: a model's interface is its user's).
  bool remove_graph_output(ir::Graph& g, size_t i);
  // Removes unread input `i` of subgraph `g`; false while it is read, or for a main graph.
  bool remove_graph_input(ir::Graph& g, size_t i);

 private:
  void touch(ir::Node* n) {
    if (on_touch && n && !n->dead()) on_touch(n);
  }
  void touch_readers(const ir::Value* v);
  // `v` lost a reader: erased if now unused (erase_if_unused), else its producer is touched.
  void lost_reader(ir::Value* v);
  ir::Model& model_;
  // Nodes this rewriter added: a value they compute takes the name of the value it replaces.
  std::unordered_set<const ir::Node*> added_;
  std::vector<const ir::Node*> added_log_;  // the same, in order, while a transaction is open
};

// Whether a new initializer may be added to `g`: the model's IR allows it (IR >= 4, where
// initializers need not be graph inputs) and `g` is the main graph or nested in it (function
// bodies cannot hold initializers). Elsewhere a constant must be a Constant node.
bool can_hold_new_initializers(const ir::Model& model, const ir::Graph* g);

// The "value" attribute of a Constant node holding `tensor`.
onnx::AttributeProto constant_value_attr(onnx::TensorProto tensor);

}  // namespace graft
