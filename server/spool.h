// Disk space for external-data files: what clients upload (multi-GB weights stay on disk, not in
// memory) and what results keep (weights the passes wrote, held by the result cache).
//
// Layout: spool_dir/graftd-<pid>-<random>/ is one process's instance folder, locked (flock) for
// as long as the process lives; inside it, one numbered folder per upload or result, removed when
// the last reference to it goes, whatever ended the request. A process that dies (even killed)
// releases its lock, and the next graftd to open the spool removes its folder: a restart leaves
// no leftovers, and several graftd processes may share one spool_dir.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include "server/upload.h"

namespace graft::server {

class Spool;

// One folder of the spool, with the disk bytes reserved for it. Removed (with everything in it)
// and its reservation released when destroyed.
class SpoolDir {
 public:
  SpoolDir(const SpoolDir&) = delete;
  SpoolDir& operator=(const SpoolDir&) = delete;
  ~SpoolDir();

  const std::string& path() const { return path_; }
  // Reserves `bytes` more of the spool's budget for this folder; false (nothing reserved) when
  // the budget cannot cover them.
  bool reserve(uint64_t bytes);
  // Gives back reserved bytes that were not used (never more than reserved).
  void unreserve(uint64_t bytes);
  uint64_t reserved() const { return reserved_; }

 private:
  friend class Spool;
  SpoolDir(std::shared_ptr<InflightBudget> budget, std::string path)
      : budget_(std::move(budget)), path_(std::move(path)) {}

  std::shared_ptr<InflightBudget> budget_;  // shared: a folder may outlive the Spool object
  std::string path_;
  uint64_t reserved_ = 0;
};

class Spool {
 public:
  // Opens (creating it if needed) the spool at `dir`, with `max_bytes` of disk for all folders
  // together, takes an instance folder in it, and removes the folders of graftd processes that
  // are gone. `removed_bytes`, if not null, receives the size of what was removed. Errors name
  // the folder (PermissionDenied, NotFound, ...).
  static absl::StatusOr<std::unique_ptr<Spool>> open(const std::string& dir, uint64_t max_bytes,
                                                     uint64_t* removed_bytes = nullptr);
  ~Spool();
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  // A new empty folder. `kind` ("upload", "result") prefixes its name, for people reading the
  // spool. Errors when the folder cannot be made (disk full, permissions).
  absl::StatusOr<std::shared_ptr<SpoolDir>> make_dir(std::string_view kind);

  const std::string& instance_path() const { return instance_; }
  uint64_t limit() const { return budget_->limit(); }
  uint64_t used() const { return budget_->used(); }
  // Called with the bytes reserved after every change (a gauge); set before use.
  void set_observer(std::function<void(uint64_t)> observer) {
    budget_->set_observer(std::move(observer));
  }

 private:
  Spool(std::string instance, int lock_fd, uint64_t max_bytes);

  std::string instance_;
  int lock_fd_ = -1;
  std::shared_ptr<InflightBudget> budget_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace graft::server
