// Reorders the main graph's nodes to lower the estimated peak activation memory
// (core/analysis/memory.h: values freed after their last reader, sizes from shape facts).
// Exact: no node is changed, added or removed; only the saved order of the main graph changes,
// to another topological order (If/Loop/Scan bodies and function bodies keep theirs).
//
// Greedy list scheduling: among the nodes whose operands are computed (at most kWindow of them,
// the earliest in the saved order, so big graphs cost O(n * kWindow * reads)), run the one whose
// outputs add the fewest bytes net of the operands it is the last reader of. Two variants break
// ties differently: the earliest in the saved order, or depth first (the node made ready most
// recently, which finishes a branch before starting the next; the nodes readied by the last step
// are candidates too). Both are deterministic; the one with the lower estimate is kept. The
// estimate is computed for the saved order and the new one with the same estimator; the new order
// is kept only when its peak is strictly lower, so the pass never raises the estimate (changed =
// false otherwise, model untouched).
//
// Sizes: symbolic dims and unknown dims are `default_dim` (option, default 1). An unnamed or
// unbound dim is most often the batch (or sequence) size, shared by every activation, so it
// scales all of them alike and hardly changes which order is best; 1 keeps estimates of
// hostile dims small and the arithmetic saturating anyway.
//
// Reported (PassResult::rules, when the order changed): peak_bytes_before, peak_bytes_after;
// rewrites = the number of nodes whose position changed.
#include <algorithm>
#include <set>
#include <unordered_map>

#include "core/analysis/memory.h"
#include "core/base/status.h"
#include "core/passes/passes.h"

namespace graft {

namespace {

constexpr char kDefaultDim[] = "default_dim";
constexpr size_t kWindow = 64;

// A greedy schedule of g's nodes (positions in `nodes`); empty if it could not place them all.
std::vector<ir::Node*> greedy_order(const ir::Graph& g, const std::vector<ir::Node*>& nodes,
                                    const SizeRule& rule, bool depth_first) {
  const size_t n = nodes.size();
  std::unordered_map<const ir::Node*, size_t> pos;
  pos.reserve(n);
  for (size_t i = 0; i < n; ++i) pos.emplace(nodes[i], i);

  // Per node: the values of g it reads (inputs or captures), the nodes reading its outputs.
  std::vector<std::vector<size_t>> reads(n);  // indices into `values`
  std::vector<std::vector<size_t>> succs(n);
  std::vector<size_t> preds(n, 0);
  std::vector<uint64_t> alloc(n, 0);
  struct Val {
    uint64_t bytes;
    size_t readers;  // not yet scheduled
    bool kept;       // graph output: never freed
  };
  std::vector<Val> values;
  auto add_value = [&](const ir::Value& v, size_t producer) {
    uint64_t b = value_bytes(v, rule);
    bool kept = false;
    for (const auto& [h, i] : v.output_refs()) kept = kept || h == &g;
    size_t id = values.size();
    values.push_back({b, 0, kept});
    for (ir::Node* r : readers_in_graph(g, v)) {
      auto it = pos.find(r);
      if (it == pos.end() || it->second == producer) continue;
      reads[it->second].push_back(id);
      ++values[id].readers;
      if (producer != SIZE_MAX) {
        auto& s = succs[producer];
        if (std::find(s.begin(), s.end(), it->second) == s.end()) {
          s.push_back(it->second);
          ++preds[it->second];
        }
      }
    }
  };
  for (const auto& in : g.inputs())
    if (!in.value->is_initializer()) add_value(*in.value, SIZE_MAX);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < nodes[i]->outputs().size(); ++k) {
      const ir::Value* v = nodes[i]->outputs()[k];
      if (!v || std::find(nodes[i]->outputs().begin(), nodes[i]->outputs().begin() + k, v) !=
                    nodes[i]->outputs().begin() + k)
        continue;
      alloc[i] = sat_add(alloc[i], value_bytes(*v, rule));
      add_value(*v, i);
    }

  std::set<size_t> ready;
  std::vector<size_t> ready_at(n, 0);  // the step a node became ready at
  for (size_t i = 0; i < n; ++i)
    if (preds[i] == 0) ready.insert(i);
  std::vector<ir::Node*> order;
  order.reserve(n);
  std::vector<size_t> recent;  // made ready by the last step (depth-first: always candidates)
  size_t best = SIZE_MAX;
  __int128 best_net = 0;
  auto consider = [&](size_t c) {
    __int128 net = alloc[c];
    for (size_t id : reads[c])
      if (values[id].readers == 1 && !values[id].kept) net -= values[id].bytes;
    bool better = best == SIZE_MAX || net < best_net;
    if (!better && net == best_net && c != best) {
      // Ties: the saved order, or (depth-first) the most recently readied node first.
      better =
          depth_first && ready_at[c] != ready_at[best] ? ready_at[c] > ready_at[best] : c < best;
    }
    if (better) {
      best = c;
      best_net = net;
    }
  };
  for (size_t step = 1; !ready.empty(); ++step) {
    best = SIZE_MAX;
    size_t scanned = 0;
    for (auto it = ready.begin(); it != ready.end() && scanned < kWindow; ++it, ++scanned)
      consider(*it);
    if (depth_first)
      for (size_t c : recent) consider(c);
    ready.erase(best);
    order.push_back(nodes[best]);
    recent.clear();
    for (size_t id : reads[best]) --values[id].readers;
    for (size_t s : succs[best])
      if (--preds[s] == 0) {
        ready.insert(s);
        ready_at[s] = step;
        recent.push_back(s);
      }
  }
  if (order.size() != n) return {};  // a cycle: leave the graph alone
  return order;
}

class ScheduleMemory final : public Pass {
 public:
  std::string_view name() const override { return "schedule_memory"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    PassResult result;
    ir::Graph& g = model.graph();
    const std::vector<ir::Node*> nodes = g.nodes();
    if (nodes.size() < 2) return result;
    SizeRule rule{nullptr, ctx.int_option(kDefaultDim)};
    const uint64_t before = graph_peak_bytes(g, nodes, rule);
    // Two greedy variants; the lower estimate wins (the first on a tie).
    std::vector<ir::Node*> order;
    uint64_t after = before;
    for (bool depth_first : {false, true}) {
      std::vector<ir::Node*> candidate = greedy_order(g, nodes, rule, depth_first);
      if (candidate.empty()) continue;
      const uint64_t peak = graph_peak_bytes(g, candidate, rule);
      if (peak < after) {
        after = peak;
        order = std::move(candidate);
      }
    }
    if (after >= before) return result;
    RETURN_IF_ERROR(g.reorder_nodes(order));
    int64_t moved = 0;
    for (size_t i = 0; i < nodes.size(); ++i) moved += nodes[i] != order[i];
    result.add(moved);
    result.rules["peak_bytes_before"] = clamp_to_i64(before);
    result.rules["peak_bytes_after"] = clamp_to_i64(after);
    return result;
  }
};

}  // namespace

PassInfo schedule_memory_pass() {
  return describe<ScheduleMemory>(
      {.name = "schedule_memory",
       .level = 3,
       .description = "reorder the main graph's nodes to lower the estimated peak activation "
                      "memory (never raises it)",
       .options = {integer_option(kDefaultDim, 1, 1, int64_t{1} << 20,
                                  "size assumed for symbolic and unknown dims")}});
}

}  // namespace graft
