// The build fingerprint (cmake/fingerprint.cmake, core/build_info.h): the digest of the sources
// that can change a result, made at build time, part of every cache key.
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "core/build_info.h"
#include "tests/temp_folder.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kSources = GRAFT_SOURCE_DIR;

// The fingerprint cmake/fingerprint.cmake gives the sources under `root`, with this build's
// version and toolchain unless others are given.
std::string fingerprint_of(const fs::path& root, const std::string& version = graft_version(),
                           const std::string& toolchain = GRAFT_FINGERPRINT_TOOLCHAIN) {
  TempFolder out;
  const fs::path printed = out.path() / "fingerprint";
  for (const std::string& arg : {root.string(), version, toolchain})
    EXPECT_EQ(arg.find('\''), std::string::npos) << "cannot quote " << arg;
  const std::string command = std::string("'") + GRAFT_CMAKE + "' '-DSOURCE_DIR=" + root.string() +
                              "' '-DVERSION=" + version + "' '-DTOOLCHAIN=" + toolchain + "' -P '" +
                              (kSources / "cmake" / "fingerprint.cmake").string() + "' >'" +
                              printed.string() + "'";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::string text = read_file(printed);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

// A copy of the folders and files the fingerprint reads (the patterns in cmake/fingerprint.cmake).
void copy_fingerprinted_sources(const fs::path& to) {
  for (const char* folder : {"core", "proto", "server", "cmake"})
    fs::copy(kSources / folder, to / folder, fs::copy_options::recursive);
  fs::copy(kSources / "CMakeLists.txt", to / "CMakeLists.txt");
}

TEST(BuildFingerprint, IsTheDigestOfTheSourcesThisBinaryWasBuiltFrom) {
  const std::string built = build_fingerprint();
  ASSERT_EQ(built.size(), 64u) << built;
  EXPECT_EQ(built.find_first_not_of("0123456789abcdef"), std::string::npos) << built;
  // Not stale: the build regenerated it from the sources as they are now.
  EXPECT_EQ(fingerprint_of(kSources), built);
}

TEST(BuildFingerprint, ChangesWhenOnePassFileChanges) {
  TempFolder tree;
  copy_fingerprinted_sources(tree.path());
  // The copy holds every fingerprinted file: it fingerprints as the real tree does.
  const std::string original = fingerprint_of(tree.path());
  EXPECT_EQ(original, build_fingerprint());

  // One rule of one pass changed (here, only a comment: any byte counts).
  {
    std::ofstream pass(tree.path() / "core" / "passes" / "cse.cc", std::ios::app);
    pass << "// a change\n";
  }
  const std::string edited = fingerprint_of(tree.path());
  EXPECT_EQ(edited.size(), 64u);
  EXPECT_NE(edited, original);

  // The list of the passes in pipeline order is not a .cc or .h, and counts too.
  TempFolder order;
  copy_fingerprinted_sources(order.path());
  {
    std::ofstream list(order.path() / "core" / "passes" / "passes.def", std::ios::app);
    list << "// a change\n";
  }
  EXPECT_NE(fingerprint_of(order.path()), original);

  // The request's config conversion counts too, as do the toolchain and the version.
  TempFolder other;
  copy_fingerprinted_sources(other.path());
  {
    std::ofstream convert(other.path() / "proto" / "convert.cc", std::ios::app);
    convert << "// a change\n";
  }
  EXPECT_NE(fingerprint_of(other.path()), original);
  EXPECT_NE(fingerprint_of(kSources, graft_version(), "another compiler"), original);
  EXPECT_NE(fingerprint_of(kSources, "0.0.0"), original);
}

}  // namespace
}  // namespace graft::testing
