#include "core/analysis/memory.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/ir/external_data.h"
#include "core/ir/tensor.h"

namespace graft {

namespace {

// What a walk over a graph and its bodies finds besides the peak.
struct Tally {
  int64_t unknown = 0;
  std::string largest;
  uint64_t largest_bytes = 0;
};

uint64_t sized(const ir::Value& v, const SizeRule& rule, Tally& tally) {
  bool known = true;
  uint64_t b = value_bytes(v, rule, &known);
  if (!known) {
    ++tally.unknown;
  } else if (b > tally.largest_bytes || tally.largest.empty()) {
    // The first of equal sizes (saved order) wins: deterministic.
    tally.largest = v.name();
    tally.largest_bytes = b;
  }
  return b;
}

// A Constant node's value is a weight, as if it were an initializer (runtimes load it as one
// before the graph runs), unless it is a graph output.
bool is_weight_node(const ir::Node& n) { return n.is("Constant") && n.inputs().empty(); }

// The peak of running `order`; *end_live (may be null): the bytes still held at the end (the
// graph's outputs and unread inputs).
// *in_use (may be null): the bytes in use while each node of `order` runs (Constants that are
// weights: the bytes live across them).
uint64_t peak_of(const ir::Graph& g, const std::vector<ir::Node*>& order, const SizeRule& rule,
                 Tally& tally, int64_t* peak_node, uint64_t* end_live,
                 std::vector<uint64_t>* in_use = nullptr) {
  std::unordered_map<const ir::Node*, size_t> pos;
  pos.reserve(order.size());
  for (size_t i = 0; i < order.size(); ++i) pos.emplace(order[i], i);
  // Bytes freed after node i; values that never die are not listed.
  std::vector<uint64_t> freed(order.size(), 0);
  // When `v` (of g) dies: after its last reader, after its producer if nobody reads it, never
  // (SIZE_MAX) if it is an output of g or an unread graph input.
  auto death = [&](const ir::Value& v, size_t born) -> size_t {
    if (v.is_output_of(g)) return SIZE_MAX;
    size_t last = born;
    bool read = false;
    for (ir::Node* r : readers_in_graph(g, v)) {
      auto it = pos.find(r);
      if (it == pos.end()) continue;
      read = true;
      last = (last == SIZE_MAX || it->second > last) ? it->second : last;
    }
    if (!read && born == SIZE_MAX) return SIZE_MAX;  // unread graph input: held to the end
    return last;
  };

  uint64_t live = 0;
  for (const auto& in : g.inputs()) {
    const ir::Value& v = *in.value;
    if (v.is_initializer()) continue;  // a weight (an overridable default)
    uint64_t b = sized(v, rule, tally);
    live = sat_add(live, b);
    size_t d = death(v, SIZE_MAX);
    if (d != SIZE_MAX) freed[d] = sat_add(freed[d], b);
  }
  uint64_t peak = live;
  if (peak_node) *peak_node = -1;
  if (in_use) in_use->assign(order.size(), 0);
  for (size_t i = 0; i < order.size(); ++i) {
    const ir::Node& n = *order[i];
    if (is_weight_node(n) && n.outputs().size() == 1 && n.outputs()[0] &&
        !n.outputs()[0]->is_output_of(g)) {
      if (in_use) (*in_use)[i] = live;
      continue;
    }
    uint64_t out = 0;
    for (size_t k = 0; k < n.outputs().size(); ++k) {
      const ir::Value* v = n.outputs()[k];
      if (!v) continue;
      bool repeated = false;  // an output listed twice is one tensor
      for (size_t j = 0; j < k; ++j) repeated = repeated || n.outputs()[j] == v;
      if (repeated) continue;
      uint64_t b = sized(*v, rule, tally);
      out = sat_add(out, b);
      size_t d = death(*v, i);
      if (d != SIZE_MAX) freed[d] = sat_add(freed[d], b);
    }
    // A body runs before the node's outputs are made: on top of what is live, the larger of the
    // body's own peak and what it still holds at its end (its outputs) plus the node's outputs,
    // for the body that needs most (one If branch runs; the values of a Loop/Scan iteration die
    // before the next, so one iteration counts).
    uint64_t extra = out;
    for (const auto& sub : n.subgraphs()) {
      uint64_t body_end = 0;
      uint64_t body = peak_of(*sub.graph, sub.graph->nodes(), rule, tally, nullptr, &body_end);
      extra = std::max(extra, std::max(body, sat_add(body_end, out)));
    }
    uint64_t during = sat_add(live, extra);
    if (in_use) (*in_use)[i] = during;
    if (during > peak) {
      peak = during;
      if (peak_node) *peak_node = static_cast<int64_t>(i);
    }
    live = sat_add(live, out);
    // Saturated sums can not be undone exactly; stay saturated once there.
    if (live != kSaturated) live = sat_sub(live, freed[i]);
  }
  if (end_live) *end_live = live;
  return peak;
}

}  // namespace

uint64_t value_bytes(const ir::Value& v, const SizeRule& rule, bool* known) {
  if (known) *known = false;
  const ir::TensorFact& f = v.fact();
  // 4-bit elements are counted one per byte, then packed two per byte (as runtimes hold them).
  const bool four_bit = ir::is_4bit(f.elem_type);
  uint64_t elem = four_bit ? 1 : f.elem_type ? ir::element_size(f.elem_type) : 0;
  if (elem == 0 || !f.has_rank) return 0;
  uint64_t bytes = elem;
  for (const ir::Dim& d : f.dims) {
    int64_t size = rule.default_dim;
    if (d.known()) {
      size = d.value;
    } else if (d.is_symbol() && rule.dims) {
      auto it = rule.dims->find(d.symbol);
      if (it != rule.dims->end()) size = it->second;
    }
    bytes = sat_mul(bytes, static_cast<uint64_t>(std::max<int64_t>(size, 0)));
  }
  if (four_bit && bytes != kSaturated) bytes = bytes / 2 + bytes % 2;
  if (known) *known = true;
  return bytes;
}

ir::Node* node_in_graph(const ir::Graph& g, ir::Node* n) {
  while (n && n->graph() != &g) n = n->graph() ? n->graph()->parent() : nullptr;
  return n;
}

std::vector<ir::Node*> readers_in_graph(const ir::Graph& g, const ir::Value& v) {
  std::vector<ir::Node*> out;
  std::unordered_set<const ir::Node*> seen;  // for values with many readers (a shape, a mask)
  const bool many = v.uses().size() > 16;
  auto add = [&](ir::Node* n) {
    if (!n || n->dead()) return;
    if (many ? seen.insert(n).second : std::find(out.begin(), out.end(), n) == out.end())
      out.push_back(n);
  };
  for (const ir::Use& u : v.uses()) add(node_in_graph(g, u.node));
  for (const auto& [h, i] : v.output_refs())
    if (h != &g && h->parent()) add(node_in_graph(g, h->parent()));
  return out;
}

uint64_t graph_peak_bytes(const ir::Graph& g, const std::vector<ir::Node*>& order,
                          const SizeRule& rule, MemoryStats* stats) {
  Tally tally;
  int64_t peak_node = -1;
  uint64_t peak = peak_of(g, order, rule, tally, &peak_node, nullptr);
  if (stats) {
    stats->peak_activation_bytes = peak;
    stats->largest_tensor = tally.largest;
    stats->largest_tensor_bytes = tally.largest_bytes;
    stats->unknown_size_values = tally.unknown;
    stats->peak_node = peak_node;
  }
  return peak;
}

std::vector<uint64_t> activation_timeline(const ir::Model& model, const SizeRule& rule) {
  Tally tally;
  std::vector<uint64_t> in_use;
  SizeRule clamped{rule.dims, std::max<int64_t>(rule.default_dim, 0)};
  peak_of(model.graph(), model.graph().nodes(), clamped, tally, nullptr, nullptr, &in_use);
  return in_use;
}

MemoryStats estimate_memory(const ir::Model& model, const DimBindings& dims, int64_t default_dim) {
  MemoryStats stats;
  for (const ir::Graph* g : model.all_graphs())
    for (const ir::Value* v : g->initializers())
      stats.weight_bytes =
          sat_add(stats.weight_bytes, ir::payload_bytes(*v->initializer()).value_or(0));
  SizeRule rule{&dims, std::max<int64_t>(default_dim, 0)};
  for (const ir::Graph* g : model.all_graphs())
    for (const ir::Node* n : g->nodes())
      if (is_weight_node(*n) && n->outputs().size() == 1 && n->outputs()[0])
        stats.weight_bytes = sat_add(stats.weight_bytes, value_bytes(*n->outputs()[0], rule));
  const auto& nodes = model.graph().nodes();
  graph_peak_bytes(model.graph(), nodes, rule, &stats);
  if (stats.peak_node >= 0 && static_cast<size_t>(stats.peak_node) < nodes.size()) {
    const ir::Node& n = *nodes[static_cast<size_t>(stats.peak_node)];
    stats.peak_node_name = n.name().empty() ? n.op_type() : n.name();
  }
  return stats;
}

}  // namespace graft
