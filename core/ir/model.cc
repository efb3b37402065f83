// Loading a ModelProto into the IR, saving it back, cloning.
#include "core/ir/model.h"

#include "core/base/status.h"
#include "core/ir/operands.h"
#include "core/ir/saturating.h"
#include "core/ir/sparse.h"
#include "core/paths/beneath.h"
#include "core/paths/files.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <absl/strings/str_cat.h>

namespace graft::ir {

namespace {

absl::Status bad_model(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("invalid model: ", std::string(what)));
}

// Moves every element out of a repeated field without copying it.
template <typename T>
std::vector<std::unique_ptr<T>> release_all(google::protobuf::RepeatedPtrField<T>* field) {
  std::vector<std::unique_ptr<T>> out(field->size());
  for (int i = field->size() - 1; i >= 0; --i) out[i].reset(field->ReleaseLast());
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Loading

class Loader {
 public:
  // `dense_budget`: the most bytes the model's sparse initializers may take dense, all together.
  Loader(Model* model, uint64_t dense_budget) : model_(model), dense_budget_(dense_budget) {}

  // Loads `src` (consumed) into `g`. Node inputs and outputs are resolved in scope, subgraphs
  // recursively; the graph is then sorted topologically.
  absl::Status load_graph(Graph* g, onnx::GraphProto* src) {
    g->rest_.Swap(src);
    auto nodes = release_all(g->rest_.mutable_node());
    auto inits = release_all(g->rest_.mutable_initializer());
    auto inputs = release_all(g->rest_.mutable_input());
    auto outputs = release_all(g->rest_.mutable_output());
    auto infos = release_all(g->rest_.mutable_value_info());
    const std::string& gname = g->rest_.name();

    for (auto& in : inputs) {
      if (in->name().empty())
        return bad_model(absl::StrCat("graph '", gname, "' has an unnamed input"));
      if (g->find_local(in->name()))
        return bad_model(
            absl::StrCat("graph '", gname, "' declares input '", in->name(), "' twice"));
      Value* v = define(g, in->name());
      v->graph_input_ = true;
      g->inputs_.push_back({std::move(*in), v});
    }
    for (auto& t : inits) {
      if (t->name().empty())
        return bad_model(absl::StrCat("graph '", gname, "' has an unnamed initializer"));
      Value* v = g->find_local(t->name());
      if (v && (!v->graph_input_ || v->initializer_))
        return bad_model(absl::StrCat("initializer '", t->name(), "' is defined twice"));
      if (!v) v = define(g, t->name());
      v->initializer_ = std::shared_ptr<const onnx::TensorProto>(t.release());
      v->init_order_ = g->next_init_order_++;
      g->initializers_.push_back(v);
    }
    // Sparse initializers become dense ones marked stored_sparse; those in external data stay
    // opaque in rest_ (their names defined, without a tensor).
    auto sparse = release_all(g->rest_.mutable_sparse_initializer());
    std::set<std::string> opaque;
    for (auto& s : sparse) {
      const std::string& name = s->values().name();
      if (name.empty())
        return bad_model(absl::StrCat("graph '", gname, "' has an unnamed sparse initializer"));
      Value* v = g->find_local(name);
      if ((v && (!v->graph_input_ || v->initializer_)) || opaque.count(name))
        return bad_model(absl::StrCat("initializer '", name, "' is defined twice"));
      if (is_external(s->values()) || is_external(s->indices())) {
        if (!v) define(g, name);
        opaque.insert(name);
        g->rest_.mutable_sparse_initializer()->AddAllocated(s.release());
        continue;
      }
      ASSIGN_OR_RETURN(onnx::TensorProto dense, densify(*s, dense_budget_));
      dense_budget_ -= tensor_bytes(dense);
      if (!v) v = define(g, name);
      v->initializer_ = std::make_shared<const onnx::TensorProto>(std::move(dense));
      v->stored_sparse_ = true;
      v->init_order_ = g->next_init_order_++;
      g->initializers_.push_back(v);
    }

    std::vector<Node*> loaded;
    loaded.reserve(nodes.size());
    std::vector<std::vector<std::string>> input_names(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      auto node = std::make_unique<Node>();
      Node* n = node.get();
      n->graph_ = g;
      n->order_ = g->next_order_++;
      n->proto_.Swap(nodes[i].get());
      nodes[i].reset();
      input_names[i].assign(n->proto_.input().begin(), n->proto_.input().end());
      n->proto_.clear_input();
      for (const std::string& out : n->proto_.output()) {
        if (out.empty()) {
          n->outputs_.push_back(nullptr);
          continue;
        }
        if (Value* prev = g->find_local(out)) {
          std::string who = prev->producer_ ? describe(prev->producer_)
                                            : std::string("a graph input or initializer");
          return bad_model(absl::StrCat("value '", out, "' is produced twice: by ", who, " and by ",
                                        describe(n)));
        }
        Value* v = define(g, out);
        v->producer_ = n;
        v->producer_index_ = static_cast<int>(n->outputs_.size());
        n->outputs_.push_back(v);
      }
      n->proto_.clear_output();
      g->nodes_.push_back(std::move(node));
      ++g->live_nodes_;
      loaded.push_back(n);
    }

    // Subgraphs see every value of this graph, whatever the node order.
    for (Node* n : loaded) {
      for (auto& attr : *n->proto_.mutable_attribute()) {
        if (attr.has_g()) {
          std::unique_ptr<onnx::GraphProto> body(attr.release_g());
          RETURN_IF_ERROR(load_subgraph(n, attr.name(), -1, body.get()));
        }
        auto bodies = release_all(attr.mutable_graphs());
        for (size_t k = 0; k < bodies.size(); ++k)
          RETURN_IF_ERROR(load_subgraph(n, attr.name(), static_cast<int>(k), bodies[k].get()));
      }
    }

    for (size_t i = 0; i < loaded.size(); ++i) {
      Node* n = loaded[i];
      for (const std::string& name : input_names[i]) {
        if (name.empty()) {
          n->inputs_.push_back(nullptr);
          continue;
        }
        Value* v = g->lookup(name);
        if (!v)
          return bad_model(absl::StrCat(describe(n), " in graph '", gname, "' reads '", name,
                                        "', which no node, graph input or initializer defines"));
        n->inputs_.push_back(v);
        v->add_use(n, static_cast<int>(n->inputs_.size() - 1));
      }
    }

    for (auto& info : infos) {
      Value* v = g->find_local(info->name());
      int64_t order = g->next_info_order_++;
      if (v && !v->info_) {
        v->info_ = std::move(info);
        v->info_order_ = order;
      } else {
        g->orphan_info_.emplace_back(order, std::move(*info));
      }
    }

    for (auto& out : outputs) {
      Value* v = g->lookup(out->name());
      if (!v)
        return bad_model(absl::StrCat("graph output '", out->name(), "' of graph '", gname,
                                      "' is not produced by any node, input or initializer"));
      v->output_refs_.emplace_back(g, static_cast<int>(g->outputs_.size()));
      g->outputs_.push_back({std::move(*out), v});
    }
    if (auto st = g->topo_sort(); !st.ok()) return bad_model(std::string(st.message()));
    g->compact();
    return absl::OkStatus();
  }

  absl::Status load_function(Function* fn, onnx::FunctionProto* src) {
    fn->rest.Swap(src);
    onnx::GraphProto body;
    body.set_name(fn->rest.name());
    for (auto& n : *fn->rest.mutable_node()) body.add_node()->Swap(&n);
    for (const auto& in : fn->rest.input()) body.add_input()->set_name(in);
    for (const auto& out : fn->rest.output()) body.add_output()->set_name(out);
    fn->rest.clear_node();
    fn->rest.clear_input();
    fn->rest.clear_output();
    fn->body = std::make_unique<Graph>(model_, nullptr);
    if (auto st = load_graph(fn->body.get(), &body); !st.ok())
      return bad_model(
          absl::StrCat("in function '", fn->rest.name(), "': ", std::string(st.message())));
    return absl::OkStatus();
  }

  static std::string describe(const Node* n) {
    return absl::StrCat("node '", n->name(), "' (", n->op_type(), ")");
  }

 private:
  absl::Status load_subgraph(Node* n, const std::string& attr, int index, onnx::GraphProto* body) {
    Subgraph sub{attr, index, std::make_unique<Graph>(model_, n)};
    Graph* g = sub.graph.get();
    n->subgraphs_.push_back(std::move(sub));
    return load_graph(g, body);
  }

  Value* define(Graph* g, const std::string& name) {
    model_->names_.insert(name);
    return g->new_value(name);
  }

  Model* model_;
  uint64_t dense_budget_;
};

Model::Model() : graph_(std::make_unique<Graph>(this, nullptr)) {}
Model::~Model() = default;

absl::StatusOr<std::unique_ptr<Model>> Model::from_proto(onnx::ModelProto&& proto) {
  if (!proto.has_graph()) return bad_model("the model has no graph");
  // Sparse initializers are held dense: at most kSparseExpansion times the model's size (at
  // least kSparseDenseFloor bytes) in all, so a few bytes cannot ask for gigabytes.
  const uint64_t dense_budget =
      std::max<uint64_t>(kSparseDenseFloor, sat_mul(proto.ByteSizeLong(), kSparseExpansion));
  auto model = std::make_unique<Model>();
  model->rest_.Swap(&proto);
  std::unique_ptr<onnx::GraphProto> graph(model->rest_.release_graph());
  auto functions = release_all(model->rest_.mutable_functions());
  Loader loader(model.get(), dense_budget);
  model->functions_.resize(functions.size());
  for (size_t i = 0; i < functions.size(); ++i)
    RETURN_IF_ERROR(loader.load_function(&model->functions_[i], functions[i].get()));
  RETURN_IF_ERROR(loader.load_graph(model->graph_.get(), graph.get()));
  if (auto st = check_model_operands(*model); !st.ok()) return bad_model(std::string(st.message()));
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> Model::parse(std::string_view bytes) {
  if (bytes.empty()) return bad_model("empty input");
  if (bytes.size() > static_cast<size_t>(INT_MAX))
    return bad_model(
        "larger than protobuf's 2 GB message limit (store large weights as ONNX external data)");
  onnx::ModelProto proto;
  if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return bad_model(
        "not a serialized ONNX ModelProto (protobuf parsing failed; truncated or "
        "not an .onnx file)");
  return from_proto(std::move(proto));
}

absl::StatusOr<std::unique_ptr<Model>> Model::load_file(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string bytes, paths::read_file(path));
  ASSIGN_OR_RETURN(std::unique_ptr<Model> model, parse(bytes));
  std::string folder = std::filesystem::path(path).parent_path().string();
  model->set_external_data(ExternalData::beneath(folder.empty() ? "." : std::move(folder)));
  return model;
}

// ---------------------------------------------------------------------------------------------
// Saving

void Graph::save(onnx::GraphProto* out, bool move_tensors) {
  *out = rest_;
  for (const auto& in : inputs_) {
    auto* info = out->add_input();
    *info = in.info;
    info->set_name(in.value->name());
  }
  for (Value* v : initializers()) {
    if (v->stored_sparse_) {
      if (auto sparse = sparsify(*v->initializer_)) {
        sparse->mutable_values()->set_name(v->name());
        out->add_sparse_initializer()->Swap(&*sparse);
        continue;
      }
    }
    auto* t = out->add_initializer();
    if (move_tensors && v->initializer_.use_count() == 1) {
      // This model is the only owner: hand the bytes over instead of copying them.
      t->Swap(const_cast<onnx::TensorProto*>(v->initializer_.get()));
    } else {
      *t = *v->initializer_;
    }
    t->set_name(v->name());
  }
  for (Node* n : nodes()) {
    auto* np = out->add_node();
    *np = n->proto_;
    for (Value* v : n->inputs_) np->add_input(v ? v->name() : std::string());
    for (Value* v : n->outputs_) np->add_output(v ? v->name() : std::string());
    // GRAPHS attributes: bodies are re-added in index order.
    std::vector<const Subgraph*> subs;
    for (const auto& s : n->subgraphs_) subs.push_back(&s);
    std::stable_sort(subs.begin(), subs.end(),
                     [](const Subgraph* a, const Subgraph* b) { return a->index < b->index; });
    for (const Subgraph* s : subs) {
      for (auto& attr : *np->mutable_attribute()) {
        if (attr.name() != s->attr_name) continue;
        s->graph->save(s->index < 0 ? attr.mutable_g() : attr.add_graphs(), move_tensors);
        break;
      }
    }
  }
  for (const auto& o : outputs_) {
    auto* info = out->add_output();
    *info = o.info;
    info->set_name(o.value->name());
  }
  std::vector<std::pair<int64_t, const onnx::ValueInfoProto*>> infos;
  for (const auto& v : values_)
    if (!v->dead_ && v->info_ && v->owner_ == this)
      infos.emplace_back(v->info_order_, v->info_.get());
  for (const auto& [order, info] : orphan_info_) infos.emplace_back(order, &info);
  std::stable_sort(infos.begin(), infos.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [order, info] : infos) *out->add_value_info() = *info;
}

void save_function(Function& fn, onnx::FunctionProto* out, bool move_tensors) {
  *out = fn.rest;
  onnx::GraphProto body;
  fn.body->save(&body, move_tensors);
  for (const auto& in : body.input()) out->add_input(in.name());
  for (const auto& o : body.output()) out->add_output(o.name());
  for (auto& n : *body.mutable_node()) out->add_node()->Swap(&n);
}

onnx::ModelProto Model::to_proto() const {
  onnx::ModelProto out = rest_;
  auto* self = const_cast<Model*>(this);
  self->graph_->save(out.mutable_graph(), /*move_tensors=*/false);
  for (auto& fn : self->functions_) save_function(fn, out.add_functions(), false);
  return out;
}

onnx::ModelProto Model::release_proto() {
  onnx::ModelProto out;
  out.Swap(&rest_);
  graph_->save(out.mutable_graph(), /*move_tensors=*/true);
  for (auto& fn : functions_) save_function(fn, out.add_functions(), true);
  graph_ = std::make_unique<Graph>(this, nullptr);
  functions_.clear();
  return out;
}

namespace {
absl::StatusOr<std::string> serialize(const onnx::ModelProto& proto);
}

absl::StatusOr<std::string> Model::serialize_and_release() {
  onnx::ModelProto proto = release_proto();
  return serialize(proto);
}

namespace {

// Every tensor of the model: initializers and node attribute tensors, in every graph
// (subgraphs, functions, training info), in a fixed order; `dense` is false for the parts of a
// sparse tensor.
void for_each_tensor(onnx::GraphProto* g, const std::function<void(onnx::TensorProto*, bool)>& f);

void for_each_tensor(onnx::NodeProto* n, const std::function<void(onnx::TensorProto*, bool)>& f) {
  for (auto& a : *n->mutable_attribute()) {
    if (a.has_t()) f(a.mutable_t(), true);
    for (auto& t : *a.mutable_tensors()) f(&t, true);
    if (a.has_sparse_tensor()) {
      f(a.mutable_sparse_tensor()->mutable_values(), false);
      f(a.mutable_sparse_tensor()->mutable_indices(), false);
    }
    for (auto& st : *a.mutable_sparse_tensors()) {
      f(st.mutable_values(), false);
      f(st.mutable_indices(), false);
    }
    if (a.has_g()) for_each_tensor(a.mutable_g(), f);
    for (auto& sub : *a.mutable_graphs()) for_each_tensor(&sub, f);
  }
}

void for_each_tensor(onnx::GraphProto* g, const std::function<void(onnx::TensorProto*, bool)>& f) {
  for (auto& t : *g->mutable_initializer()) f(&t, true);
  for (auto& st : *g->mutable_sparse_initializer()) {
    f(st.mutable_values(), false);
    f(st.mutable_indices(), false);
  }
  for (auto& n : *g->mutable_node()) for_each_tensor(&n, f);
}

void for_each_tensor(onnx::ModelProto* m, const std::function<void(onnx::TensorProto*, bool)>& f) {
  for_each_tensor(m->mutable_graph(), f);
  for (auto& fn : *m->mutable_functions())
    for (auto& n : *fn.mutable_node()) for_each_tensor(&n, f);
  for (auto& t : *m->mutable_training_info()) {
    for_each_tensor(t.mutable_initialization(), f);
    for_each_tensor(t.mutable_algorithm(), f);
  }
}

std::string external_location(const onnx::TensorProto& t) {
  for (const auto& e : t.external_data())
    if (e.key() == "location") return e.value();
  return {};
}

absl::StatusOr<std::string> serialize(const onnx::ModelProto& proto) {
  size_t size = proto.ByteSizeLong();
  if (size > static_cast<size_t>(INT_MAX))
    return absl::ResourceExhaustedError(
        absl::StrCat("optimized model is ", size, " bytes, above protobuf's 2 GB message limit"));
  std::string bytes;
  if (!proto.SerializeToString(&bytes)) return absl::InternalError("model serialization failed");
  return bytes;
}

}  // namespace

bool Model::has_external_tensors() const {
  for (Graph* g : all_graphs()) {
    for (Value* v : g->initializers())
      if (is_external(*v->initializer())) return true;
    for (Node* n : g->nodes())
      for (const auto& a : n->attributes()) {
        if (a.has_t() && is_external(a.t())) return true;
        for (const auto& t : a.tensors())
          if (is_external(t)) return true;
      }
    for (const auto& st : g->rest().sparse_initializer())
      if (is_external(st.values()) || is_external(st.indices())) return true;
  }
  return false;
}

absl::StatusOr<Model::SavedModel> Model::serialize_with_external(const ExternalWrite& write) {
  if (!write.even_without_external && !has_external_tensors()) {
    ASSIGN_OR_RETURN(std::string bytes, serialize_and_release());
    return SavedModel{std::move(bytes), {}, 0, 0};
  }
  RETURN_IF_ERROR(paths::check_location(write.location));
  {
    // The new file must not replace one the model reads: checked before anything is released.
    for (Graph* g : all_graphs()) {
      auto check = [&](const onnx::TensorProto& t) -> absl::Status {
        if (is_external(t) && external_location(t) == write.location)
          return absl::InvalidArgumentError(absl::StrCat(
              "cannot write new external data to '", paths::shown_location(write.location),
              "': the model already references that location"));
        return absl::OkStatus();
      };
      for (Value* v : g->initializers()) RETURN_IF_ERROR(check(*v->initializer()));
      for (Node* n : g->nodes())
        for (const auto& a : n->attributes()) {
          if (a.has_t()) RETURN_IF_ERROR(check(a.t()));
          for (const auto& t : a.tensors()) RETURN_IF_ERROR(check(t));
        }
      for (const auto& sp : g->rest().sparse_initializer())
        for (const auto* t : {&sp.values(), &sp.indices()}) RETURN_IF_ERROR(check(*t));
    }
  }
  const std::shared_ptr<const ExternalData> external = external_data_;
  onnx::ModelProto proto = release_proto();
  std::optional<paths::BeneathWriter> writer;
  absl::Status status;
  SavedModel saved;
  std::set<std::string> locations;
  const uint64_t min_bytes = std::max<uint64_t>(write.min_bytes, 1);

  // Files the model uses only in part (`compact`): the distinct ranges it references add up to
  // less than the file. Each tensor's checked range is kept for the copy below; a tensor whose
  // range cannot be checked keeps its reference.
  std::map<const onnx::TensorProto*, ExternalRef> refs;
  std::set<std::string> partly_used;
  if (write.compact && external) {
    std::map<std::string, std::set<std::pair<uint64_t, uint64_t>>> ranges;
    std::map<std::string, uint64_t> sizes;
    for_each_tensor(&proto, [&](onnx::TensorProto* t, bool) {
      if (!is_external(*t)) return;
      auto ref = external->locate(*t);
      if (!ref.ok()) return;
      if (!sizes.count(ref->location)) {
        auto size = external->file_size(*t);
        if (!size.ok()) return;
        sizes[ref->location] = *size;
      }
      ranges[ref->location].emplace(ref->offset, ref->length);
      refs.emplace(t, *std::move(ref));
    });
    for (const auto& [location, used] : ranges) {
      uint64_t bytes = 0;
      for (const auto& [offset, length] : used) bytes += length;  // overlaps count twice
      if (bytes < sizes[location]) partly_used.insert(location);
    }
  }
  auto open_writer = [&]() -> absl::Status {
    if (writer) return absl::OkStatus();
    ASSIGN_OR_RETURN(auto w, paths::BeneathWriter::create(write.folder, write.location));
    writer.emplace(std::move(w));
    return absl::OkStatus();
  };
  // Makes `t` reference [offset, offset + length) of the new file.
  auto point_at_new_file = [&](onnx::TensorProto* t, uint64_t offset, uint64_t length) {
    t->clear_raw_data();
    t->clear_float_data();
    t->clear_double_data();
    t->clear_int32_data();
    t->clear_int64_data();
    t->clear_uint64_data();
    t->clear_external_data();
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const char* key, std::string value) {
      auto* e = t->add_external_data();
      e->set_key(key);
      e->set_value(std::move(value));
    };
    add("location", write.location);
    add("offset", std::to_string(offset));
    add("length", std::to_string(length));
    ++saved.new_file_tensors;
  };
  std::map<ExternalRef, uint64_t> moved;  // range of an input file -> offset in the new file
  for_each_tensor(&proto, [&](onnx::TensorProto* t, bool dense) {
    if (!status.ok()) return;
    if (is_external(*t)) {
      const auto r = refs.find(t);
      if (r == refs.end() || !partly_used.count(r->second.location)) {
        locations.insert(external_location(*t));
        return;
      }
      const ExternalRef* ref = &r->second;
      auto it = moved.find(*ref);
      if (it == moved.end()) {
        if (status = open_writer(); !status.ok()) return;
        if (status = writer->pad_to(write.alignment); !status.ok()) return;
        const uint64_t offset = writer->size();
        absl::Status append;
        status = external->read_blocks(*t, [&](std::string_view block) {
          if (append.ok()) append = writer->append(block);
        });
        if (status.ok()) status = append;
        if (!status.ok()) return;
        it = moved.emplace(*ref, offset).first;
      }
      point_at_new_file(t, it->second, ref->length);
      ++saved.moved_tensors;
      return;
    }
    if (!dense || (element_size(t->data_type()) == 0 && !is_4bit(t->data_type())) ||
        t->has_segment() || tensor_bytes(*t) < min_bytes)
      return;
    std::optional<std::string> converted;  // a typed field's payload; raw_data is used in place
    std::string_view payload;
    if (t->has_raw_data()) {
      payload = t->raw_data();
    } else {
      converted = typed_payload(*t);
      if (!converted) return;
      payload = *converted;
    }
    auto count = element_count(*t);
    // A malformed tensor (payload and dims disagree) stays as it is.
    const auto expected = count ? payload_size(t->data_type(), *count) : std::nullopt;
    if (payload.size() < min_bytes || !expected || payload.size() != *expected) return;
    if (status = open_writer(); !status.ok()) return;
    if (status = writer->pad_to(write.alignment); !status.ok()) return;
    const uint64_t offset = writer->size();
    if (status = writer->append(payload); !status.ok()) return;
    const uint64_t length = payload.size();
    converted.reset();
    point_at_new_file(t, offset, length);
  });
  RETURN_IF_ERROR(status);
  if (writer) {
    RETURN_IF_ERROR(writer->commit());
    saved.new_file_bytes = writer->size();
    locations.insert(write.location);
  }
  ASSIGN_OR_RETURN(saved.model, serialize(proto));
  saved.locations.assign(locations.begin(), locations.end());
  return saved;
}

// ---------------------------------------------------------------------------------------------
// Cloning

class Cloner {
 public:
  std::unique_ptr<Model> run(const Model& src) {
    auto dst = std::make_unique<Model>();
    dst->rest_ = src.rest_;
    dst->external_data_ = src.external_data_;
    dst->names_ = src.names_;
    dst->name_counter_ = src.name_counter_;
    dst->generation_ = src.generation_;
    dst->inference_done_ = src.inference_done_;
    structure(*src.graph_, *dst->graph_);
    dst->functions_.resize(src.functions_.size());
    for (size_t i = 0; i < src.functions_.size(); ++i) {
      dst->functions_[i].rest = src.functions_[i].rest;
      dst->functions_[i].body = std::make_unique<Graph>(dst.get(), nullptr);
      structure(*src.functions_[i].body, *dst->functions_[i].body);
    }
    wire(*src.graph_, *dst->graph_);
    for (size_t i = 0; i < src.functions_.size(); ++i)
      wire(*src.functions_[i].body, *dst->functions_[i].body);
    return dst;
  }

