// Graft's graph IR: a Model owns a main Graph and model-local functions; a Graph owns Nodes and
// the Values they define; Values know their producer and every use (also uses from nested
// subgraphs, which capture outer values by name in ONNX).
//
// Everything the IR does not model explicitly (doc strings, metadata, unknown fields,
// quantization annotations, training info) stays in "rest" protos with the modelled fields
// cleared, so a load/save round trip is lossless. Sparse initializers are loaded as dense
// initializers marked Value::stored_sparse (saved sparse again), except those whose values or
// indices are external data: those stay opaque in the graph's rest (named values without a
// tensor, which passes leave alone).
//
// Mutation rules for passes:
//  - nodes() returns a snapshot (a copy) in topological order; mutating while iterating it is
//    safe. Removed nodes/values are marked dead and freed only by compact().
//  - Nodes added during a pass are appended; the pipeline re-sorts (finalize()) after the pass.
//  - Edits can be undone: between Model::checkpoint() and its rollback() or release(), every
//    mutation of a graph (nodes, values, uses, attributes, initializers, names, types, graph
//    outputs) records its inverse in the model's journal. Rolling back restores the graphs,
//    the names in use, the shape facts and generation() exactly as they were at the checkpoint.
//    Opset imports and the IR version are changed through edit_opset_imports / set_ir_version,
//    journaled the same way. The functions list is not journaled.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <onnx/onnx_pb.h>

#include "core/ir/external_data.h"
#include "core/ir/shapes.h"
#include "core/ir/tensor.h"

namespace graft::ir {

class Graph;
class Model;
struct Function;
class Node;

struct Use {
  Node* node;
  int index;  // input slot of `node`
  bool operator==(const Use&) const = default;
};

class Value {
 public:
  const std::string& name() const { return name_; }
  Graph* owner() const { return owner_; }
  Node* producer() const { return producer_; }
  int producer_index() const { return producer_index_; }
  const std::vector<Use>& uses() const { return uses_; }
  bool dead() const { return dead_; }

  bool is_graph_input() const { return graph_input_; }
  // True if some graph (its own or a nested one) lists this value as an output.
  bool is_graph_output() const { return !output_refs_.empty(); }
  // The graphs (and output positions) listing this value as an output.
  const std::vector<std::pair<Graph*, int>>& output_refs() const { return output_refs_; }
  // True if `graph` itself (not a nested subgraph) lists this value among its outputs.
  bool is_output_of(const Graph& graph) const {
    for (const auto& ref : output_refs_)
      if (ref.first == &graph) return true;
    return false;
  }
  bool is_initializer() const { return initializer_ != nullptr; }
  // True for values whose content is fixed at load time (initializers that are not also graph
  // inputs: an initializer listed as a graph input is only a default that callers may override).
  bool is_constant() const { return initializer_ != nullptr && !graph_input_; }
  const onnx::TensorProto* initializer() const { return initializer_.get(); }
  const std::shared_ptr<const onnx::TensorProto>& shared_initializer() const {
    return initializer_;
  }
  // Replaces the tensor of an existing initializer (its name is forced to this value's name).
  // Whether it is stored sparse stays as it was.
  void set_initializer(onnx::TensorProto tensor);
  // An initializer saved as an ONNX sparse initializer (graph.sparse_initializer, COO: sparse.h)
  // rather than a dense one: loaded from one, or chosen by store_sparse. Storage only: the IR,
  // the passes and the evaluator see the dense tensor. Saving writes it sparse when its tensor
  // can be (sparse_size), dense otherwise. Journaled.
  bool stored_sparse() const { return stored_sparse_; }
  void set_stored_sparse(bool sparse);

  // Declared type: value_info entry, graph input/output declaration, or initializer.
  const onnx::TypeProto* type() const;
  // What is known of the tensor this value computes (shapes.h): declarations, ONNX inference
  // and Graft's rules combined. Computed lazily; valid across rewrites.
  const TensorFact& fact() const;
  // Element type (TensorProto::DataType) if known, else 0 (from fact()).
  int32_t elem_type() const { return fact().elem_type; }
  // Static shape if every dim is known (from fact()).
  std::optional<std::vector<int64_t>> static_shape() const { return fact().static_shape(); }
  std::optional<int64_t> rank() const { return fact().rank(); }
  // Records a type for this value (creates or replaces its value_info entry).
  void set_type(const onnx::TypeProto& type);
  const onnx::ValueInfoProto* value_info() const { return info_.get(); }

