#include "client/cli/model_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string_view>

#include <absl/strings/str_cat.h>

#include <onnx/onnx_pb.h>
#include "client/cli/options.h"
#include "client/exit_codes.h"
#include "client/file_digest.h"
#include "core/base/status.h"
#include "core/paths/beneath.h"
#include "core/paths/files.h"

namespace graft::cli {
namespace {

void collect_locations(const onnx::TensorProto& t, std::set<std::string>* out) {
  if (t.data_location() != onnx::TensorProto::EXTERNAL) return;
  for (const auto& e : t.external_data())
    if (e.key() == "location") out->insert(e.value());
}

void collect_locations(const onnx::SparseTensorProto& t, std::set<std::string>* out) {
  collect_locations(t.values(), out);
  collect_locations(t.indices(), out);
}

void collect_locations(const onnx::GraphProto& g, std::set<std::string>* out);

void collect_locations(const onnx::NodeProto& n, std::set<std::string>* out) {
  for (const auto& a : n.attribute()) {
    if (a.has_t()) collect_locations(a.t(), out);
    for (const auto& t : a.tensors()) collect_locations(t, out);
    if (a.has_sparse_tensor()) collect_locations(a.sparse_tensor(), out);
    for (const auto& t : a.sparse_tensors()) collect_locations(t, out);
    if (a.has_g()) collect_locations(a.g(), out);
    for (const auto& sub : a.graphs()) collect_locations(sub, out);
  }
}

// Every tensor a graph holds: initializers (dense and sparse) and node attributes, subgraphs
// included (protobuf's parse depth limit bounds the recursion).
void collect_locations(const onnx::GraphProto& g, std::set<std::string>* out) {
  for (const auto& t : g.initializer()) collect_locations(t, out);
  for (const auto& t : g.sparse_initializer()) collect_locations(t, out);
  for (const auto& n : g.node()) collect_locations(n, out);
}

void collect_locations(const onnx::ModelProto& m, std::set<std::string>* out) {
  collect_locations(m.graph(), out);
  for (const auto& f : m.functions())
    for (const auto& n : f.node()) collect_locations(n, out);
  for (const auto& t : m.training_info()) {
    collect_locations(t.initialization(), out);
    collect_locations(t.algorithm(), out);
  }
}

// Progress of hashing external-data files (a multi-GB model takes a while).
std::function<void(uint64_t, uint64_t)> hashing_bar() {
  if (!::isatty(2)) return nullptr;
  return [shown = uint64_t{0}](uint64_t done, uint64_t total) mutable {
    if (total < (64u << 20)) return;
    if (done != total && done - shown < (64u << 20)) return;
    shown = done;
    int pct = total ? static_cast<int>(100 * done / total) : 100;
    std::fprintf(stderr, "\rhashing  [%-40s] %3d%% %.1f MiB",
                 std::string(pct * 40 / 100, '#').c_str(), pct, done / 1048576.0);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

}  // namespace

absl::StatusOr<std::set<std::string>> external_locations(const std::string& bytes) {
  std::set<std::string> out;
  if (bytes.find("location") == std::string::npos) return out;
  onnx::ModelProto proto;
  if (!proto.ParseFromString(bytes))
    return absl::InvalidArgumentError("invalid model: not a serialized ONNX ModelProto");
  collect_locations(proto, &out);
  return out;
}

absl::StatusOr<ModelDigest> digest_model(const std::string& path, bool rehash) {
  static constexpr std::string_view kWord = "location";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::Status(paths::errno_code(errno),
                        absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  bool mentions = false;
  std::string tail;  // the last bytes of the previous piece, for a word split between pieces
  client::DigestOptions options;
  options.cache_folder = client::default_digest_cache();
  options.recall = !rehash;
  options.scan = [&](std::string_view piece) {
    if (mentions) return;
    std::string joint = tail + std::string(piece.substr(0, kWord.size() - 1));
    if (joint.find(kWord) != std::string::npos || piece.find(kWord) != std::string_view::npos)
      mentions = true;
    tail = std::string(piece.substr(piece.size() - std::min(piece.size(), kWord.size() - 1)));
  };
  // Remembered with the digest: a recalled digest does not read the file.
  options.note = [&] { return std::string(mentions ? "location" : "plain"); };
  ASSIGN_OR_RETURN(client::FileDigest d, client::digest_file(fd, "'" + path + "'", options));
  if (d.recalled && d.note != "location" && d.note != "plain") {
    options.recall = false;  // a note this version does not know: hash again
    ASSIGN_OR_RETURN(d, client::digest_file(fd, "'" + path + "'", options));
  }
  return ModelDigest{d.sha256, d.note == "location", d.size};
}

int external_sources(const std::string& input, bool rehash, const std::set<std::string>& locations,
                     client::ExternalSources* sources) {
  sources->clear();
  for (const auto& name : locations) {
    if (auto st = paths::check_location(name); !st.ok())
      return fail(kBadModel, input + ": " + std::string(st.message()));
    client::ExternalSource s;
    s.name = name;
    s.folder = folder_of(input).string();
    sources->push_back(std::move(s));
  }
  if (auto st = client::digest_sources(*sources, hashing_bar(), client::default_digest_cache(),
                                       /*recall=*/!rehash);
      !st.ok())
    return fail(path_exit_code(st), std::string(st.message()));
  return kOk;
}

uint64_t total_size(const client::ExternalSources& sources) {
  uint64_t total = 0;
  for (const auto& s : sources) total += s.size;
  return total;
}

}  // namespace graft::cli