 private:
  // Pass 1: values, nodes and nested graphs, without links.
  void structure(const Graph& s, Graph& d) {
    d.rest_ = s.rest_;
    d.next_info_order_ = s.next_info_order_;
    d.next_init_order_ = s.next_init_order_;
    d.next_order_ = s.next_order_;
    d.orphan_info_ = s.orphan_info_;
    d.values_.reserve(s.values_.size());
    d.nodes_.reserve(s.nodes_.size());
    d.by_name_.reserve(s.by_name_.size());
    for (const auto& v : s.values_) {
      if (v->dead_) continue;
      auto nv = std::make_unique<Value>();
      nv->name_ = v->name_;
      // owner_ is set in wire(): a value's scope may differ from the graph storing it.
      nv->graph_input_ = v->graph_input_;
      nv->initializer_ = v->initializer_;
      nv->stored_sparse_ = v->stored_sparse_;
      if (v->info_) nv->info_ = std::make_unique<onnx::ValueInfoProto>(*v->info_);
      nv->info_order_ = v->info_order_;
      nv->init_order_ = v->init_order_;
      // Facts hold for the copy too (same structure, same generation).
      nv->fact_ = v->fact_;
      nv->fact_gen_ = v->fact_gen_;
      nv->fact_exact_ = v->fact_exact_;
      if (v->inferred_) nv->inferred_ = std::make_unique<TensorFact>(*v->inferred_);
      v->twin_ = nv.get();
      d.values_.push_back(std::move(nv));
    }
    for (const auto& n : s.nodes_) {
      if (n->dead_) continue;
      auto nn = std::make_unique<Node>();
      nn->proto_ = n->proto_;
      nn->graph_ = &d;
      nn->order_ = n->order_;
      for (const auto& sub : n->subgraphs_) {
        Subgraph copy{sub.attr_name, sub.index, std::make_unique<Graph>(d.model_, nn.get())};
        structure(*sub.graph, *copy.graph);
        nn->subgraphs_.push_back(std::move(copy));
      }
      n->twin_ = nn.get();
      d.nodes_.push_back(std::move(nn));
      ++d.live_nodes_;
    }
  }