  // Number of uses by nodes plus references as graph outputs.
  size_t use_count() const { return uses_.size() + output_refs_.size(); }

 private:
  friend class Graph;
  friend class Node;
  friend class Model;
  friend class Loader;
  friend class Cloner;
  friend class NodeCopier;
  friend class FactEngine;
  friend bool fact_exact(const Value& v);
  // Forgets what is known of this value (its meaning changed in place).
  void drop_fact();
  // Use list maintenance in O(1): each node input slot remembers its entry's position.
  void add_use(Node* node, int index);
  void remove_use(Node* node, int index);

  std::string name_;
  Graph* owner_ = nullptr;
  Node* producer_ = nullptr;
  int producer_index_ = -1;
  std::vector<Use> uses_;
  std::vector<std::pair<Graph*, int>> output_refs_;  // graph outputs naming this value
  bool graph_input_ = false;
  bool dead_ = false;
  bool stored_sparse_ = false;
  std::shared_ptr<const onnx::TensorProto> initializer_;
  mutable std::unique_ptr<onnx::TypeProto> initializer_type_;  // derived, cached
  std::unique_ptr<onnx::ValueInfoProto> info_;                 // graph value_info entry
  int64_t info_order_ = 0;
  int64_t init_order_ = 0;
  mutable TensorFact fact_;               // see shapes.h
  mutable uint64_t fact_gen_ = 0;         // model generation fact_ was computed at; 0: never
  mutable bool fact_busy_ = false;        // on the stack of the fact computation
  mutable bool fact_exact_ = false;       // libonnx's inference could not tell more (shapes.cc)
  std::unique_ptr<TensorFact> inferred_;  // from libonnx's inference, when it ran
  mutable size_t scratch_ = 0;            // per-algorithm counter (verification)
  mutable Value* twin_ = nullptr;         // the copy being made by a clone
};

// A subgraph held by a node attribute (If branches, Loop/Scan bodies).
struct Subgraph {
  std::string attr_name;
  int index = -1;  // -1 for a GRAPH attribute, else position in a GRAPHS attribute
  std::unique_ptr<Graph> graph;
};

class Node {
 public:
  const std::string& op_type() const { return proto_.op_type(); }
  const std::string& domain() const { return proto_.domain(); }
  const std::string& name() const { return proto_.name(); }
  bool is_onnx_domain() const { return proto_.domain().empty() || proto_.domain() == "ai.onnx"; }
  // True if the node is op `op` in the default ONNX domain.
  bool is(std::string_view op) const { return is_onnx_domain() && op_type() == op; }
  Graph* graph() const { return graph_; }
  bool dead() const { return dead_; }
  // Opset version of this node's domain, 0 if not imported.
  int64_t opset() const;

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  // Input/output i, nullptr if absent (past the end or an empty optional name).
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  Value* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }
  void set_input(size_t i, Value* v);
  void add_input(Value* v);
  // Drops trailing inputs past `count`.
  void truncate_inputs(size_t count);
  // Removes output slot `i` (the later outputs move down one slot) and its value. Refuses
  // (false, nothing changed) while the value is read or is a graph output. For ops whose
  // outputs are positional lists (a Loop's or Scan's), the caller keeps the op's meaning.
  bool remove_output(size_t i);

  // Attributes. Graph-valued attributes are exposed as subgraphs().
  const google::protobuf::RepeatedPtrField<onnx::AttributeProto>& attributes() const {
    return proto_.attribute();
  }
  const onnx::AttributeProto* attr(std::string_view name) const;
  int64_t attr_int(std::string_view name, int64_t def) const;
  float attr_float(std::string_view name, float def) const;
  std::string attr_string(std::string_view name, std::string def) const;
  std::optional<std::vector<int64_t>> attr_ints(std::string_view name) const;
  void set_attr(onnx::AttributeProto attr);  // replaces an attribute of the same name
  void remove_attr(std::string_view name);

