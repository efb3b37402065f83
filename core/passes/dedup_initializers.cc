// Initializers with the same data type, dims and payload bytes are merged into the first of them
// (in initializer order): uses of the others are redirected to it and the others removed. Each
// graph is deduplicated on its own, so a subgraph's initializers only merge with each other.
//
// External-data tensors are compared without holding them: by type, dims and length first, so
// only a tensor with a same-sized external twin is read at all; then by a hash of their first
// 64 KiB, so only those whose beginnings match another's are hashed whole; two references to
// the same range are equal at once; otherwise the payload is hashed in blocks
// (ExternalData::content_hash, remembered per range, so later rounds read nothing) and equal
// hashes are confirmed block by block.
//
// Deliberately left alone:
//  - initializers that are graph inputs (callers may override them: they are interface);
//  - tensors using `segment`, and external-data tensors of a model whose files are unknown;
//  - equal values stored differently (raw_data in one, typed fields in the other, external data
//    in a third);
//  - a duplicate whose kept twin is also a graph output: both names are interface.
#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ir/hash.h"
#include "core/ir/op_params.h"
#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rewriter.h"

namespace graft {

namespace {

using onnx::TensorProto;

// The bytes of a repeated numeric field, viewed in place.
template <typename T>
std::string_view bytes_of(const google::protobuf::RepeatedField<T>& f) {
  if (f.empty()) return {};
  return std::string_view(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(T));
}

size_t tensor_hash(const TensorProto& t) {
  std::hash<std::string_view> hash;
  size_t h = static_cast<size_t>(t.data_type());
  ir::hash_mix(h, t.dims_size());
  ir::hash_mix(h, hash(bytes_of(t.dims())));
  ir::hash_mix(h, t.has_raw_data());
  if (t.has_raw_data()) {
    ir::hash_mix(h, hash(t.raw_data()));
    return h;
  }
  ir::hash_mix(h, hash(bytes_of(t.float_data())));
  ir::hash_mix(h, hash(bytes_of(t.int32_data())));
  ir::hash_mix(h, hash(bytes_of(t.int64_data())));
  ir::hash_mix(h, hash(bytes_of(t.double_data())));
  ir::hash_mix(h, hash(bytes_of(t.uint64_data())));
  for (const std::string& s : t.string_data()) ir::hash_mix(h, hash(s));
  return h;
}

// Bitwise comparison, so 0.0 and -0.0 (or NaNs with different payloads) stay distinct.
template <typename T>
bool same_field(const google::protobuf::RepeatedField<T>& a,
                const google::protobuf::RepeatedField<T>& b) {
  return bytes_of(a) == bytes_of(b);
}

bool same_tensor(const TensorProto& a, const TensorProto& b) {
  if (a.data_type() != b.data_type() || !same_field(a.dims(), b.dims()) ||
      a.has_raw_data() != b.has_raw_data())
    return false;
  if (a.has_raw_data()) return a.raw_data() == b.raw_data();
  if (a.string_data_size() != b.string_data_size()) return false;
  for (int i = 0; i < a.string_data_size(); ++i)
    if (a.string_data(i) != b.string_data(i)) return false;
  return same_field(a.float_data(), b.float_data()) && same_field(a.int32_data(), b.int32_data()) &&
         same_field(a.int64_data(), b.int64_data()) &&
         same_field(a.double_data(), b.double_data()) &&
         same_field(a.uint64_data(), b.uint64_data());
}

bool can_merge(const ir::Value& v) {
  if (v.is_graph_input() || !v.initializer()) return false;
  const TensorProto& t = *v.initializer();
  if (t.has_segment() || t.data_type() == TensorProto::UNDEFINED) return false;
  if (ir::is_external(t)) return ir::external_data_of(&v) != nullptr;
  return t.external_data_size() == 0;
}

// What two external tensors must share before their bytes are looked at: type, dims, length.
size_t external_shape_key(const TensorProto& t, uint64_t length) {
  std::hash<std::string_view> hash;
  size_t h = static_cast<size_t>(t.data_type());
  ir::hash_mix(h, t.dims_size());
  ir::hash_mix(h, hash(bytes_of(t.dims())));
  ir::hash_mix(h, std::hash<uint64_t>()(length));
  return h;
}

// The first kHeadBytes of an external tensor's payload as an external tensor of its own (bytes
// at the same location and offset), for a cheap first hash; nullopt when its keys are bad.
constexpr uint64_t kHeadBytes = 64 << 10;
std::optional<TensorProto> head_tensor(const TensorProto& t) {
  auto keys = ir::parse_external_keys(t);
  auto length = ir::payload_bytes(t);
  if (!keys.ok() || !length) return std::nullopt;
  const uint64_t n = std::min(*length, kHeadBytes);
  TensorProto head;
  head.set_name(t.name());
  head.set_data_type(TensorProto::UINT8);
  head.add_dims(static_cast<int64_t>(n));
  head.set_data_location(TensorProto::EXTERNAL);
  auto add = [&](const char* key, std::string value) {
    auto* e = head.add_external_data();
    e->set_key(key);
    e->set_value(std::move(value));
  };
  add("location", keys->location);
  add("offset", std::to_string(keys->offset));
  add("length", std::to_string(n));
  return head;
}

class DedupInitializers final : public PerGraphPass {
 public:
  std::string_view name() const override { return "dedup_initializers"; }

