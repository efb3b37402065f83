// Whole-model text for tests (print, canonical_text): ONNX text syntax, extended with what
// libonnx 1.12's printer leaves out. That printer (onnx/defs/printer.h) prints a GraphProto's
// signature and nodes but no initializers, value_info or node domains, has no ModelProto form,
// and prints floats with six significant digits, so two models it prints alike may differ.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/eval/tensor.h"
#include "core/ir/tensor.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A name as written in the text: bare when it is an identifier, else quoted. Canonical names
// (%N) are never identifiers, so a kept name cannot be mistaken for one.
std::string id(const std::string& s) { return is_identifier(s) ? s : quote(s); }

// Shortest text that reads back as the same number.
template <typename T>
std::string number(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) return std::signbit(v) ? "-nan" : "nan";
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string dtype_name(int32_t dtype) { return ir::dtype_name(dtype); }

std::string domain_name(const std::string& domain, bool canonical) {
  return canonical && domain == "ai.onnx" ? "" : domain;
}

std::string type_text(const onnx::TypeProto& t) {
  auto shape_text = [](const onnx::TensorShapeProto& shape) {
    std::string s = "[";
    for (int i = 0; i < shape.dim_size(); ++i) {
      const auto& d = shape.dim(i);
      if (i) s += ",";
      s += d.has_dim_value()   ? std::to_string(d.dim_value())
           : d.has_dim_param() ? id(d.dim_param())
                               : "?";
    }
    return s + "]";
  };
  switch (t.value_case()) {
    case onnx::TypeProto::kTensorType:
      return dtype_name(t.tensor_type().elem_type()) +
             (t.tensor_type().has_shape() ? shape_text(t.tensor_type().shape()) : "");
    case onnx::TypeProto::kSparseTensorType:
      return "sparse_tensor(" + dtype_name(t.sparse_tensor_type().elem_type()) +
             (t.sparse_tensor_type().has_shape() ? shape_text(t.sparse_tensor_type().shape())
                                                 : "") +
             ")";
    case onnx::TypeProto::kSequenceType:
      return "seq(" + type_text(t.sequence_type().elem_type()) + ")";
    case onnx::TypeProto::kMapType:
      return "map(" + dtype_name(t.map_type().key_type()) + ", " +
             type_text(t.map_type().value_type()) + ")";
    case onnx::TypeProto::kOptionalType:
      return "optional(" + type_text(t.optional_type().elem_type()) + ")";
    default:
      return "?";
  }
}

// Type, dims and every element, whatever the storage (raw_data or typed fields), so that two
// tensors print alike exactly when they hold the same numbers.
std::string tensor_text(const onnx::TensorProto& t) {
  std::string s = dtype_name(t.data_type()) + "[";
  for (int i = 0; i < t.dims_size(); ++i) s += (i ? "," : "") + std::to_string(t.dims(i));
  s += "]";
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    s += " external(";
    for (int i = 0; i < t.external_data_size(); ++i)
      s += (i ? ", " : "") + t.external_data(i).key() + ": " + quote(t.external_data(i).value());
    return s + ")";
  }
  auto tensor = eval::Tensor::from_proto(t, uint64_t{1} << 40);
  if (!tensor.ok()) return s + " <unreadable: " + std::string(tensor.status().message()) + ">";
  s += " {";
  for (int64_t i = 0; i < tensor->size(); ++i) {
    if (i) s += ", ";
    switch (t.data_type()) {
      case onnx::TensorProto::DOUBLE:
        s += number(tensor->get_double(i));
        break;
      case onnx::TensorProto::FLOAT:
      case onnx::TensorProto::FLOAT16:
      case onnx::TensorProto::BFLOAT16:
        s += number(static_cast<float>(tensor->get_double(i)));  // exact for all three
        break;
      case onnx::TensorProto::UINT64:
        s += number(tensor->data<uint64_t>()[i]);
        break;
      case onnx::TensorProto::STRING:
        s += quote(tensor->strings()[static_cast<size_t>(i)]);
        break;
      default:
        s += number(tensor->get_int64(i));
    }
  }
  return s + "}";
}

