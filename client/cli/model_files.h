// A model file as the remote commands send or look it up: its digest (hashed in pieces, or
// recalled from the user's digest cache) and its external-data files.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include <absl/status/statusor.h>

#include "client/graft_client.h"

namespace graft::cli {

// External-data files the model's tensors reference ("location" entries), relative to the
// model's folder. The parse is skipped when the bytes cannot contain such an entry.
absl::StatusOr<std::set<std::string>> external_locations(const std::string& bytes);

// The sha256 of the file at `path` (client::digest_file: hashed in pieces, or recalled from the
// user's digest cache unless `rehash`), and whether the word "location" occurs in it: a model
// without it has no external-data tensors, so its digest alone keys its result.
struct ModelDigest {
  std::string sha256;
  bool mentions_location = false;
  uint64_t size = 0;
};
absl::StatusOr<ModelDigest> digest_model(const std::string& path, bool rehash);

// The external-data files (`locations`, from external_locations) of the model file `input`, as
// sources read from its folder in pieces, each name checked and each file hashed (in blocks,
// with a bar on a terminal; recalled from the digest cache unless `rehash`). Returns an exit
// code: kOk, or the failure already reported.
int external_sources(const std::string& input, bool rehash, const std::set<std::string>& locations,
                     client::ExternalSources* sources);

uint64_t total_size(const client::ExternalSources& sources);

}  // namespace graft::cli
