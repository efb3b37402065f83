// ONNX's text syntax with the 4-bit types: see onnx_text.h.
#include "tests/onnx_text.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <vector>

#include <onnx/defs/parser.h>

#include "core/ir/tensor.h"

namespace graft::testing {

namespace {

// `int4` and `uint4` are read as `int8` and `uint8`, then their type is given back to the values
// and tensors declared with them, by name.
struct FourBitNames {
  std::map<std::string, int32_t> names;  // value or tensor name -> ir::kInt4 or ir::kUint4
};

// `text` with the type names int4/uint4 replaced, and the names they declare: a type name is
// followed by an optional [dims] and the declared name (`int4[2,3] w`, `uint4 z`).
std::string replace_4bit_types(const std::string& text, FourBitNames& found) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const bool start = i == 0 || !ident(text[i - 1]);
    int32_t type = 0;
    size_t len = 0;
    if (start && text.compare(i, 4, "int4") == 0 && (i + 4 == text.size() || !ident(text[i + 4]))) {
      type = ir::kInt4;
      len = 4;
    } else if (start && text.compare(i, 5, "uint4") == 0 &&
               (i + 5 == text.size() || !ident(text[i + 5]))) {
      type = ir::kUint4;
      len = 5;
    }
    if (type == 0) {
      out += text[i++];
      continue;
    }
    out += type == ir::kInt4 ? "int8" : "uint8";
    i += len;
    size_t j = i;
    if (j < text.size() && text[j] == '[') j = std::min(text.find(']', j), text.size() - 1) + 1;
    while (j < text.size() && std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    size_t end = j;
    while (end < text.size() && (ident(text[end]) || text[end] == '.' || text[end] == '/')) ++end;
    if (end > j) found.names[text.substr(j, end - j)] = type;
  }
  return out;
}

void restore_type(onnx::TypeProto* t, int32_t type) {
  if (t->has_tensor_type()) t->mutable_tensor_type()->set_elem_type(type);
}

// A tensor parsed as int8/uint8 (one element per int32_data entry) stored as `type`: packed.
void restore_tensor(onnx::TensorProto* t, int32_t type) {
  std::vector<int8_t> values;
  for (int32_t v : t->int32_data()) values.push_back(static_cast<int8_t>(v));
  t->clear_int32_data();
  t->set_data_type(type);
  t->set_raw_data(ir::pack_4bit(values.data(), values.size()));
}

void restore_4bit(onnx::GraphProto* g, const FourBitNames& found);

void restore_4bit(onnx::NodeProto* n, const FourBitNames& found) {
  for (auto& a : *n->mutable_attribute()) {
    if (a.has_t()) {
      auto it = found.names.find(a.t().name());
      if (it != found.names.end()) restore_tensor(a.mutable_t(), it->second);
    }
    if (a.has_g()) restore_4bit(a.mutable_g(), found);
    for (auto& g : *a.mutable_graphs()) restore_4bit(&g, found);
  }
}

void restore_4bit(onnx::GraphProto* g, const FourBitNames& found) {
  auto type_of = [&](const std::string& name) {
    auto it = found.names.find(name);
    return it == found.names.end() ? 0 : it->second;
  };
  for (auto* list : {g->mutable_input(), g->mutable_output(), g->mutable_value_info()})
    for (auto& v : *list)
      if (int32_t t = type_of(v.name())) restore_type(v.mutable_type(), t);
  for (auto& t : *g->mutable_initializer())
    if (int32_t type = type_of(t.name())) restore_tensor(&t, type);
  for (auto& n : *g->mutable_node()) restore_4bit(&n, found);
}

}  // namespace

std::string parse_onnx_text(const std::string& text, onnx::ModelProto* proto) {
  FourBitNames found;
  const std::string replaced = replace_4bit_types(text, found);
  auto status = onnx::OnnxParser::Parse(*proto, replaced.c_str());
  if (!status.IsOK()) return status.ErrorMessage().empty() ? "parse error" : status.ErrorMessage();
  if (!found.names.empty()) {
    restore_4bit(proto->mutable_graph(), found);
    for (auto& f : *proto->mutable_functions())
      for (auto& n : *f.mutable_node()) restore_4bit(&n, found);
  }
  return "";
}

}  // namespace graft::testing
