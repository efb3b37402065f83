// The shared cache tier's layout without Redis: chunking, the manifest and its parser, the
// assembler's checks, and the Redis URL.
#include "server/shared_entry.h"

#include <gtest/gtest.h>

#include "core/cache/digest.h"
#include "server/shared_cache.h"

namespace graft::server::shared {
namespace {

cache::CachedResult sample(size_t model_bytes, size_t report_bytes) {
  cache::CachedResult r;
  for (size_t i = 0; i < model_bytes; ++i) r.optimized_model += static_cast<char>(i * 7 + 1);
  for (size_t i = 0; i < report_bytes; ++i) r.report_json += static_cast<char>('a' + i % 26);
  return r;
}

const std::string kHash(64, 'a');
const std::string kWrite(32, 'b');

absl::StatusOr<cache::CachedResult> round_trip(const cache::CachedResult& r, uint64_t chunk) {
  Manifest m = make_manifest(kHash, kWrite, r, chunk);
  auto parsed = parse_manifest(encode_manifest(m), 1 << 20);
  if (!parsed.ok()) return parsed.status();
  EntryAssembler assembler(*parsed);
  for (uint64_t i = 0; i < parsed->chunks; ++i)
    if (auto st = assembler.add(chunk_bytes(r, m, i)); !st.ok()) return st;
  return std::move(assembler).finish();
}

TEST(SharedEntry, ChunksSplitModelAndReportAtEveryBoundary) {
  // The boundary between model and report inside a chunk, at its edge, and exact multiples.
  for (auto [model, report] : {std::pair<size_t, size_t>{5000, 300},
                               {4096, 1024},
                               {1024, 1},
                               {0, 2000},
                               {3000, 0},
                               {1, 1},
                               {10240, 10240}}) {
    cache::CachedResult r = sample(model, report);
    Manifest m = make_manifest(kHash, kWrite, r, 1024);
    EXPECT_EQ(m.chunks, (model + report + 1023) / 1024);
    std::string joined;
    for (uint64_t i = 0; i < m.chunks; ++i) {
      std::string c = chunk_bytes(r, m, i);
      EXPECT_EQ(c.size(), m.chunk_size(i));
      EXPECT_LE(c.size(), 1024u);
      joined += c;
    }
    EXPECT_EQ(joined, r.optimized_model + r.report_json) << model << "+" << report;
    auto back = round_trip(r, 1024);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->optimized_model, r.optimized_model);
    EXPECT_EQ(back->report_json, r.report_json);
  }
}

TEST(SharedEntry, KeysHoldThePrefixLayoutAndTheWholeCacheKey) {
  cache::CacheKey a{std::string(64, '0'), "O2", "0.1.0", std::string(64, 'a')};
  cache::CacheKey b = a;
  b.version = "0.2.0";  // a new release must not read the old one's entries
  EXPECT_NE(key_hash(a), key_hash(b));
  // Nor a build of the same version whose code differs (its build fingerprint).
  cache::CacheKey c = a;
  c.build = std::string(64, 'b');
  EXPECT_NE(key_hash(a), key_hash(c));
  EXPECT_NE(manifest_key("graft:", key_hash(a)), manifest_key("graft:", key_hash(c)));
  EXPECT_EQ(key_hash(a), cache::sha256_hex(a.str()));
  EXPECT_EQ(manifest_key("graft:", key_hash(a)), "graft:v1:" + key_hash(a));
  EXPECT_EQ(chunk_key("graft:", "h", "w", 3), "graft:v1:h:w:3");
  std::string id = new_write_id();
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(id, new_write_id());
}

TEST(SharedEntry, ManifestParserAcceptsOnlyWhatTheEncoderWrites) {
  cache::CachedResult r = sample(3000, 500);
  const Manifest m = make_manifest(kHash, kWrite, r, 1024);
  const std::string good = encode_manifest(m);
  auto parsed = parse_manifest(good, 1 << 20);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(encode_manifest(*parsed), good);
  EXPECT_EQ(parsed->chunks, 4u);
  EXPECT_EQ(parsed->chunk_size(3), 3500u - 3 * 1024);

  auto rejects = [&](std::string text, uint64_t max_entry = 1 << 20) {
    auto p = parse_manifest(text, max_entry);
    EXPECT_FALSE(p.ok()) << text;
    if (!p.ok()) {
      EXPECT_EQ(p.status().code(), absl::StatusCode::kDataLoss);
    }
  };
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  rejects("");
  rejects(good.substr(0, good.size() - 1));  // last line not ended
  rejects(good.substr(0, good.size() / 2));  // truncated
  rejects(good + "extra 1\n");               // a line too many
  rejects(with("graft-shared-cache 1", "graft-shared-cache 2"));
  rejects(with("chunks 4", "chunks 5"));   // count does not match the sizes
  rejects(with("chunks 4", "chunks 04"));  // leading zero
  rejects(with("chunks 4", "chunks -4"));
  rejects(with("chunks 4", "chunks 99999999999999999999"));  // 20 digits
  rejects(with("model_bytes 3000", "model_bytes 3000 "));
  rejects(with("model_bytes", "model_byte"));
  rejects(with("chunk_bytes 1024", "chunk_bytes 1023"));         // below the minimum
  rejects(with("key " + kHash, "key " + std::string(64, 'A')));  // uppercase hex
  rejects(with("write " + kWrite, "write " + std::string(31, 'b')));
  rejects(good, 3499);  // above max_entry_bytes
  // Sizes that would wrap when added.
  rejects(with("model_bytes 3000", "model_bytes 18446744073709551615"), UINT64_MAX);
  rejects(std::string(2000, '\n'));
}

TEST(SharedEntry, AssemblerRefusesWrongSizesMissingChunksAndWrongBytes) {
  cache::CachedResult r = sample(3000, 500);
  const Manifest m = make_manifest(kHash, kWrite, r, 1024);
  {
    EntryAssembler a(m);
    EXPECT_FALSE(a.add(chunk_bytes(r, m, 0).substr(1)).ok());  // truncated chunk
  }
  {
    EntryAssembler a(m);
    EXPECT_FALSE(a.add(chunk_bytes(r, m, 0) + "x").ok());  // too long
  }
  {
    EntryAssembler a(m);
    ASSERT_TRUE(a.add(chunk_bytes(r, m, 0)).ok());
    EXPECT_FALSE(std::move(a).finish().ok());  // chunks missing
  }
  {
    EntryAssembler a(m);
    for (uint64_t i = 0; i < m.chunks; ++i) {
      std::string c = chunk_bytes(r, m, i);
      if (i == 1) c[10] ^= 1;  // one flipped bit in the model
      ASSERT_TRUE(a.add(c).ok());
    }
    EXPECT_FALSE(a.add("x").ok());  // more chunks than named
    auto result = std::move(a).finish();
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(result.status().message().find("model"), std::string::npos);
  }
  {
    EntryAssembler a(m);
    for (uint64_t i = 0; i < m.chunks; ++i) {
      std::string c = chunk_bytes(r, m, i);
      if (i == m.chunks - 1) c.back() ^= 1;  // in the report
      ASSERT_TRUE(a.add(c).ok());
    }
    auto result = std::move(a).finish();
    ASSERT_FALSE(result.ok());
    EXPECT_NE(result.status().message().find("report"), std::string::npos);
  }
}

TEST(SharedEntry, RedisUrls) {
  auto a = parse_redis_url("redis://cache.example:6380/2");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "cache.example");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 2);
  EXPECT_TRUE(a->password.empty());
  auto b = parse_redis_url("redis://redis");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->port, 6379);
  EXPECT_EQ(b->db, 0);
  auto c = parse_redis_url("redis://user:s3cret@[::1]:7000/");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 7000);
  EXPECT_EQ(c->username, "user");
  EXPECT_EQ(c->password, "s3cret");
  auto d = parse_redis_url("redis://:pw@h:1");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->username.empty());
  EXPECT_EQ(d->password, "pw");
  for (const char* bad :
       {"", "http://h:1", "redis://", "redis://h:0", "redis://h:65536", "redis://h:x",
        "redis://h/db", "redis://user@h", "redis://[::1", "redis://h:1/-1"})
    EXPECT_FALSE(parse_redis_url(bad).ok()) << bad;
}

}  // namespace
}  // namespace graft::server::shared
