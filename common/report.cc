#include "common/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <string_view>

#include "core/ir/tensor.h"
#include "core/pipeline/fix_dims.h"

// The page template with its one marker (common/report_template.html, embedded by the build:
// cmake/embed_file.cmake).
extern "C" const char graft_report_template[];

namespace graft::report {

std::string terminal_safe(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && !(keep_newlines && c == '\n')) || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string human_bytes(uint64_t b) {
  // A saturated count (core/ir/saturating.h) is a lower bound: the estimate overflowed.
  if (b == kSaturated) return "at least 16 EiB";
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  char buf[32];
  if (b < 1024) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
    return buf;
  }
  double v = static_cast<double>(b) / 1024;
  size_t unit = 0;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.1f %s" : "%.2f %s", v, kUnits[unit]);
  return buf;
}

namespace {

std::string line(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

nlohmann::json verification_json(const VerificationReport& v) {
  if (!v.requested) return nullptr;
  nlohmann::json errors = nlohmann::json::array();
  // JSON has no infinity: a non-finite error is written as the string "inf".
  auto number = [](double x) {
    return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json("inf");
  };
  auto error_json = [&](const eval::OutputError& e) {
    return nlohmann::json{{"output", e.name},
                          {"max_abs", number(e.max_abs)},
                          {"rel", number(e.rel)},
                          {"cosine", number(e.cosine)}};
  };
  for (const auto& e : v.errors) errors.push_back(error_json(e));
  nlohmann::json trials = nlohmann::json::array();
  for (const auto& t : v.lossy_trials) {
    nlohmann::json measured = nlohmann::json::array();
    for (const auto& e : t.errors) measured.push_back(error_json(e));
    nlohmann::json tasks = nlohmann::json::array();
    for (const auto& task : t.tasks) {
      nlohmann::json figures = nlohmann::json::object();
      for (const auto& [name, value] : task.figures) figures[name] = number(value);
      tasks.push_back({{"output", task.output},
                       {"kind", eval::task_kind_name(task.kind)},
                       {"threshold", number(task.threshold)},
                       {"figure", number(task.figure)},
                       {"judged", task.judged},
                       {"passed", task.passed},
                       {"detail", task.detail},
                       {"origin", task.origin},
                       {"replaces_value_gate", task.replaces_value_gate},
                       {"figures", std::move(figures)}});
    }
    trials.push_back({{"pass", t.pass},
                      {"kept", t.kept},
                      {"measured", t.measured},
                      {"gate", {{"max_rel", t.gate.max_rel}, {"min_cosine", t.gate.min_cosine}}},
                      {"errors", std::move(measured)},
                      {"tasks", std::move(tasks)},
                      {"verdict", t.verdict}});
  }
  auto notes_json = [](const std::vector<eval::InputNote>& notes) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& n : notes) out.push_back({{"name", n.name}, {"dims", n.dims}, {"how", n.how}});
    return out;
  };
  return {{"status", eval::verify_status_name(v.result.status)},
          {"message", v.result.message},
          {"unsupported_op", v.result.unsupported_op},
          {"max_abs_diff", v.result.max_abs_diff},
          {"max_rel_diff", v.result.max_rel_diff},
          {"worst_output", v.result.worst_output},
          {"rolled_back", v.rolled_back},
          {"seconds", v.seconds},
          {"lossy_passes", v.lossy_passes},
          {"max_error", v.max_error ? nlohmann::json(*v.max_error) : nlohmann::json(nullptr)},
          {"errors", errors},
          {"lossy_trials", trials},
          {"inputs", notes_json(v.inputs)},
          {"lossy_inputs", notes_json(v.lossy_inputs)}};
}

nlohmann::json memory_json(const MemoryStats& m) {
  return {{"weight_bytes", m.weight_bytes},
          {"peak_activation_bytes", m.peak_activation_bytes},
          {"peak_node", m.peak_node_name},
          {"largest_tensor", m.largest_tensor},
          {"largest_tensor_bytes", m.largest_tensor_bytes},
          {"unknown_size_values", m.unknown_size_values}};
}

// "a -> b", or "-" when the pass left the estimate as it found it.
std::string peak_change(uint64_t before, uint64_t after) {
  if (before == after) return "-";
  return human_bytes(before) + " -> " + human_bytes(after);
}