 private:
  absl::Status run_graph(ir::Graph& g, Rewriter& rw, PassContext&, PassResult& result) override {
    // External tensors with a same-sized twin: only these are ever read. Their first bytes are
    // hashed first (weights of the same shape almost always differ there), and only those whose
    // first bytes match another's are hashed whole.
    std::unordered_map<size_t, int> external_shapes;
    std::unordered_map<const ir::Value*, size_t> shape_of;
    for (ir::Value* v : g.initializers()) {
      if (!can_merge(*v) || !ir::is_external(*v->initializer())) continue;
      auto length = ir::payload_bytes(*v->initializer());
      if (!length) continue;
      const size_t key = external_shape_key(*v->initializer(), *length);
      shape_of[v] = key;
      ++external_shapes[key];
    }
    std::unordered_map<size_t, int> external_heads;
    std::unordered_map<const ir::Value*, size_t> head_of;
    for (auto& [v, key] : shape_of) {
      if (external_shapes[key] < 2) continue;
      auto head = head_tensor(*v->initializer());
      if (!head) continue;
      auto h = ir::external_data_of(v)->content_hash(*head);
      if (!h.ok()) continue;  // an unreadable reference stays as it is
      size_t head_key = key;
      ir::hash_mix(head_key, static_cast<size_t>(*h));
      head_of[v] = head_key;
      ++external_heads[head_key];
    }
    std::unordered_map<size_t, std::vector<ir::Value*>> kept, kept_external;
    for (ir::Value* v : g.initializers()) {
      if (!can_merge(*v)) continue;
      const TensorProto& t = *v->initializer();
      std::vector<ir::Value*>* bucket = nullptr;
      std::function<bool(const ir::Value*)> same;
      if (ir::is_external(t)) {
        auto head = head_of.find(v);
        if (head == head_of.end() || external_heads[head->second] < 2) continue;
        const ir::ExternalData* data = ir::external_data_of(v);
        // Remembered per range by ExternalData: a head as long as the tensor is not read again.
        auto h = data->content_hash(t);
        if (!h.ok()) continue;
        size_t key = head->second;
        ir::hash_mix(key, static_cast<size_t>(*h));
        bucket = &kept_external[key];
        // `data` by value: the lambda is called after this block ends.
        same = [&t, data](const ir::Value* twin) {
          const TensorProto& o = *twin->initializer();
          if (o.data_type() != t.data_type() || !same_field(o.dims(), t.dims())) return false;
          auto equal = data->same_payload(o, t);
          return equal.ok() && *equal;
        };
      } else {
        bucket = &kept[tensor_hash(t)];
        same = [&](const ir::Value* twin) { return same_tensor(*twin->initializer(), t); };
      }
      auto twin = bucket->begin();
      while (twin != bucket->end() && !same(*twin)) ++twin;
      if (twin == bucket->end()) {
        bucket->push_back(v);
        continue;
      }
      ir::Value* keep = *twin;
      ir::Value* drop = v;
      if (v->is_graph_output()) {
        // A graph output's name is interface: keep this one instead of the earlier twin.
        if (keep->is_graph_output()) continue;
        std::swap(keep, drop);
        *twin = keep;
      }
      if (!rw.replace_all_uses(drop, keep, /*allow_identity=*/false)) continue;
      rw.erase_if_unused(drop);
      result.add();
    }
    return absl::OkStatus();
  }
};

}  // namespace

PassInfo dedup_initializers_pass() {
  return describe<DedupInitializers>(
      {.name = "dedup_initializers",
       .level = 1,
       .description = "merge initializers with equal type, shape and bytes",
       .options = {}});
}

}  // namespace graft