  // Source objects point at their copies through their scratch `twin_` fields.
  static Value* map(const Value* v) { return v ? v->twin_ : nullptr; }

  // Pass 2: links (producers, uses, scopes, graph inputs/outputs).
  void wire(const Graph& s, Graph& d) {
    // Every live value is indexed in exactly one scope; that scope is its owner.
    for (const auto& [name, v] : s.by_name_) {
      Value* nv = map(v);
      nv->owner_ = &d;
      d.by_name_[nv->name_] = nv;
    }
    for (const auto& n : s.nodes_) {
      if (n->dead_) continue;
      Node* nn = n->twin_;
      for (size_t i = 0; i < n->inputs_.size(); ++i) {
        Value* nv = map(n->inputs_[i]);
        nn->inputs_.push_back(nv);
        if (nv) nv->add_use(nn, static_cast<int>(i));
      }
      for (size_t i = 0; i < n->outputs_.size(); ++i) {
        Value* nv = map(n->outputs_[i]);
        nn->outputs_.push_back(nv);
        if (nv) {
          nv->producer_ = nn;
          nv->producer_index_ = static_cast<int>(i);
        }
      }
      for (size_t k = 0; k < n->subgraphs_.size(); ++k)
        wire(*n->subgraphs_[k].graph, *nn->subgraphs_[k].graph);
    }
    for (const auto& in : s.inputs_) d.inputs_.push_back({in.info, map(in.value)});
    for (const auto& out : s.outputs_) {
      Value* nv = map(out.value);
      nv->output_refs_.emplace_back(&d, static_cast<int>(d.outputs_.size()));
      d.outputs_.push_back({out.info, nv});
    }
    for (Value* v : s.initializers_)
      if (!v->dead_ && v->initializer_) d.initializers_.push_back(map(v));
  }
};

std::unique_ptr<Model> Model::clone() const { return Cloner().run(*this); }

// ---------------------------------------------------------------------------------------------
// Model helpers

std::vector<Graph*> Model::all_graphs() const {
  std::vector<Graph*> out{graph_.get()};
  for (const auto& fn : functions_) out.push_back(fn.body.get());
  for (size_t i = 0; i < out.size(); ++i)
    for (Node* n : out[i]->nodes())
      for (const auto& sub : n->subgraphs()) out.push_back(sub.graph.get());
  return out;
}

int64_t Model::opset(std::string_view domain) const { return graph_->opset(domain); }

std::string Model::fresh_name(std::string_view hint) {
  std::string base(hint.empty() ? "graft" : hint);
  const uint64_t counter = name_counter_;
  std::string name = base;
  while (!names_.insert(name).second) name = absl::StrCat(base, "_", ++name_counter_);
  if (journaling())
    on_undo([this, name, counter] {
      names_.erase(name);
      name_counter_ = counter;
    });
  return name;
}

const Model::OpsetImports* Model::opset_imports(const Graph* body) const {
  if (body == nullptr || body == graph_.get()) return &rest_.opset_import();
  for (const Function& fn : functions_)
    if (fn.body.get() == body) return &fn.rest.opset_import();
  return nullptr;
}

void Model::edit_opset_imports(const Graph* body, const std::function<void(OpsetImports&)>& edit) {
  // The list is this model's own (opset_imports gives it read-only).
  auto* imports = const_cast<OpsetImports*>(opset_imports(body));
  if (imports == nullptr) return;
  // A function body is found again by its graph, which the functions list does not move.
  if (journaling())
    on_undo([this, body, old = *imports] {
      if (const OpsetImports* now = opset_imports(body)) *const_cast<OpsetImports*>(now) = old;
    });
  edit(*imports);
  touch();
}

void Model::set_ir_version(int64_t version) {
  on_undo([this, old = rest_.ir_version()] { rest_.set_ir_version(old); });
  rest_.set_ir_version(version);
}

Model::Checkpoint Model::checkpoint() {
  if (journal_depth_++ == 0) {
    journal_.clear();
    ++journal_session_;
  }
  return {journal_.size(), generation_, inference_done_};
}

void Model::release(const Checkpoint&) {
  if (--journal_depth_ == 0) journal_.clear();
}

void Model::rollback(const Checkpoint& cp) {
  if (journal_.size() > cp.mark) {
    while (journal_.size() > cp.mark) {
      std::function<void()> undo = std::move(journal_.back());
      journal_.pop_back();
      undo();
    }
    // Shape inference that ran on an edited state told things of values it may not hold for.
    if (inference_done_ != cp.inference_done) refresh_shape_inference();
    // Facts computed since the checkpoint describe the edited graphs. Those computed before it
    // (and those the undone edits dropped, restored above) hold again.
    for (Graph* g : all_graphs())
      for (const auto& v : g->values_)
        if (v->fact_gen_ > cp.generation) v->fact_gen_ = 0;
    generation_ = cp.generation;
  }
  release(cp);
}

absl::Status Model::finalize() {
  if (journaling()) return absl::FailedPreconditionError("finalize() while a transaction is open");
  for (auto& fn : functions_) RETURN_IF_ERROR(fn.body->finalize());
  return graph_->finalize();
}

absl::Status Model::verify() const {
  for (const auto& fn : functions_) RETURN_IF_ERROR(fn.body->verify());
  RETURN_IF_ERROR(graph_->verify());
  return Graph::verify_use_lists(all_graphs());
}

size_t Model::total_nodes() const {
  size_t n = 0;
  for (Graph* g : all_graphs()) n += g->num_nodes();
  return n;
}

uint64_t Model::initializer_bytes() const {
  uint64_t bytes = 0;
  for (Graph* g : all_graphs())
    for (Value* v : g->initializers())  // external payloads by their declared size
      bytes += payload_bytes(*v->initializer()).value_or(0);
  return bytes;
}

}  // namespace graft::ir