// Memory of the input and of the result: weights, peak activations (where), largest tensor, and
// the sizes the estimate assumed.
std::string memory_lines(const PipelineReport& r) {
  const MemoryStats &a = r.memory_before, &b = r.memory_after;
  std::string out = "memory (estimated): weights " + human_bytes(a.weight_bytes) + " -> " +
                    human_bytes(b.weight_bytes) + ", peak activations " +
                    human_bytes(a.peak_activation_bytes) + " -> " +
                    human_bytes(b.peak_activation_bytes);
  if (!b.peak_node_name.empty()) out += " (at " + terminal_safe(b.peak_node_name) + ")";
  if (!b.largest_tensor.empty())
    out += ", largest tensor " + terminal_safe(b.largest_tensor) + " " +
           human_bytes(b.largest_tensor_bytes);
  out += "\n  with dims ";
  for (const auto& [name, size] : r.memory_dims) out += name + "=" + std::to_string(size) + ", ";
  out += (r.memory_dims.empty() ? "every symbolic or unknown dim " : "others ") +
         std::to_string(r.memory_default_dim) + " (--dim NAME=N to change)";
  if (b.unknown_size_values > 0)
    out += "; " + std::to_string(b.unknown_size_values) + " values of unknown size not counted";
  return out + "\n";
}

// Per pass, what it found (findings every report shows, such as an opset raised or a reason
// nothing was quantized) and, with --explain, each node a rule was tried on and why it did not
// rewrite.
std::string explanation_lines(const PipelineReport& r) {
  std::string out;
  for (const PassStats& p : r.passes) {
    if (p.explanations.empty() && p.explanations_dropped == 0) continue;
    out += p.name +
           ": findings, and why rules did not rewrite (findings from its last run that changed the "
           "model, reasons from its last run):\n";
    for (const RuleExplanation& e : p.explanations) {
      std::string where = terminal_safe(e.node) + " (" + terminal_safe(e.op) + ")";
      if (!e.graph.empty()) where += " in graph " + terminal_safe(e.graph);
      out += "  " + p.name + "/" + e.rule + " at " + where + ": " + terminal_safe(e.reason) + "\n";
    }
    if (p.explanations_dropped > 0)
      out += line("  ... and %lld more\n", static_cast<long long>(p.explanations_dropped));
  }
  return out;
}

}  // namespace