  const std::vector<Subgraph>& subgraphs() const { return subgraphs_; }
  // The node proto without inputs, outputs and graph attribute bodies.
  const onnx::NodeProto& proto() const { return proto_; }
  // For edits of the op or its attributes: the outputs' facts are dropped (their meaning may
  // change).
  onnx::NodeProto& mutable_proto();

  // Scratch for a pass's worklist (the rule driver, rules.cc): whether the node is queued. A
  // clone starts unqueued.
  bool queued() const { return queued_; }
  void set_queued(bool queued) { queued_ = queued; }

 private:
  friend class Graph;
  friend class Model;
  friend class Loader;
  friend class Cloner;
  friend class NodeCopier;
  friend class Value;
  // The outputs' facts no longer hold: the node was edited in place.
  void edited();
  // Journals proto_ before an in-place edit (nodes created in the open transaction need not).
  void save_proto();
  onnx::NodeProto proto_;
  std::vector<Value*> inputs_;
  std::vector<uint32_t> use_pos_;  // per input slot: its entry's index in the value's uses_
  std::vector<Value*> outputs_;
  std::vector<Subgraph> subgraphs_;
  Graph* graph_ = nullptr;
  bool dead_ = false;
  int64_t order_ = 0;  // position hint for stable topological sorting
  // Per-algorithm scratch (sorting marks, verification positions); the model is used by one
  // thread at a time.
  uint8_t mark_ = 0;
  bool queued_ = false;
  uint64_t born_ = 0;  // the journal session that created this node; 0: none
  mutable size_t position_ = 0;
  mutable Node* twin_ = nullptr;  // the copy being made by a clone
};

struct GraphInput {
  onnx::ValueInfoProto info;  // name mirrors value->name()
  Value* value;
};
struct GraphOutput {
  onnx::ValueInfoProto info;  // declared type; the name saved is value->name()
  Value* value;
};

class Graph {
 public:
  Graph(Model* model, Node* parent) : model_(model), parent_(parent) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Model* model() const { return model_; }
  // The node whose attribute holds this graph, nullptr for the main graph and function bodies.
  Node* parent() const { return parent_; }
  const std::string& name() const { return rest_.name(); }
  // Opset version of `domain` ("" and "ai.onnx" are the same) in scope, 0 if not imported.
  int64_t opset(std::string_view domain) const;

  // Live nodes in topological order (a copy: safe to mutate the graph while iterating).
  std::vector<Node*> nodes() const;
  size_t num_nodes() const { return live_nodes_; }
  const std::vector<GraphInput>& inputs() const { return inputs_; }
  const std::vector<GraphOutput>& outputs() const { return outputs_; }
  // Live initializer values in their saved order.
  std::vector<Value*> initializers() const;

  // Looks a name up in this graph, then in enclosing graphs.
  Value* lookup(std::string_view name) const;
  // Looks a name up in this graph only.
  Value* find_local(std::string_view name) const;