// Names a graph defines and what they print as, with its enclosing graph's scope as parent.
struct Scope {
  Scope* parent = nullptr;
  std::unordered_set<std::string> defined;
  std::unordered_map<std::string, std::string> printed;
  std::vector<int> order;  // nodes in printing order
};

class Printer {
 public:
  Printer(bool canonical, const std::set<std::string>& kept_initializers)
      : canonical_(canonical), kept_initializers_(kept_initializers) {}

  std::string model(const onnx::ModelProto& m) {
    out_ << "<ir_version: " << m.ir_version() << ", opset_import: [";
    std::vector<std::pair<std::string, int64_t>> opsets;
    for (const auto& o : m.opset_import())
      opsets.emplace_back(domain_name(o.domain(), canonical_), o.version());
    if (canonical_) std::sort(opsets.begin(), opsets.end());
    for (size_t i = 0; i < opsets.size(); ++i)
      out_ << (i ? ", " : "") << quote(opsets[i].first) << " : " << opsets[i].second;
    out_ << "]";
    for (const auto& p : m.metadata_props())
      out_ << ", metadata " << quote(p.key()) << ": " << quote(p.value());
    out_ << ">\n";

    Scope& main = prepare(m.graph(), nullptr);
    graph(m.graph(), main, 0, "graph " + id(m.graph().name()));

    std::vector<const onnx::FunctionProto*> fns;
    for (const auto& f : m.functions()) fns.push_back(&f);
    if (canonical_)
      std::stable_sort(fns.begin(), fns.end(), [](const auto* a, const auto* b) {
        return std::tie(a->domain(), a->name()) < std::tie(b->domain(), b->name());
      });
    for (const auto* f : fns) function(*f);
    return out_.str();
  }

 private:
  // ------------------------------------------------------------------ names and order

  // Names a subgraph reads from enclosing graphs, in order of first appearance.
  std::vector<std::string> free_names(const onnx::GraphProto& g) {
    std::unordered_set<std::string> defined;
    for (const auto& v : g.input()) defined.insert(v.name());
    for (const auto& t : g.initializer()) defined.insert(t.name());
    for (const auto& n : g.node())
      for (const auto& o : n.output()) defined.insert(o);
    std::vector<std::string> free;
    std::unordered_set<std::string> seen;
    auto read = [&](const std::string& name) {
      if (!name.empty() && !defined.count(name) && seen.insert(name).second) free.push_back(name);
    };
    for (const auto& n : g.node()) {
      for (const auto& in : n.input()) read(in);
      for (const auto* sub : subgraphs(n))
        for (const auto& name : free_names(*sub)) read(name);
    }
    for (const auto& o : g.output()) read(o.name());
    return free;
  }

  // Graph attributes in printing order (by attribute name, then position).
  std::vector<const onnx::GraphProto*> subgraphs(const onnx::NodeProto& n) const {
    std::vector<const onnx::GraphProto*> subs;
    for (const auto* a : attributes(n)) {
      if (a->has_g()) subs.push_back(&a->g());
      for (const auto& g : a->graphs()) subs.push_back(&g);
    }
    return subs;
  }

  std::vector<const onnx::AttributeProto*> attributes(const onnx::NodeProto& n) const {
    std::vector<const onnx::AttributeProto*> attrs;
    for (const auto& a : n.attribute()) attrs.push_back(&a);
    if (canonical_)
      std::stable_sort(attrs.begin(), attrs.end(),
                       [](const auto* a, const auto* b) { return a->name() < b->name(); });
    return attrs;
  }

