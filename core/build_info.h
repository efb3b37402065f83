// What build of Graft this is. Both strings are generated at build time (cmake/fingerprint.cmake)
// into the graft_build_info library.
#pragma once

namespace graft {

// The release version (CMake's PROJECT_VERSION), for humans: it changes with releases only.
const char* graft_version();

// The sha256 (64 lowercase hex digits) of every source that can change a result (core/, the API
// and the request config's conversion, graftd's request settings, the build files), with the
// version, compiler, build type, flags and the ONNX and protobuf versions. Part of every cache
// key: a build whose code differs in any of these never serves another's results, even under
// the same version (a shared cache across an upgrade, a rebuilt replica).
const char* build_fingerprint();

}  // namespace graft
