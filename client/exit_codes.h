// Exit codes of the graft CLI (documented in README.md and `graft --help`).
#pragma once

namespace graft::cli {

enum ExitCode : int {
  kOk = 0,
  kNotCached = 1,  // graft lookup: the server has no cached result
  kUsage = 2,      // bad arguments or pipeline configuration
  kBadModel = 3,   // the input is not a valid ONNX model
  kIoError = 4,    // a file could not be read or written
  kInternal = 5,   // a bug in graft: please report it
  kServer = 6,     // the server is unreachable, busy, out of time, or the call was cancelled
};

}  // namespace graft::cli