std::string format_table(const RunSummary& run) {
  const PipelineReport& r = run.pipeline;
  std::string out;
  // --fix-dim, --fix-shape: the inputs made static before the passes ran.
  for (const auto& fixed : r.fixed_inputs) out += "fixed input " + terminal_safe(fixed) + "\n";
  // --io-layout: the values served in another layout, and the Transposes that left.
  for (const auto& change : r.layout_changes) out += "layout " + terminal_safe(change) + "\n";
  if (!r.layout_changes.empty())
    out += line("layout: %lld Transpose nodes in the model as given, %lld in the result\n",
                static_cast<long long>(r.transposes_before),
                static_cast<long long>(r.transposes_after));
  out += line("%-22s %5s %10s %17s %25s %25s %9s  %s\n", "pass", "runs", "time ms", "nodes",
              "initializer bytes", "peak activations", "rewrites", "rolled back");
  for (const PassStats& p : r.passes) {
    std::string nodes = std::to_string(p.nodes_before) + " -> " + std::to_string(p.nodes_after);
    std::string bytes = human_bytes(p.bytes_before) + " -> " + human_bytes(p.bytes_after);
    std::string rolled = p.rollbacks ? "yes: " + terminal_safe(p.rollback_reason) : "-";
    std::string peak = peak_change(p.peak_before, p.peak_after);
    out += line("%-22s %5d %10.2f %17s %25s %25s %9lld  %s\n", p.name.c_str(), p.runs,
                p.seconds * 1e3, nodes.c_str(), bytes.c_str(), peak.c_str(),
                static_cast<long long>(p.rewrites), rolled.c_str());
    for (const auto& [rule, count] : p.rules)
      if (count > 0)
        out += line("  %-20s %86s %9lld\n", rule.c_str(), "", static_cast<long long>(count));
    if (!p.error_verdict.empty() && p.rollbacks == 0)
      out += "  error gate: " + terminal_safe(p.error_verdict) + "\n";
    if (!p.calibration.empty()) out += "  calibrated on " + terminal_safe(p.calibration) + "\n";
    if (p.capped_runs > 0)
      out += line(
          "  stopped at the rule driver's rewrite cap in %d run(s): rules undo each "
          "other, the result may not be this pass's fixed point\n",
          p.capped_runs);
  }
  out += explanation_lines(r);
  std::string nodes = std::to_string(r.nodes_before) + " -> " + std::to_string(r.nodes_after);
  std::string bytes = human_bytes(r.bytes_before) + " -> " + human_bytes(r.bytes_after);
  std::string peak = human_bytes(r.memory_before.peak_activation_bytes) + " -> " +
                     human_bytes(r.memory_after.peak_activation_bytes);
  out += line("%-22s %5d %10.2f %17s %25s %25s\n", "total (rounds)", r.rounds, r.seconds * 1e3,
              nodes.c_str(), bytes.c_str(), peak.c_str());
  out += line("load %.2f ms, save %.2f ms, %s in, %s out%s\n", run.load_seconds * 1e3,
              run.save_seconds * 1e3, human_bytes(run.input_bytes).c_str(),
              human_bytes(run.output_bytes).c_str(),
              r.reached_fixed_point ? "" : ", stopped at max rounds before a fixed point");
  out += memory_lines(r);
  // Only a runtime-specific target is worth a line: the default result runs anywhere.
  if (!r.target.empty() && r.target != "onnx") out += "target: " + terminal_safe(r.target) + "\n";
  if (!r.checker_note.empty()) out += "onnx check skipped: " + r.checker_note + "\n";
  const VerificationReport& v = r.verification;
  if (v.requested) {
    out += std::string("verification: ") + eval::verify_status_name(v.result.status) + " (" +
           terminal_safe(v.result.message) + ")" + line(", %.2f ms", v.seconds * 1e3) + "\n";
    for (const auto& p : v.rolled_back) out += "verification rolled back " + p + " (see its row)\n";
    if (!v.errors.empty() && !v.lossy_passes.empty()) {
      out += line("%-30s %14s %14s %10s\n", "error per output (lossy)", "max abs", "rel", "cosine");
      for (const auto& e : v.errors)
        out += line("%-30s %14.6g %14.6g %10.6f\n", terminal_safe(e.name).c_str(), e.max_abs, e.rel,
                    e.cosine);
    }
    const bool lossy = !v.lossy_inputs.empty();
    for (const auto* notes : {&v.inputs, &v.lossy_inputs}) {
      if (notes->empty()) continue;
      out += notes == &v.inputs ? (lossy ? "inputs (exact check):\n" : "inputs:\n")
                                : "inputs (lossy passes' error):\n";
      for (const auto& n : *notes) {
        std::string dims;
        for (int64_t d : n.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
        out += "  " + terminal_safe(n.name) + " [" + dims + "]: " + terminal_safe(n.how) + "\n";
      }
    }
    for (const auto& t : v.lossy_trials) {
      out += line("lossy %s (gate: rel <= %g, cosine >= %g): ", t.pass.c_str(), t.gate.max_rel,
                  t.gate.min_cosine) +
             terminal_safe(t.verdict) + "\n";
      for (const auto& task : t.tasks)
        out += "  " + std::string(eval::task_kind_name(task.kind)) + " '" +
               terminal_safe(task.output) + "': " +
               (!task.judged  ? std::string("not judged")
                : task.passed ? line("%.4g >= %g", task.figure, task.threshold)
                              : line("%.4g < %g, FAILED", task.figure, task.threshold)) +
               " (" + terminal_safe(task.detail) + "; " + terminal_safe(task.origin) + ")\n";
    }
  }
  if (!run.build_fingerprint.empty())
    out += "computed by graft " + run.graft_version + ", build " + run.build_fingerprint + "\n";
  if (!run.server.empty())
    out += "server " + run.server + ", cache " + (run.cache_hit ? "hit" : "miss") + ", sha256 " +
           run.input_sha256.substr(0, 12) + " -> " + run.output_sha256.substr(0, 12) +
           (run.lookup == "hit" ? " (found by lookup, not uploaded)" : "") + ", sent " +
           human_bytes(run.bytes_sent) + ", received " + human_bytes(run.bytes_received) + "\n";
  return out;
}

nlohmann::json to_json(const RunSummary& run) {
  const PipelineReport& r = run.pipeline;
  nlohmann::json passes = nlohmann::json::array();
  for (const PassStats& p : r.passes) {
    passes.push_back({{"name", p.name},
                      {"runs", p.runs},
                      {"changed_runs", p.changed_runs},
                      {"seconds", p.seconds},
                      {"nodes_before", p.nodes_before},
                      {"nodes_after", p.nodes_after},
                      {"initializer_bytes_before", p.bytes_before},
                      {"initializer_bytes_after", p.bytes_after},
                      {"rewrites", p.rewrites},
                      {"rules", p.rules},
                      {"rollbacks", p.rollbacks},
                      {"rollback_reason", p.rollback_reason},
                      {"peak_activation_bytes_before", p.peak_before},
                      {"peak_activation_bytes_after", p.peak_after},
                      {"capped_runs", p.capped_runs}});
    if (!p.error_verdict.empty()) passes.back()["error_verdict"] = p.error_verdict;
    if (!p.calibration.empty()) passes.back()["calibration"] = p.calibration;
    if (!p.explanations.empty() || p.explanations_dropped > 0) {
      nlohmann::json explained = nlohmann::json::array();
      for (const RuleExplanation& e : p.explanations)
        explained.push_back({{"rule", e.rule},
                             {"node", e.node},
                             {"op", e.op},
                             {"graph", e.graph},
                             {"reason", e.reason}});
      passes.back()["explanations"] = std::move(explained);
      passes.back()["explanations_dropped"] = p.explanations_dropped;
    }
  }
  nlohmann::json out = {{"input", run.input},
                        {"input_bytes", run.input_bytes},
                        {"output_bytes", run.output_bytes},
                        {"load_seconds", run.load_seconds},
                        {"save_seconds", run.save_seconds},
                        {"pipeline_seconds", r.seconds},
                        {"rounds", r.rounds},
                        {"reached_fixed_point", r.reached_fixed_point},
                        {"nodes_before", r.nodes_before},
                        {"nodes_after", r.nodes_after},
                        {"initializer_bytes_before", r.bytes_before},
                        {"initializer_bytes_after", r.bytes_after},
                        {"checker_note", r.checker_note},
                        {"value_info_refined", r.value_info_refined},
                        {"target", r.target},
                        {"fixed_inputs", r.fixed_inputs},
                        {"layout_changes", r.layout_changes},
                        {"transposes_before", r.transposes_before},
                        {"transposes_after", r.transposes_after},
                        {"verification", verification_json(r.verification)},
                        {"memory",
                         {{"before", memory_json(r.memory_before)},
                          {"after", memory_json(r.memory_after)},
                          {"dims", r.memory_dims},
                          {"default_dim", r.memory_default_dim}}},
                        {"graft_version", run.graft_version},
                        {"build_fingerprint", run.build_fingerprint},
                        {"server", run.server},
                        {"cache_hit", run.cache_hit},
                        {"input_sha256", run.input_sha256},
                        {"output_sha256", run.output_sha256},
                        {"lookup", run.lookup},
                        {"bytes_sent", run.bytes_sent},
                        {"bytes_received", run.bytes_received},
                        {"passes", passes}};
  if (!run.config.is_null()) out["config"] = run.config;
  if (run.profile_before || run.profile_after) {
    nlohmann::json profile = nlohmann::json::object();
    if (run.profile_before) profile["before"] = profile_json(*run.profile_before);
    if (run.profile_after) profile["after"] = profile_json(*run.profile_after);
    out["profile"] = std::move(profile);
  }
  return out;
}

ModelProfile profile_model(const ir::Model& model, const SizeRule& rule) {
  ModelProfile p;
  for (const ir::Graph* g : model.all_graphs())
    for (const ir::Node* n : g->nodes()) {
      if (n->dead()) continue;
      ++p.ops[n->is_onnx_domain() ? n->op_type() : n->domain() + ":" + n->op_type()];
    }
  auto port = [&](const onnx::ValueInfoProto& info, std::vector<ModelProfile::Port>* out) {
    if (out->size() + (out == &p.inputs ? p.outputs.size() : p.inputs.size()) >= kMaxProfilePorts) {
      ++p.ports_dropped;
      return;
    }
    const auto& t = info.type();
    std::string type = t.has_tensor_type()     ? ir::dtype_name(t.tensor_type().elem_type())
                       : t.has_sequence_type() ? "sequence"
                       : t.has_map_type()      ? "map"
                       : t.has_optional_type() ? "optional"
                                               : "?";
    out->push_back({info.name(), std::move(type), dims_text(t)});
  };
  for (const auto& in : model.graph().inputs())
    if (!in.value->is_initializer()) port(in.info, &p.inputs);
  for (const auto& out : model.graph().outputs()) {
    onnx::ValueInfoProto info = out.info;
    info.set_name(out.value->name());
    port(info, &p.outputs);
  }
  const std::vector<uint64_t> in_use = activation_timeline(model, rule);
  p.nodes = in_use.size();
  const size_t points = std::min(in_use.size(), kProfilePoints);
  for (size_t k = 0; k < points; ++k) {
    const size_t from = k * in_use.size() / points, to = (k + 1) * in_use.size() / points;
    p.memory.push_back(*std::max_element(in_use.begin() + from, in_use.begin() + to));
  }
  return p;
}

nlohmann::json profile_json(const ModelProfile& p) {
  auto ports = [](const std::vector<ModelProfile::Port>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& x : list)
      out.push_back({{"name", x.name}, {"type", x.type}, {"dims", x.dims}});
    return out;
  };
  return {{"ops", p.ops},
          {"inputs", ports(p.inputs)},
          {"outputs", ports(p.outputs)},
          {"ports_dropped", p.ports_dropped},
          {"nodes", p.nodes},
          {"memory", p.memory}};
}