  // Canonical node order: a depth-first walk from the graph's outputs (in order) through each
  // node's inputs (in order, then the names its subgraphs capture), emitting a node after
  // everything it reads; nodes no output depends on follow in their stored order. The order so
  // depends only on the dataflow, not on where a pass appended a node.
  std::vector<int> node_order(const google::protobuf::RepeatedPtrField<onnx::NodeProto>& nodes,
                              const std::vector<std::string>& outputs) {
    const int count = nodes.size();
    std::vector<int> order;
    if (!canonical_) {
      for (int i = 0; i < count; ++i) order.push_back(i);
      return order;
    }
    std::unordered_map<std::string, int> producer;
    for (int i = 0; i < count; ++i)
      for (const auto& o : nodes[i].output())
        if (!o.empty()) producer[o] = i;
    std::vector<std::vector<int>> deps(count);
    for (int i = 0; i < count; ++i) {
      auto add = [&](const std::string& name) {
        auto it = producer.find(name);
        if (it != producer.end()) deps[i].push_back(it->second);
      };
      for (const auto& in : nodes[i].input()) add(in);
      for (const auto* sub : subgraphs(nodes[i]))
        for (const auto& name : free_names(*sub)) add(name);
    }
    std::vector<char> state(count, 0);  // 0 new, 1 on the stack, 2 emitted
    auto visit = [&](int root) {
      if (state[root]) return;
      std::vector<std::pair<int, size_t>> stack = {{root, 0}};
      state[root] = 1;
      while (!stack.empty()) {
        auto& [node, next] = stack.back();
        if (next < deps[node].size()) {
          const int dep = deps[node][next++];
          if (!state[dep]) {
            state[dep] = 1;
            stack.push_back({dep, 0});
          }
          continue;
        }
        state[node] = 2;
        order.push_back(node);
        stack.pop_back();
      }
    };
    for (const auto& o : outputs)
      if (auto it = producer.find(o); it != producer.end()) visit(it->second);
    for (int i = 0; i < count; ++i) visit(i);
    return order;
  }

  // The scope defining `name` as seen from `s`, or nullptr.
  template <typename S>  // Scope or const Scope
  static S* owner(S* s, const std::string& name) {
    for (; s; s = s->parent)
      if (s->defined.count(name)) return s;
    return nullptr;
  }

  // Gives `name` its canonical name at its first appearance.
  void use(Scope& s, const std::string& name) {
    if (name.empty()) return;
    Scope* def = owner(&s, name);
    if (!def || def->printed.count(name)) return;
    def->printed[name] = canonical_ ? "%" + std::to_string(next_++) : id(name);
  }

  void keep(Scope& s, const std::string& name) { s.printed.emplace(name, id(name)); }

  // Orders the graph's nodes and names its values, recursing into subgraphs in the same order
  // they will be printed, so numbers follow the text from top to bottom.
  Scope& prepare(const onnx::GraphProto& g, Scope* parent) {
    // Each root graph (the main graph, a function body) numbers from 0: names in one never
    // refer to another, so one function's text does not depend on the size of the rest.
    if (!parent) next_ = 0;
    auto& slot = scopes_[&g];
    slot = std::make_unique<Scope>();
    Scope& s = *slot;
    s.parent = parent;
    for (const auto& v : g.input()) s.defined.insert(v.name());
    for (const auto& t : g.initializer()) s.defined.insert(t.name());
    for (const auto& n : g.node())
      for (const auto& o : n.output())
        if (!o.empty()) s.defined.insert(o);
    std::vector<std::string> outputs;
    for (const auto& o : g.output()) outputs.push_back(o.name());
    s.order = node_order(g.node(), outputs);

    // A graph's inputs and outputs are its interface: they keep their names, in subgraphs too
    // (passes keep a branch's output names), except an output that is a value of an enclosing
    // graph, which is named there.
    for (const auto& v : g.input()) keep(s, v.name());
    for (const auto& o : outputs)
      if (s.defined.count(o)) keep(s, o);
    for (const auto& t : g.initializer())
      if (kept_initializers_.count(t.name())) keep(s, t.name());
    for (int i : s.order) {
      const auto& n = g.node(i);
      for (const auto& in : n.input()) use(s, in);
      for (const auto* sub : subgraphs(n)) prepare(*sub, &s);
      for (const auto& o : n.output()) use(s, o);
    }
    for (const auto& o : outputs) use(s, o);
    for (const auto& t : g.initializer()) use(s, t.name());  // unused ones, in stored order
    return s;
  }

  std::string name_in(const Scope& s, const std::string& name) const {
    if (name.empty()) return "\"\"";
    const Scope* def = owner(&s, name);
    if (def) {
      auto it = def->printed.find(name);
      if (it != def->printed.end()) return it->second;
    }
    return "?" + id(name);  // defined nowhere in scope
  }

  // Sort key of a printed name: kept names first (by text), then canonical ones by number.
  static std::pair<int64_t, std::string> order_key(const std::string& printed) {
    if (printed.size() > 1 && printed[0] == '%') return {std::stoll(printed.substr(1)), ""};
    return {-1, printed};
  }