  // Creates a node; outputs get fresh names derived from `output_hints`.
  Node* add_node(std::string op_type, std::vector<Value*> inputs,
                 const std::vector<std::string>& output_hints, std::string domain = "");
  // Copies `srcs`, nodes of one graph of this model (the nodes of an If branch being inlined, of
  // a function body), into this graph, with deep copies of their subgraphs (If branches,
  // Loop/Scan bodies, nested to any depth); returns the copies in the same order (output k of
  // copy i stands for output k of srcs[i]; omitted outputs stay omitted). Every value the copies
  // define — their outputs, and the inputs, initializers and node outputs of their subgraphs —
  // gets a fresh model-wide name derived from the original's, so nothing can clash with or
  // shadow a name in scope here; value_info types come along. Values the copies read from each
  // other are wired whatever the order of `srcs`. Each value read from outside `srcs` (an input,
  // or a value a subgraph captures by name from an enclosing scope) is asked of `outer` once: it
  // returns the value the copy reads instead, which must be in scope in this graph (nullptr makes
  // a node input absent). Returns {}, with nothing changed, when the copy cannot be made (or
  // `srcs` is empty): a subgraph output `outer` maps to nullptr, or a subgraph holding sparse
  // initializers in external data (named values the IR keeps as opaque protos).
  std::vector<Node*> copy_nodes(const std::vector<const Node*>& srcs,
                                const std::function<Value*(Value*)>& outer);
  // Creates an initializer value with a fresh name derived from `name_hint`.
  Value* add_initializer(std::string_view name_hint, onnx::TensorProto tensor);
  // Turns `value` (owned by this graph) into an initializer holding `tensor`. If a node produced
  // it, that node's slot gets a fresh unused value.
  void make_initializer(Value* value, onnx::TensorProto tensor);
  // Detaches a node from its inputs and removes its outputs. Refuses (false, nothing changed)
  // while any output is read by a node or is a graph output: no used value is ever left
  // without a producer. Redirect the readers first (or use Rewriter, which does).
  bool remove_node(Node* node);
  // Removes a value that nobody uses or produces (e.g. an unused initializer).
  void remove_value(Value* value);
  // Redirects every use of `from` (node inputs anywhere in scope) to `to`. Graph outputs are
  // redirected too unless `keep_outputs`.
  static void replace_all_uses(Value* from, Value* to, bool keep_outputs = false);
  // Makes `value` (a graph output) be produced by node output slot `index` of `node` in place of
  // the value currently there, which is replaced everywhere by `value` and removed. Used to keep
  // graph output names when the node computing them changes. If `value` had a producer, that
  // node's slot gets a fresh unused value.
  void move_output_name(Node* node, int index, Value* value);
  // Points graph output `i` at `value` (its declared type info is kept).
  void set_output(size_t i, Value* value);
  // Removes graph input `i` (the later inputs move down one) and its value. Refuses (false,
  // nothing changed) while the value is read or is an initializer too. For subgraphs, whose
  // inputs are positional (a Loop body's carried values): the interface of a model is its own.
  bool remove_input(size_t i);
  // Removes graph output `i` (the later outputs move down one); the value stays, as computed.
  void remove_output(size_t i);
  // Replaces the declared type of graph input / output `i` (e.g. a precision conversion).
  void set_input_type(size_t i, const onnx::TypeProto& type);
  void set_output_type(size_t i, const onnx::TypeProto& type);

  // Removes value_info entries that name no live value. Returns how many.
  int prune_orphan_value_info();

  // Re-sorts nodes topologically (stable) and frees dead nodes/values, recursively.
  absl::Status finalize();
  // Puts the live nodes in `order` (schedule_memory): refuses (InvalidArgument, nothing changed)
  // unless `order` holds every live node of this graph once and every node comes after the
  // producers of the values it reads, directly or from its subgraphs. Subgraphs are untouched.
  absl::Status reorder_nodes(const std::vector<Node*>& order);
  // Structural check: scoping, producers, unique names, order. Recursive. Use lists are
  // checked model-wide by Model::verify (uses may come from other graphs).
  absl::Status verify() const;
  static absl::Status verify_use_lists(const std::vector<Graph*>& graphs);

  const onnx::GraphProto& rest() const { return rest_; }
  onnx::GraphProto& mutable_rest() { return rest_; }

 private:
  friend class Model;
  friend class Loader;
  friend class Cloner;
  friend class NodeCopier;
  friend class Node;
  friend class Value;
  friend void save_function(Function& fn, onnx::FunctionProto* out, bool move_tensors);
  Value* new_value(std::string name);
  // Journals a node just created in this graph (order_ still to be taken from `next_order`).
  void journal_new_node(Node* n, int64_t next_order);
  // Appends `v` to the initializers.
  void register_initializer(Value* v);
  // Takes ownership and scope of `value`, defined so far by another graph (move_output_name).
  void adopt_value(Value* value);
  // remove_node without the check: for the nodes of a subgraph that dies with its owner.
  void detach_node(Node* node);
  absl::Status topo_sort();
  void compact();
  void save(onnx::GraphProto* out, bool move_tensors);

