#include "core/ir/fingerprint.h"

#include <algorithm>

#include <absl/strings/str_cat.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace graft {

ModelFingerprint fingerprint(const ir::Model& model) {
  ModelFingerprint fp;
  std::unique_ptr<ir::Model> copy = model.clone();  // shares the tensors, copies the rest
  for (ir::Graph* g : copy->all_graphs()) {
    for (ir::Value* v : g->initializers()) {
      onnx::TensorProto stub;
      stub.add_int64_data(static_cast<int64_t>(fp.tensors.size()));
      stub.add_int64_data(v->stored_sparse() ? 1 : 0);  // storage is structure too
      fp.tensors.push_back(v->shared_initializer());
      v->set_initializer(std::move(stub));
    }
  }
  const onnx::ModelProto proto = copy->to_proto();
  google::protobuf::io::StringOutputStream stream(&fp.structure);
  google::protobuf::io::CodedOutputStream out(&stream);
  out.SetSerializationDeterministic(true);
  proto.SerializeToCodedStream(&out);
  out.Trim();
  return fp;
}

absl::Status verify_unchanged(const std::string& pass, const ModelFingerprint& before,
                              const ModelFingerprint& after) {
  const std::string lie = absl::StrCat("pass '", pass, "' reported no change but edited the model");
  if (before.structure != after.structure) {
    const auto diff = std::mismatch(before.structure.begin(), before.structure.end(),
                                    after.structure.begin(), after.structure.end());
    return absl::InternalError(absl::StrCat(lie, " (its graphs serialize differently from byte ",
                                            diff.first - before.structure.begin(), ")"));
  }
  // The same structure has the same initializers in the same places.
  for (size_t i = 0; i < before.tensors.size(); ++i) {
    const auto& a = before.tensors[i];
    const auto& b = after.tensors[i];
    if (a != b && a->SerializeAsString() != b->SerializeAsString())
      return absl::InternalError(
          absl::StrCat(lie, " (the tensor of initializer '", b->name(), "' changed)"));
  }
  return absl::OkStatus();
}

}  // namespace graft
