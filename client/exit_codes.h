// Exit codes of the graft CLI (documented in README.md and `graft --help`).
#pragma once

namespace graft::cli {

enum ExitCode : int {
  kOk = 0,
  kUsage = 2,     // bad arguments or pipeline configuration
  kBadModel = 3,  // the input is not a valid ONNX model
  kIoError = 4,   // a file could not be read or written
  kInternal = 5,  // a bug in graft: please report it
};

}  // namespace graft::cli