  // ------------------------------------------------------------------ printing

  void indent(int depth) { out_ << std::string(static_cast<size_t>(depth) * 2, ' '); }

  void graph(const onnx::GraphProto& g, const Scope& s, int depth, const std::string& title) {
    auto value_list = [&](const auto& values) {
      std::string list = "(";
      for (int i = 0; i < values.size(); ++i) {
        if (i) list += ", ";
        list += (values[i].has_type() ? type_text(values[i].type()) + " " : "") +
                name_in(s, values[i].name());
      }
      return list + ")";
    };
    out_ << title << " " << value_list(g.input()) << " => " << value_list(g.output()) << " {\n";

    std::vector<const onnx::TensorProto*> inits;
    for (const auto& t : g.initializer()) inits.push_back(&t);
    std::vector<const onnx::ValueInfoProto*> infos;
    for (const auto& v : g.value_info()) infos.push_back(&v);
    if (canonical_) {
      std::stable_sort(inits.begin(), inits.end(), [&](const auto* a, const auto* b) {
        return order_key(name_in(s, a->name())) < order_key(name_in(s, b->name()));
      });
      std::stable_sort(infos.begin(), infos.end(), [&](const auto* a, const auto* b) {
        return order_key(name_in(s, a->name())) < order_key(name_in(s, b->name()));
      });
    }
    for (const auto* t : inits) {
      indent(depth + 1);
      out_ << "initializer " << name_in(s, t->name()) << " = " << tensor_text(*t) << "\n";
    }
    if (g.sparse_initializer_size()) {
      indent(depth + 1);
      out_ << "sparse_initializers " << g.sparse_initializer_size() << "\n";
    }
    for (const auto* v : infos) {
      indent(depth + 1);
      // A value_info naming no value keeps no name in canonical text: its name is whatever the
      // pass left, and only its presence and type say something.
      const bool orphan = !owner(&s, v->name());
      out_ << "value_info " << (v->has_type() ? type_text(v->type()) : "?") << " "
           << (orphan && canonical_ ? "?" : name_in(s, v->name())) << "\n";
    }
    for (int i : s.order) node(g.node(i), s, depth + 1);
    indent(depth);
    out_ << "}";
  }

  void node(const onnx::NodeProto& n, const Scope& s, int depth) {
    indent(depth);
    if (!canonical_ && !n.name().empty()) out_ << "[" << id(n.name()) << "] ";
    for (int i = 0; i < n.output_size(); ++i) out_ << (i ? ", " : "") << name_in(s, n.output(i));
    const std::string domain = domain_name(n.domain(), canonical_);
    out_ << " = " << (domain.empty() ? "" : domain + ".") << n.op_type();
    std::vector<const onnx::AttributeProto*> plain, graphs;
    for (const auto* a : attributes(n))
      (a->has_g() || a->type() == onnx::AttributeProto::GRAPH ||
               a->type() == onnx::AttributeProto::GRAPHS
           ? graphs
           : plain)
          .push_back(a);
    if (!plain.empty()) {
      out_ << " <";
      for (size_t i = 0; i < plain.size(); ++i) out_ << (i ? ", " : "") << attribute(*plain[i]);
      out_ << ">";
    }
    out_ << " (";
    for (int i = 0; i < n.input_size(); ++i) out_ << (i ? ", " : "") << name_in(s, n.input(i));
    out_ << ")";
    if (!graphs.empty()) {
      out_ << " <\n";
      for (const auto* a : graphs) {
        std::vector<const onnx::GraphProto*> bodies;
        if (a->has_g()) bodies.push_back(&a->g());
        for (const auto& g : a->graphs()) bodies.push_back(&g);
        for (size_t i = 0; i < bodies.size(); ++i) {
          indent(depth + 1);
          std::string title = a->name();
          if (a->type() == onnx::AttributeProto::GRAPHS) title += "[" + std::to_string(i) + "]";
          // Subgraph names are labels nothing refers to: canonical text leaves them out.
          graph(*bodies[i], *scopes_.at(bodies[i]), depth + 1,
                title + " = graph" + (canonical_ ? "" : " " + id(bodies[i]->name())));
          out_ << "\n";
        }
      }
      indent(depth);
      out_ << ">";
    }
    out_ << "\n";
  }