  Model* model_;
  Node* parent_;
  // name, doc_string, quantization_annotation..., sparse initializers in external data
  onnx::GraphProto rest_;
  std::vector<std::unique_ptr<Node>> nodes_;
  mutable std::vector<Node*> order_;
  mutable bool order_valid_ = false;
  size_t live_nodes_ = 0;
  int64_t next_order_ = 0;
  std::vector<std::unique_ptr<Value>> values_;
  std::unordered_map<std::string_view, Value*> by_name_;
  std::vector<GraphInput> inputs_;
  std::vector<GraphOutput> outputs_;
  std::vector<Value*> initializers_;  // may contain dead values until compact()
  std::vector<std::pair<int64_t, onnx::ValueInfoProto>> orphan_info_;
  int64_t next_info_order_ = 0;
  int64_t next_init_order_ = 0;
  // Opsets of the enclosing model or function (set on root graphs).
  const google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto>* opsets_ = nullptr;
};

struct Function;
void save_function(Function& fn, onnx::FunctionProto* out, bool move_tensors);

struct Function {
  onnx::FunctionProto rest;  // without node/input/output (they live in body)
  std::unique_ptr<Graph> body;
};

class Model {
 public:
  Model();
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // Parses serialized ModelProto bytes. Errors are InvalidArgument with a precise reason.
  static absl::StatusOr<std::unique_ptr<Model>> parse(std::string_view bytes);
  // Reads the file at `path` and parses it; its external-data tensors are read from the file's
  // folder (ExternalData::beneath).
  static absl::StatusOr<std::unique_ptr<Model>> load_file(const std::string& path);
  // Takes ownership of the proto's contents (initializer tensors are moved, not copied).
  static absl::StatusOr<std::unique_ptr<Model>> from_proto(onnx::ModelProto&& proto);

  // Copies the model out (initializer tensors are copied).
  onnx::ModelProto to_proto() const;
  // Moves the model out; the Model is left empty. Initializer tensors are moved when no
  // clone shares them.
  onnx::ModelProto release_proto();
  absl::StatusOr<std::string> serialize_and_release();
  // Moves the model out like serialize_and_release, writing tensors to a new external-data
  // file: every initializer and Constant `value` tensor (all graphs, functions included) that is
  // not external, holds raw_data and has at least `min_bytes` of it (the passes' new weights)
  // is appended, aligned to `alignment`, to `folder`/`location` (written by streaming, through a
  // temporary file renamed at the end; paths::BeneathWriter's rules) and rewritten to reference
  // it. External tensors keep their references. The file is not created when nothing goes into
  // it. A model without external tensors is saved exactly as serialize_and_release does unless
  // `even_without_external`. InvalidArgument (nothing written, the model kept) when `location`
  // is one the model already references or breaks paths::check_location.
  // With `compact`, the external tensors of a file the model no longer uses in full (a pass
  // replaced some of its tensors: the rest of the file is dead weight) are copied into the new
  // file too, streamed through external_data(), one copy per distinct range; files used in full
  // keep their references. For a caller that would otherwise copy the input's files beside an
  // output written elsewhere.
  struct ExternalWrite {
    std::string folder;
    std::string location;
    uint64_t min_bytes = 1024;  // as onnx's convert_model_to_external_data
    uint64_t alignment = 64;    // of each tensor's offset
    bool even_without_external = false;
    bool compact = false;
  };
  struct SavedModel {
    std::string model;                   // the serialized ModelProto
    std::vector<std::string> locations;  // external files it references: sorted, unique
    uint64_t new_file_bytes = 0;         // size of folder/location; 0 when not written
    int64_t new_file_tensors = 0;        // tensors written to it
    int64_t moved_tensors = 0;           // of them, external tensors moved by `compact`
  };
  absl::StatusOr<SavedModel> serialize_with_external(const ExternalWrite& write);

