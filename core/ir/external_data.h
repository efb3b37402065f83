// ONNX external data: tensors whose payload is a range of a file beside the model, named by the
// tensor's external_data keys (location, offset, length). Passes never hold a model's weights
// in memory: they read one tensor's range when they work on it (ExternalData::read, or
// load_tensor for a TensorProto with its payload in memory) and release it after use, and
// stream it in blocks where a pass only needs to look at it (a hash).
//
// Everything here runs on hostile input (model bytes and files from a network client): every
// key and range is checked against the file, errors are clear absl statuses, and no allocation
// is larger than the checked range of a file that exists (callers cap it further).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>

#include <absl/status/statusor.h>
#include <onnx/onnx_pb.h>

namespace graft::ir {

// The keys of an EXTERNAL tensor, parsed and checked as text (no file is opened): `location`
// is required and obeys paths::check_location; `offset` and `length` are decimal digits below
// 2^63; `checksum` and unknown keys are ignored; a key given twice is an error. A missing length
// means "up to the end of the file" (the ONNX spec).
struct ExternalKeys {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
};
absl::StatusOr<ExternalKeys> parse_external_keys(const onnx::TensorProto& t);

// Where an external tensor's bytes are once checked against its file: the range is inside the
// file and, for fixed-size types, as long as the dims say.
struct ExternalRef {
  std::string location;
  uint64_t offset = 0;
  uint64_t length = 0;
  bool operator==(const ExternalRef&) const = default;
  bool operator<(const ExternalRef& o) const {
    return std::tie(location, offset, length) < std::tie(o.location, o.offset, o.length);
  }
};

// The payload size of `t` in bytes without reading it: for an external tensor its length key,
// else element count × element size (nullopt when neither is known or valid: strings, bad
// dims); for any other tensor ir::tensor_bytes. Size checks of passes use this before reading.
std::optional<uint64_t> payload_bytes(const onnx::TensorProto& t);

// A payload read from a file: owns its buffer, released on destruction (or taken by release()).
class ExternalBytes {
 public:
  ExternalBytes() = default;
  explicit ExternalBytes(std::string buffer) : buffer_(std::move(buffer)) {}
  std::string_view bytes() const { return buffer_; }
  size_t size() const { return buffer_.size(); }
  // The buffer, moved out (e.g. into a TensorProto's raw_data) without a copy.
  std::string release() { return std::move(buffer_); }

 private:
  std::string buffer_;
};

class ExternalData {
 public:
  // graftd's spool: each location (exactly as written in the tensors) names one file path.
  static std::shared_ptr<const ExternalData> files(
      std::map<std::string, std::string, std::less<>> location_to_path);
  // A model on disk: locations resolved below `folder` by core/paths/beneath.h's rules
  // (check_location; no symbolic link below the folder; a regular file).
  static std::shared_ptr<const ExternalData> beneath(std::string folder);

  // The checked range of an EXTERNAL tensor: keys as parse_external_keys, offset + length
  // within the file (without wrapping), length equal to element count × element size for
  // fixed-size types. Errors: InvalidArgument for bad keys, a location not in files(), a range
  // outside the file, a length that does not match the dims, a string or undefined type, or
  // a tensor that is not external; NotFound / PermissionDenied / DataLoss (the path named) when
  // the file cannot be opened.
  absl::StatusOr<ExternalRef> locate(const onnx::TensorProto& t) const;
  // The size in bytes of the file holding `t`'s payload (after the checks of locate).
  absl::StatusOr<uint64_t> file_size(const onnx::TensorProto& t) const;
  // The payload of an EXTERNAL tensor (as locate checks it), read with pread into a buffer the
  // result owns. ResourceExhausted, before anything is allocated, when it is longer than
  // `max_bytes`. DataLoss when the file ends early (it shrank after the check).
  absl::StatusOr<ExternalBytes> read(const onnx::TensorProto& t,
                                     uint64_t max_bytes = UINT64_MAX) const;
  // The payload in order through one buffer of at most `block_bytes` (for a hash): memory stays
  // at one block whatever the tensor's size.
  absl::Status read_blocks(const onnx::TensorProto& t,
                           const std::function<void(std::string_view)>& each,
                           size_t block_bytes = size_t{1} << 20) const;

  // A 64-bit hash of the payload, streamed in blocks (read_blocks) and remembered per
  // (location, offset, length) for the life of this object (the files do not change while a
  // model uses them), so a pass run every round reads each payload at most once.
  absl::StatusOr<uint64_t> content_hash(const onnx::TensorProto& t) const;
  // True if two external tensors hold the same payload bytes: at once for the same range,
  // else compared block by block (two buffers of `block_bytes`).
  absl::StatusOr<bool> same_payload(const onnx::TensorProto& a, const onnx::TensorProto& b,
                                    size_t block_bytes = size_t{1} << 20) const;

  // Payload bytes read so far by read(), read_blocks() and the two above (all threads): for
  // tests and reports.
  uint64_t bytes_read() const;

  ExternalData(const ExternalData&) = delete;
  ExternalData& operator=(const ExternalData&) = delete;
  ~ExternalData();

 private:
  struct Opened;
  ExternalData();
  absl::StatusOr<Opened> open(const onnx::TensorProto& t) const;

  std::optional<std::string> folder_;
  std::map<std::string, std::string, std::less<>> paths_;
  struct Counter;
  std::unique_ptr<Counter> read_;
};

// A tensor with its payload in memory: the tensor itself when it already was, else a copy of
// its header (name, type, dims) whose raw_data holds the bytes read from its file. Copies share
// the loaded tensor; the bytes are released with the last copy.
class LoadedTensor {
 public:
  LoadedTensor() = default;
  explicit LoadedTensor(const onnx::TensorProto* in_memory) : tensor_(in_memory) {}
  explicit LoadedTensor(std::shared_ptr<const onnx::TensorProto> loaded)
      : tensor_(loaded.get()), owned_(std::move(loaded)) {}
  const onnx::TensorProto* get() const { return tensor_; }
  const onnx::TensorProto& operator*() const { return *tensor_; }
  const onnx::TensorProto* operator->() const { return tensor_; }
  explicit operator bool() const { return tensor_ != nullptr; }
  // True if the payload was read from a file for this object.
  bool was_external() const { return owned_ != nullptr; }

 private:
  const onnx::TensorProto* tensor_ = nullptr;
  std::shared_ptr<const onnx::TensorProto> owned_;
};

// `t` with its payload in memory: `t` itself, or for an external tensor its bytes read through
// `data`. Errors: FailedPrecondition when `t` is external and `data` is null (the model's files
// are not known, e.g. bytes without a folder), ResourceExhausted when the payload is larger
// than `max_bytes` (checked before reading), else ExternalData::read's.
absl::StatusOr<LoadedTensor> load_tensor(const onnx::TensorProto& t, const ExternalData* data,
                                         uint64_t max_bytes);

}  // namespace graft::ir
