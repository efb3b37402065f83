// Test models whose initializers are ONNX external data: a temporary folder, and moving chosen
// initializers of a parsed model into a file there (so a test writes its own weights files).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/eval/tensor.h"
#include "core/ir/external_data.h"
#include "core/ir/model.h"
#include "tests/temp_folder.h"
#include "tests/testing.h"

namespace graft::testing {

inline void add_key(onnx::TensorProto* t, const std::string& key, const std::string& value) {
  auto* e = t->add_external_data();
  e->set_key(key);
  e->set_value(value);
}

// Appends `bytes` to `folder`/`location`; returns the offset they start at.
inline uint64_t append_file(const std::filesystem::path& folder, const std::string& location,
                            const std::string& bytes) {
  const auto path = folder / location;
  std::filesystem::create_directories(path.parent_path());
  const uint64_t offset =
      std::filesystem::exists(path) ? std::filesystem::file_size(path) : uint64_t{0};
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << path;
  return offset;
}

// The raw little-endian payload of an in-memory tensor.
inline std::string raw_payload(const onnx::TensorProto& t) {
  auto decoded = eval::Tensor::from_proto(t, uint64_t{1} << 30);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  if (!decoded.ok()) return {};
  return decoded->to_proto().raw_data();
}

// An external tensor named `name` of `dtype` and `dims` referencing `location` at
// offset/length.
inline onnx::TensorProto external_tensor(const std::string& name, int32_t dtype,
                                         const std::vector<int64_t>& dims,
                                         const std::string& location, uint64_t offset,
                                         uint64_t length) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(dtype);
  for (int64_t d : dims) t.add_dims(d);
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  add_key(&t, "location", location);
  add_key(&t, "offset", std::to_string(offset));
  add_key(&t, "length", std::to_string(length));
  return t;
}

// Moves the named initializers of the main graph into `folder`/`location` (appended, in the
// order given) and makes them external tensors referencing their bytes there; the model reads
// them through ExternalData::beneath(folder). Returns the bytes written.
inline uint64_t externalize(ir::Model& model, const std::filesystem::path& folder,
                            const std::string& location, const std::vector<std::string>& names) {
  uint64_t written = 0;
  for (const std::string& name : names) {
    ir::Value* v = model.graph().find_local(name);
    EXPECT_TRUE(v && v->initializer()) << name << " is not an initializer";
    if (!v || !v->initializer()) continue;
    const std::string bytes = raw_payload(*v->initializer());
    const uint64_t offset = append_file(folder, location, bytes);
    std::vector<int64_t> dims(v->initializer()->dims().begin(), v->initializer()->dims().end());
    v->set_initializer(
        external_tensor(name, v->initializer()->data_type(), dims, location, offset, bytes.size()));
    written += bytes.size();
  }
  model.set_external_data(ir::ExternalData::beneath(folder.string()));
  return written;
}

// onnx_errors for a model whose external tensors are in `folder`: libonnx's checker looks for
// each location relative to the working directory, so it checks a copy whose locations are
// absolute paths into `folder`.
inline std::string onnx_errors_beside(const ir::Model& model, const std::filesystem::path& folder) {
  auto copy = model.clone();
  for (ir::Graph* g : copy->all_graphs()) {
    for (ir::Value* v : g->initializers()) {
      if (!ir::is_external(*v->initializer())) continue;
      onnx::TensorProto t = *v->initializer();
      for (auto& e : *t.mutable_external_data())
        if (e.key() == "location") e.set_value((folder / e.value()).string());
      v->set_initializer(std::move(t));
    }
  }
  return onnx_errors(*copy);
}

}  // namespace graft::testing