std::optional<nlohmann::json> parse_saved_report(std::string_view text, std::string* error) {
  if (text.size() > kMaxSavedReportBytes) {
    *error = "larger than " + std::to_string(kMaxSavedReportBytes >> 20) + " MiB: not a report";
    return std::nullopt;
  }
  bool too_deep = false;
  auto depth_limit = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    too_deep = too_deep || depth > kMaxSavedReportDepth;
    return !too_deep;
  };
  nlohmann::json report = nlohmann::json::parse(text, depth_limit, /*allow_exceptions=*/false);
  if (too_deep) {
    *error = "nested deeper than " + std::to_string(kMaxSavedReportDepth) + " levels: not a report";
    return std::nullopt;
  }
  if (report.is_discarded() || !report.is_object()) {
    *error = "not a JSON report (expected an object)";
    return std::nullopt;
  }
  const bool cli = report.contains("pipeline_seconds") && report.contains("passes");
  const bool proto = report.contains("memoryBefore") || report.contains("memory_before") ||
                     report.contains("outputSha256") || report.contains("output_sha256");
  if (cli || (report.contains("format") && report.contains("report"))) return report;
  if (!proto) {
    *error =
        "not a Graft report (neither graft optimize --report's JSON nor a "
        "graft.v1.OptimizeReport)";
    return std::nullopt;
  }
  return nlohmann::json{{"format", "graft.v1.OptimizeReport"}, {"report", std::move(report)}};
}

std::string render_html(const nlohmann::json& report) {
  // ASCII only (\uXXXX for the rest, U+2028/U+2029 included); invalid UTF-8 from a model
  // becomes U+FFFD. Then '<', '>' and '&', which JSON has only inside strings, become escapes.
  const std::string json =
      report.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  std::string safe;
  safe.reserve(json.size() + json.size() / 16);
  for (char c : json) {
    if (c == '<')
      safe += "\\u003c";
    else if (c == '>')
      safe += "\\u003e";
    else if (c == '&')
      safe += "\\u0026";
    else
      safe += c;
  }
  static constexpr std::string_view kMarker = "@GRAFT_REPORT_JSON@";
  const std::string_view page = graft_report_template;
  const size_t at = page.find(kMarker);
  std::string out;
  out.reserve(page.size() + safe.size());
  out.append(page.substr(0, at));
  out.append(safe);
  out.append(page.substr(at + kMarker.size()));
  return out;
}

}  // namespace graft::report