  std::string attribute(const onnx::AttributeProto& a) const {
    std::string s = a.name() + ": ";
    if (!a.ref_attr_name().empty()) return s + "@" + a.ref_attr_name();
    auto list = [](const auto& values, auto format) {
      std::string l = "[";
      for (int i = 0; i < values.size(); ++i) l += (i ? ", " : "") + format(values[i]);
      return l + "]";
    };
    switch (a.type()) {
      case onnx::AttributeProto::INT:
        return s + "int = " + number(a.i());
      case onnx::AttributeProto::INTS:
        return s + "ints = " + list(a.ints(), [](int64_t v) { return number(v); });
      case onnx::AttributeProto::FLOAT:
        return s + "float = " + number(a.f());
      case onnx::AttributeProto::FLOATS:
        return s + "floats = " + list(a.floats(), [](float v) { return number(v); });
      case onnx::AttributeProto::STRING:
        return s + "string = " + quote(a.s());
      case onnx::AttributeProto::STRINGS:
        return s + "strings = " + list(a.strings(), [](const std::string& v) { return quote(v); });
      case onnx::AttributeProto::TENSOR:
        return s + "tensor = " + tensor_text(a.t());
      case onnx::AttributeProto::TENSORS:
        return s + "tensors = " + list(a.tensors(), [](const auto& t) { return tensor_text(t); });
      case onnx::AttributeProto::TYPE_PROTO:
        return s + "type = " + type_text(a.tp());
      case onnx::AttributeProto::TYPE_PROTOS:
        return s + "types = " + list(a.type_protos(), [](const auto& t) { return type_text(t); });
      case onnx::AttributeProto::SPARSE_TENSOR:
      case onnx::AttributeProto::SPARSE_TENSORS:
        return s + "sparse = " + std::to_string(a.ByteSizeLong()) + " bytes";
      default:
        return s + "undefined";
    }
  }

  void function(const onnx::FunctionProto& f) {
    // A function body as a graph of nodes, so it is printed and canonicalised like one.
    onnx::GraphProto body;
    for (const auto& in : f.input()) body.add_input()->set_name(in);
    for (const auto& o : f.output()) body.add_output()->set_name(o);
    *body.mutable_node() = f.node();
    bodies_.push_back(std::move(body));
    const onnx::GraphProto& g = bodies_.back();
    Scope& s = prepare(g, nullptr);
    out_ << "\n<domain: " << quote(f.domain()) << ", opset_import: [";
    std::vector<std::pair<std::string, int64_t>> opsets;
    for (const auto& o : f.opset_import())
      opsets.emplace_back(domain_name(o.domain(), canonical_), o.version());
    if (canonical_) std::sort(opsets.begin(), opsets.end());
    for (size_t i = 0; i < opsets.size(); ++i)
      out_ << (i ? ", " : "") << quote(opsets[i].first) << " : " << opsets[i].second;
    out_ << "]";
    if (f.attribute_size()) {
      out_ << ", attributes: [";
      for (int i = 0; i < f.attribute_size(); ++i) out_ << (i ? ", " : "") << f.attribute(i);
      out_ << "]";
    }
    out_ << ">\n";
    graph(g, s, 0, "function " + id(f.name()));
    out_ << "\n";
  }

  bool canonical_;
  const std::set<std::string>& kept_initializers_;
  std::ostringstream out_;
  int64_t next_ = 0;
  std::unordered_map<const onnx::GraphProto*, std::unique_ptr<Scope>> scopes_;
  std::deque<onnx::GraphProto> bodies_;  // function bodies as graphs; stable addresses
};

}  // namespace

std::string print(const ir::Model& model) { return Printer(false, {}).model(model.to_proto()); }

std::string canonical_text(const ir::Model& model, const std::set<std::string>& kept_initializers) {
  return Printer(true, kept_initializers).model(model.to_proto());
}

std::set<std::string> initializer_names(const ir::Model& model) {
  std::set<std::string> names;
  for (const ir::Graph* g : model.all_graphs())
    for (const ir::Value* v : g->initializers()) names.insert(v->name());
  return names;
}

}  // namespace graft::testing
