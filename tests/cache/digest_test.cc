// SHA-256: FIPS 180-2 test vectors, and the incremental form against the one-shot form.
#include "core/cache/digest.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace graft::cache {
namespace {

// FIPS 180-2, appendix B.
constexpr char kEmpty[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr char kAbc[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
constexpr char kTwoBlocks[] = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
constexpr char kTwoBlocksMsg[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
constexpr char kMillionA[] = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";

std::string random_bytes(std::mt19937& rng, size_t n) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(byte(rng));
  return s;
}

TEST(Sha256Test, KnownVectorsOneShot) {
  EXPECT_EQ(sha256_hex(""), kEmpty);
  EXPECT_EQ(sha256_hex("abc"), kAbc);
  EXPECT_EQ(sha256_hex(kTwoBlocksMsg), kTwoBlocks);
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), kMillionA);
}

TEST(Sha256Test, KnownVectorsIncremental) {
  Sha256 empty;
  EXPECT_EQ(empty.hex_digest(), kEmpty);

  Sha256 abc;
  abc.update("a");
  abc.update("");
  abc.update("bc");
  EXPECT_EQ(abc.hex_digest(), kAbc);
  EXPECT_EQ(abc.bytes(), 3u);

  // A million 'a' in uneven chunks that straddle the 64-byte block boundary.
  Sha256 million;
  size_t fed = 0;
  for (size_t chunk = 1; fed < 1000000; chunk = chunk * 3 % 1009 + 1) {
    size_t n = std::min(chunk, 1000000 - fed);
    million.update(std::string(n, 'a'));
    fed += n;
  }
  EXPECT_EQ(million.hex_digest(), kMillionA);
  EXPECT_EQ(million.bytes(), 1000000u);
}

TEST(Sha256Test, EmbeddedNulBytesAreHashed) {
  std::string with_nul("a\0b", 3);
  EXPECT_NE(sha256_hex(with_nul), sha256_hex("a"));
  EXPECT_NE(sha256_hex(with_nul), sha256_hex(std::string("a\0c", 3)));
  EXPECT_EQ(sha256_hex(with_nul).size(), 64u);
}

TEST(Sha256Test, IncrementalMatchesOneShotOverRandomChunkings) {
  std::mt19937 rng(12345);
  for (size_t size : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 127u, 128u, 1000u, 100000u, 1u << 20}) {
    std::string data = random_bytes(rng, size);
    std::string expected = sha256_hex(data);
    for (int trial = 0; trial < 8; ++trial) {
      // Chunk sizes include 0 and sizes larger than what is left.
      std::uniform_int_distribution<size_t> chunk(0, trial % 2 == 0 ? 70 : size + 1);
      Sha256 h;
      std::vector<size_t> chunking;
      for (size_t pos = 0; pos < size;) {
        size_t n = std::min(chunk(rng), size - pos);
        h.update(std::string_view(data).substr(pos, n));
        chunking.push_back(n);
        pos += n;
      }
      ASSERT_EQ(h.hex_digest(), expected)
          << "size " << size << ", " << chunking.size() << " chunks";
      EXPECT_EQ(h.bytes(), size);
    }
  }
}

TEST(Sha256Test, DigestDoesNotEndTheStream) {
  Sha256 h;
  h.update("ab");
  std::string partial = h.hex_digest();
  EXPECT_EQ(partial, sha256_hex("ab"));
  EXPECT_EQ(h.hex_digest(), partial);  // repeatable
  h.update("c");
  EXPECT_EQ(h.hex_digest(), kAbc);
}

TEST(Sha256Test, ResetStartsOver) {
  Sha256 h;
  h.update("something else");
  h.reset();
  EXPECT_EQ(h.bytes(), 0u);
  EXPECT_EQ(h.hex_digest(), kEmpty);
  h.update("abc");
  EXPECT_EQ(h.hex_digest(), kAbc);
}

TEST(Sha256Test, MoveKeepsTheStream) {
  Sha256 a;
  a.update("ab");
  Sha256 b(std::move(a));
  b.update("c");
  EXPECT_EQ(b.hex_digest(), kAbc);

  Sha256 c;
  c.update("unrelated");
  c = std::move(b);
  EXPECT_EQ(c.hex_digest(), kAbc);
  EXPECT_EQ(c.bytes(), 3u);

  // Moved-from objects behave as fresh streams.
  EXPECT_EQ(a.hex_digest(), kEmpty);  // NOLINT(bugprone-use-after-move)
  a.update("abc");
  EXPECT_EQ(a.hex_digest(), kAbc);
}

TEST(Sha256Test, IndependentStreamsDoNotInterfere) {
  Sha256 x, y;
  x.update("a");
  y.update("x");
  x.update("bc");
  EXPECT_EQ(x.hex_digest(), kAbc);
  EXPECT_EQ(y.hex_digest(), sha256_hex("x"));
}

// The reference value was computed independently (Python's hashlib over the documented text).
TEST(InputDigestTest, CoversTheModelAndEveryFileInNameOrder) {
  const std::string model = sha256_hex("abc");
  std::vector<ExternalFileDigest> files = {{"w/b.bin", 3, sha256_hex("xyz")},
                                           {"a.bin", 2, sha256_hex("hi")}};
  EXPECT_EQ(input_digest(model, files),
            "b70c09e704dc7b406b6751ce810f18300a7ecc291ee4788492089b130b35d453");
  std::swap(files[0], files[1]);  // the order given does not matter
  EXPECT_EQ(input_digest(model, files),
            "b70c09e704dc7b406b6751ce810f18300a7ecc291ee4788492089b130b35d453");
}

TEST(InputDigestTest, IsTheModelDigestWithoutFilesAndChangesWithAnyField) {
  const std::string model = sha256_hex("abc");
  EXPECT_EQ(input_digest(model, {}), model);
  const std::vector<ExternalFileDigest> base = {{"a.bin", 2, sha256_hex("hi")}};
  const std::string d = input_digest(model, base);
  auto changed = base;
  changed[0].name = "b.bin";
  EXPECT_NE(input_digest(model, changed), d);
  changed = base;
  changed[0].size = 3;
  EXPECT_NE(input_digest(model, changed), d);
  changed = base;
  changed[0].sha256 = sha256_hex("ho");
  EXPECT_NE(input_digest(model, changed), d);
  EXPECT_NE(input_digest(sha256_hex("abd"), base), d);
}

}  // namespace
}  // namespace graft::cache
