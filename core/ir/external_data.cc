#include "core/ir/external_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <system_error>
#include <utility>

#include <absl/strings/str_cat.h>

#include "core/base/status.h"
#include "core/ir/tensor.h"
#include "core/paths/beneath.h"
#include "core/paths/files.h"

namespace graft::ir {

using onnx::TensorProto;

namespace {

constexpr uint64_t kMaxKeyValue = std::numeric_limits<int64_t>::max();

std::string shown(std::string_view s) { return paths::shown_location(s); }

absl::Status invalid(const TensorProto& t, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("external tensor '", shown(t.name()), "': ", why));
}

// A key's value: decimal digits only (no sign, space or prefix), below 2^63.
std::optional<uint64_t> parse_number(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');  // 19 digits cannot wrap a uint64_t
  }
  if (v > kMaxKeyValue) return std::nullopt;
  return v;
}

// The payload size by dims and type, for fixed-size types (4-bit ones packed); nullopt for
// strings, undefined types, negative dims or a size that overflows.
std::optional<uint64_t> fixed_bytes(const TensorProto& t) {
  auto count = element_count(t);
  if (!count) return std::nullopt;
  return payload_size(t.data_type(), *count);
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

absl::StatusOr<ExternalKeys> parse_external_keys(const TensorProto& t) {
  if (!is_external(t)) return invalid(t, "its data_location is not EXTERNAL");
  ExternalKeys keys;
  bool has_location = false, has_offset = false;
  for (const auto& entry : t.external_data()) {
    const std::string& key = entry.key();
    const std::string& value = entry.value();
    if (key == "location") {
      if (has_location) return invalid(t, "the key 'location' is given twice");
      has_location = true;
      if (auto st = paths::check_location(value); !st.ok())
        return absl::InvalidArgumentError(
            absl::StrCat("external tensor '", shown(t.name()), "': ", st.message()));
      keys.location = value;
    } else if (key == "offset" || key == "length") {
      const bool is_offset = key == "offset";
      if (is_offset ? has_offset : keys.length.has_value())
        return invalid(t, absl::StrCat("the key '", key, "' is given twice"));
      auto v = parse_number(value);
      if (!v)
        return invalid(t, absl::StrCat("'", key, "' is '", shown(value),
                                       "', not a decimal number below 2^63"));
      if (is_offset) {
        has_offset = true;
        keys.offset = *v;
      } else {
        keys.length = *v;
      }
    }
  }
  if (!has_location) return invalid(t, "no 'location' key");
  return keys;
}

std::optional<uint64_t> payload_bytes(const TensorProto& t) {
  if (!is_external(t)) return tensor_bytes(t);
  auto keys = parse_external_keys(t);
  if (!keys.ok()) return std::nullopt;
  if (keys->length) return *keys->length;
  return fixed_bytes(t);
}

struct ExternalData::Counter {
  std::atomic<uint64_t> bytes{0};
  std::mutex mutex;  // guards hashes
  std::map<ExternalRef, uint64_t> hashes;
};

struct ExternalData::Opened {
  Fd fd;
  ExternalRef ref;
  uint64_t file_size = 0;
};

ExternalData::ExternalData() : read_(std::make_unique<Counter>()) {}
ExternalData::~ExternalData() = default;

std::shared_ptr<const ExternalData> ExternalData::files(
    std::map<std::string, std::string, std::less<>> location_to_path) {
  std::shared_ptr<ExternalData> d(new ExternalData());
  d->paths_ = std::move(location_to_path);
  return d;
}

std::shared_ptr<const ExternalData> ExternalData::beneath(std::string folder) {
  std::shared_ptr<ExternalData> d(new ExternalData());
  d->folder_ = std::move(folder);
  return d;
}

uint64_t ExternalData::bytes_read() const { return read_->bytes.load(); }

absl::StatusOr<ExternalData::Opened> ExternalData::open(const TensorProto& t) const {
  ASSIGN_OR_RETURN(ExternalKeys keys, parse_external_keys(t));
  if (element_size(t.data_type()) == 0 && !is_4bit(t.data_type()))
    return invalid(t, absl::StrCat("data type ", t.data_type(),
                                   " cannot be stored as external data (strings, undefined)"));
  Opened out;
  std::string path;
  if (folder_) {
    ASSIGN_OR_RETURN(const int fd, paths::open_beneath(*folder_, keys.location));
    out.fd = Fd(fd);
    path = (folder_->empty() ? "." : *folder_) + "/" + keys.location;
  } else {
    auto it = paths_.find(keys.location);
    if (it == paths_.end())
      return invalid(t, absl::StrCat("location '", shown(keys.location),
                                     "' is not one of the model's external-data files"));
    path = it->second;
    out.fd = Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (out.fd.get() < 0) {
      const int err = errno;
      return absl::Status(
          paths::errno_code(err),
          absl::StrCat("external data location '", shown(keys.location), "': cannot open '", path,
                       "': ", std::error_code(err, std::generic_category()).message()));
    }
  }
  struct stat st;
  if (::fstat(out.fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return invalid(t, absl::StrCat("location '", shown(keys.location), "' ('", path,
                                   "') is not a regular file"));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (keys.offset > size)
    return invalid(t, absl::StrCat("offset ", keys.offset, " is past the end of '",
                                   shown(keys.location), "' (", size, " bytes)"));
  const uint64_t length = keys.length ? *keys.length : size - keys.offset;
  if (length > size - keys.offset)
    return invalid(
        t, absl::StrCat("offset ", keys.offset, " + length ", length, " is past the end of '",
                        shown(keys.location), "' (", size, " bytes)"));
  auto expected = fixed_bytes(t);
  if (!expected) return invalid(t, "its dims are negative or their size overflows");
  if (*expected != length)
    return invalid(t, absl::StrCat("length ", length, " does not match its dims and type (",
                                   *expected, " bytes)"));
  out.ref = ExternalRef{keys.location, keys.offset, length};
  out.file_size = size;
  return out;
}

absl::StatusOr<ExternalRef> ExternalData::locate(const TensorProto& t) const {
  ASSIGN_OR_RETURN(Opened opened, open(t));
  return std::move(opened.ref);
}

absl::StatusOr<uint64_t> ExternalData::file_size(const TensorProto& t) const {
  ASSIGN_OR_RETURN(Opened opened, open(t));
  return opened.file_size;
}

namespace {

// Reads exactly `n` bytes at `offset` into `dst` (paths::pread_exact, errors naming the
// location).
absl::Status pread_exact(int fd, char* dst, size_t n, uint64_t offset, const ExternalRef& ref) {
  return paths::pread_exact(fd, dst, n, offset,
                            absl::StrCat("external data location '", shown(ref.location), "'"));
}

}  // namespace

absl::StatusOr<ExternalBytes> ExternalData::read(const TensorProto& t, uint64_t max_bytes) const {
  ASSIGN_OR_RETURN(Opened opened, open(t));
  const ExternalRef& ref = opened.ref;
  if (ref.length > max_bytes)
    return absl::ResourceExhaustedError(absl::StrCat("external tensor '", shown(t.name()), "' has ",
                                                     ref.length, " bytes, above the limit of ",
                                                     max_bytes));
  if (ref.length > std::numeric_limits<size_t>::max() / 2)
    return absl::ResourceExhaustedError("external tensor too large for this process");
  std::string buffer;
  try {
    buffer.resize(static_cast<size_t>(ref.length));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", ref.length, " bytes for external tensor '", shown(t.name()), "'"));
  }
  RETURN_IF_ERROR(pread_exact(opened.fd.get(), buffer.data(), buffer.size(), ref.offset, ref));
  read_->bytes += ref.length;
  return ExternalBytes(std::move(buffer));
}

absl::Status ExternalData::read_blocks(const TensorProto& t,
                                       const std::function<void(std::string_view)>& each,
                                       size_t block_bytes) const {
  ASSIGN_OR_RETURN(Opened opened, open(t));
  const ExternalRef& ref = opened.ref;
  return paths::read_range(opened.fd.get(), ref.offset, ref.length, block_bytes,
                           absl::StrCat("external data location '", shown(ref.location), "'"),
                           [&](std::string_view block) {
                             read_->bytes += block.size();
                             each(block);
                             return true;
                           });
}

absl::StatusOr<uint64_t> ExternalData::content_hash(const TensorProto& t) const {
  ASSIGN_OR_RETURN(ExternalRef ref, locate(t));
  {
    std::lock_guard<std::mutex> lock(read_->mutex);
    if (auto it = read_->hashes.find(ref); it != read_->hashes.end()) return it->second;
  }
  uint64_t h = 0xcbf29ce484222325ULL ^ ref.length;
  std::hash<std::string_view> hash;
  RETURN_IF_ERROR(read_blocks(t, [&](std::string_view block) {
    h ^= hash(block) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  }));
  std::lock_guard<std::mutex> lock(read_->mutex);
  read_->hashes.emplace(ref, h);
  return h;
}

absl::StatusOr<bool> ExternalData::same_payload(const TensorProto& a, const TensorProto& b,
                                                size_t block_bytes) const {
  ASSIGN_OR_RETURN(Opened oa, open(a));
  ASSIGN_OR_RETURN(Opened ob, open(b));
  if (oa.ref.length != ob.ref.length) return false;
  if (oa.ref == ob.ref) return true;
  block_bytes = std::max<size_t>(block_bytes, 1);
  const size_t size = static_cast<size_t>(std::min<uint64_t>(oa.ref.length, block_bytes));
  std::string ba(size, '\0'), bb(size, '\0');
  for (uint64_t done = 0; done < oa.ref.length;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(oa.ref.length - done, size));
    RETURN_IF_ERROR(pread_exact(oa.fd.get(), ba.data(), n, oa.ref.offset + done, oa.ref));
    RETURN_IF_ERROR(pread_exact(ob.fd.get(), bb.data(), n, ob.ref.offset + done, ob.ref));
    read_->bytes += 2 * n;
    if (std::memcmp(ba.data(), bb.data(), n) != 0) return false;
    done += n;
  }
  return true;
}

absl::StatusOr<LoadedTensor> load_tensor(const TensorProto& t, const ExternalData* data,
                                         uint64_t max_bytes) {
  if (!is_external(t)) return LoadedTensor(&t);
  if (!data)
    return absl::FailedPreconditionError(absl::StrCat(
        "external tensor '", shown(t.name()), "': the model's external-data files are not known"));
  // The declared size first: a tensor over the limit is refused without opening its file.
  if (auto declared = payload_bytes(t); declared && *declared > max_bytes)
    return absl::ResourceExhaustedError(absl::StrCat("external tensor '", shown(t.name()), "' has ",
                                                     *declared, " bytes, above the limit of ",
                                                     max_bytes));
  ASSIGN_OR_RETURN(ExternalBytes bytes, data->read(t, max_bytes));
  auto loaded = std::make_shared<TensorProto>();
  loaded->set_name(t.name());
  loaded->set_data_type(t.data_type());
  *loaded->mutable_dims() = t.dims();
  if (t.has_doc_string()) loaded->set_doc_string(t.doc_string());
  loaded->set_raw_data(bytes.release());
  return LoadedTensor(std::shared_ptr<const TensorProto>(std::move(loaded)));
}

}  // namespace graft::ir