  // Where the payloads of external tensors are read from (null: unknown, and passes leave
  // external tensors alone). Clones share it.
  const std::shared_ptr<const ExternalData>& external_data() const { return external_data_; }
  void set_external_data(std::shared_ptr<const ExternalData> data) {
    external_data_ = std::move(data);
  }
  // True if some tensor of the model (initializers, Constant values, any graph) is external.
  bool has_external_tensors() const;

  // Deep copy of the structure; initializer tensors are shared (immutable) with the clone.
  std::unique_ptr<Model> clone() const;

  Graph& graph() { return *graph_; }
  const Graph& graph() const { return *graph_; }
  std::vector<Function>& functions() { return functions_; }
  const std::vector<Function>& functions() const { return functions_; }
  // Every graph: the main graph, function bodies and all nested subgraphs, parents first.
  std::vector<Graph*> all_graphs() const;
  int64_t opset(std::string_view domain) const;
  const onnx::ModelProto& rest() const { return rest_; }
  onnx::ModelProto& mutable_rest() { return rest_; }

  // The opset imports of the model (`body` nullptr or the main graph) or of the model-local
  // function whose body is `body`, changed by `edit`. Journaled like a graph edit: a rollback
  // puts the old list back. An unknown body changes nothing.
  using OpsetImports = google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto>;
  void edit_opset_imports(const Graph* body, const std::function<void(OpsetImports&)>& edit);
  // The import list edit_opset_imports edits for `body` (nullptr for an unknown body).
  const OpsetImports* opset_imports(const Graph* body) const;
  // Sets the model's IR version, journaled.
  void set_ir_version(int64_t version);

  // IR versions before 4 require every initializer to also be a graph input, so passes must not
  // create initializers there (that would change the model's inputs).
  bool allows_new_initializers() const { return rest_.ir_version() >= 4; }
  // A name not used anywhere in the model, derived from `hint`.
  std::string fresh_name(std::string_view hint);
  void reserve_name(const std::string& name) { names_.insert(name); }

  absl::Status finalize();
  absl::Status verify() const;

  // Transactions. checkpoint() starts journaling every graph edit (nested checkpoints share the
  // journal); each checkpoint ends with exactly one rollback() — every edit made since is undone,
  // in reverse order, and the facts computed meanwhile are forgotten — or release(), which keeps
  // the edits. finalize() is refused while a checkpoint is open (it frees what the journal
  // refers to).
  struct Checkpoint {
    size_t mark = 0;
    uint64_t generation = 0;
    bool inference_done = false;
  };
  Checkpoint checkpoint();
  void rollback(const Checkpoint& cp);
  void release(const Checkpoint& cp);
  bool journaling() const { return journal_depth_ > 0; }
  // Records how to undo an edit being made (nothing when not journaling).
  template <typename Undo>
  void on_undo(Undo&& undo) {
    if (journal_depth_ > 0) journal_.emplace_back(std::forward<Undo>(undo));
  }
  uint64_t journal_session() const { return journal_depth_ > 0 ? journal_session_ : 0; }

  // Bumped by every edit: facts computed at an older generation that were incomplete are
  // computed again when asked.
  uint64_t generation() const { return generation_; }
  void touch() { ++generation_; }
  // Runs libonnx's shape inference again at the next fact asked (e.g. after folding made more
  // operands constant).
  void refresh_shape_inference();
  // Facts from graph-input declarations, constants and Graft's rules alone, from now on (tests
  // compare the rules with libonnx's inference).
  void disable_shape_inference();
  size_t total_nodes() const;          // all graphs, including subgraphs and functions
  uint64_t initializer_bytes() const;  // all graphs

 private:
  friend class Loader;
  friend class Cloner;
  friend class FactEngine;
  onnx::ModelProto rest_;  // without graph and functions
  std::shared_ptr<const ExternalData> external_data_;
  uint64_t generation_ = 1;
  bool inference_done_ = false;
  std::unique_ptr<Graph> graph_;
  std::vector<Function> functions_;
  std::unordered_set<std::string> names_;
  uint64_t name_counter_ = 0;
  std::vector<std::function<void()>> journal_;
  int journal_depth_ = 0;
  uint64_t journal_session_ = 0;
};

bool is_onnx_domain(std::string_view domain);

}  // namespace graft::ir
