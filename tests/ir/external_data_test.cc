// ir::ExternalData (reading external tensors through a reference, checked as hostile input) and
// Model::serialize_with_external (new tensors written to a new external-data file).
#include "core/ir/external_data.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/ir/model.h"
#include "core/ir/op_params.h"
#include "core/paths/files.h"
#include "tests/external_model.h"
#include "tests/testing.h"

namespace graft::ir {
namespace {

namespace fs = std::filesystem;
using onnx::TensorProto;
using testing::add_key;
using testing::external_tensor;
using testing::TempFolder;

// 64 bytes 0, 1, ..., 63 in `folder`/data.bin.
std::string write_counting_file(const TempFolder& folder, const std::string& name = "data.bin") {
  std::string bytes;
  for (int i = 0; i < 64; ++i) bytes.push_back(static_cast<char>(i));
  testing::append_file(folder.path(), name, bytes);
  return bytes;
}

TensorProto keyed(const std::vector<std::pair<std::string, std::string>>& keys,
                  std::vector<int64_t> dims = {4}, int32_t dtype = TensorProto::FLOAT) {
  TensorProto t;
  t.set_name("t");
  t.set_data_type(dtype);
  for (int64_t d : dims) t.add_dims(d);
  t.set_data_location(TensorProto::EXTERNAL);
  for (const auto& [k, v] : keys) add_key(&t, k, v);
  return t;
}

absl::StatusCode code_of(const ExternalData& d, const TensorProto& t) {
  return d.read(t).status().code();
}

TEST(ExternalData, ReadsExactlyTheRangeOfTheReference) {
  TempFolder dir;
  const std::string bytes = write_counting_file(dir);
  auto data = ExternalData::beneath(dir.str());
  auto t = external_tensor("w", TensorProto::FLOAT, {2, 2}, "data.bin", 8, 16);
  auto read = data->read(t);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->bytes(), bytes.substr(8, 16));
  EXPECT_EQ(data->bytes_read(), 16u);
  auto ref = data->locate(t);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(*ref, (ExternalRef{"data.bin", 8, 16}));
}

TEST(ExternalData, MissingLengthMeansTheRestOfTheFile) {
  TempFolder dir;
  const std::string bytes = write_counting_file(dir);
  auto data = ExternalData::beneath(dir.str());
  auto t = keyed({{"location", "data.bin"}, {"offset", "48"}}, {4});
  auto read = data->read(t);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->bytes(), bytes.substr(48));
  // The rest of the file is 16 bytes; five floats do not fit it.
  EXPECT_EQ(code_of(*data, keyed({{"location", "data.bin"}, {"offset", "48"}}, {5})),
            absl::StatusCode::kInvalidArgument);
  // Without an offset either: the whole file, 16 floats.
  EXPECT_TRUE(data->read(keyed({{"location", "data.bin"}}, {16})).ok());
}

TEST(ExternalData, RangesOutsideTheFileAreRefused) {
  TempFolder dir;
  write_counting_file(dir);
  auto data = ExternalData::beneath(dir.str());
  auto offset_past = keyed({{"location", "data.bin"}, {"offset", "65"}, {"length", "0"}}, {0});
  auto read = data->read(offset_past);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find("past the end"), std::string::npos) << read.status();
  EXPECT_EQ(code_of(*data, keyed({{"location", "data.bin"}, {"offset", "56"}, {"length", "16"}})),
            absl::StatusCode::kInvalidArgument);
  // Values whose sum wraps a 64-bit integer.
  EXPECT_EQ(code_of(*data, keyed({{"location", "data.bin"},
                                  {"offset", "9223372036854775807"},
                                  {"length", "9223372036854775807"}})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      code_of(
          *data,
          keyed({{"location", "data.bin"}, {"offset", "32"}, {"length", "9223372036854775800"}})),
      absl::StatusCode::kInvalidArgument);
  // At the end exactly: an empty tensor.
  EXPECT_TRUE(
      data->read(keyed({{"location", "data.bin"}, {"offset", "64"}, {"length", "0"}}, {0})).ok());
}

TEST(ExternalData, GarbageNumbersAreRefused) {
  TempFolder dir;
  write_counting_file(dir);
  auto data = ExternalData::beneath(dir.str());
  for (const char* bad : {"-1", "+1", " 1", "1 ", "0x10", "1e3", "", "abc", "18446744073709551615",
                          "9223372036854775808", "99999999999999999999999"}) {
    for (const char* key : {"offset", "length"}) {
      auto t = keyed({{"location", "data.bin"}, {key, bad}});
      auto st = data->read(t).status();
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << key << "=" << bad;
      EXPECT_NE(st.message().find("decimal number"), std::string::npos) << st;
    }
  }
  // A key given twice.
  EXPECT_EQ(code_of(*data, keyed({{"location", "data.bin"}, {"offset", "0"}, {"offset", "0"}})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code_of(*data, keyed({{"location", "data.bin"}, {"location", "data.bin"}})),
            absl::StatusCode::kInvalidArgument);
}

TEST(ExternalData, LocationsMustBeGivenKnownAndInsideTheFolder) {
  TempFolder dir;
  write_counting_file(dir);
  auto data = ExternalData::beneath(dir.str());
  auto missing = data->read(keyed({{"offset", "0"}, {"length", "16"}}));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("no 'location'"), std::string::npos);
  for (const char* bad : {"../data.bin", "/etc/passwd", "./data.bin", "a//b", "a\\b", ""})
    EXPECT_EQ(code_of(*data, keyed({{"location", bad}})), absl::StatusCode::kInvalidArgument)
        << bad;
  EXPECT_EQ(code_of(*data, keyed({{"location", "absent.bin"}})), absl::StatusCode::kNotFound);

  // files(): only the listed locations, each its own path.
  auto files = ExternalData::files({{"spooled", (dir.path() / "data.bin").string()}});
  EXPECT_TRUE(files->read(keyed({{"location", "spooled"}}, {16})).ok());
  auto unknown = files->read(keyed({{"location", "data.bin"}}, {16}));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("not one of the model's external-data files"),
            std::string::npos)
      << unknown.status();
}

TEST(ExternalData, SymbolicLinksAndDirectoriesAreRefused) {
  TempFolder dir, outside;
  write_counting_file(outside, "secret.bin");
  write_counting_file(dir);
  fs::create_symlink(outside.path() / "secret.bin", dir.path() / "link.bin");
  fs::create_symlink(outside.path(), dir.path() / "linked_dir");
  fs::create_directories(dir.path() / "sub");
  auto data = ExternalData::beneath(dir.str());
  auto link = data->read(keyed({{"location", "link.bin"}}, {16}));
  EXPECT_EQ(link.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(link.status().message().find("symbolic link"), std::string::npos) << link.status();
  EXPECT_EQ(code_of(*data, keyed({{"location", "linked_dir/secret.bin"}}, {16})),
            absl::StatusCode::kInvalidArgument);
  auto folder = data->read(keyed({{"location", "sub"}}, {0}));
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kInvalidArgument);
  // files() refuses a directory too.
  auto files = ExternalData::files({{"d", dir.str()}});
  EXPECT_EQ(files->read(keyed({{"location", "d"}}, {0})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ExternalData, LengthMustMatchDimsAndType) {
  TempFolder dir;
  write_counting_file(dir);
  auto data = ExternalData::beneath(dir.str());
  auto st = data->read(keyed({{"location", "data.bin"}, {"length", "12"}}, {4})).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("does not match"), std::string::npos) << st;
  // Negative dims, dims whose size overflows, strings and undefined types.
  EXPECT_EQ(code_of(*data, keyed({{"location", "data.bin"}, {"length", "16"}}, {-4})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code_of(*data, keyed({{"location", "data.bin"}, {"length", "16"}},
                                 {int64_t{1} << 40, int64_t{1} << 40})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code_of(*data, keyed({{"location", "data.bin"}}, {4}, TensorProto::STRING)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code_of(*data, keyed({{"location", "data.bin"}}, {4}, TensorProto::UNDEFINED)),
            absl::StatusCode::kInvalidArgument);
  // A tensor that is not external.
  TensorProto plain;
  plain.set_data_type(TensorProto::FLOAT);
  EXPECT_EQ(data->read(plain).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExternalData, LimitIsCheckedBeforeReading) {
  TempFolder dir;
  write_counting_file(dir);
  auto data = ExternalData::beneath(dir.str());
  auto t = keyed({{"location", "data.bin"}}, {16});
  EXPECT_EQ(data->read(t, 63).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(data->bytes_read(), 0u);
  auto loaded = load_tensor(t, data.get(), 63);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(data->bytes_read(), 0u);
  loaded = load_tensor(t, data.get(), 64);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->was_external());
  EXPECT_FALSE(is_external(**loaded));
  EXPECT_EQ((*loaded)->raw_data().size(), 64u);
  EXPECT_EQ(load_tensor(t, nullptr, 64).status().code(), absl::StatusCode::kFailedPrecondition);
  // An in-memory tensor is returned as it is.
  TensorProto plain;
  plain.set_data_type(TensorProto::FLOAT);
  plain.add_float_data(1);
  auto same = load_tensor(plain, nullptr, 0);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->get(), &plain);
}

TEST(ExternalData, BlocksHashesAndComparisons) {
  TempFolder dir;
  const std::string bytes = write_counting_file(dir);
  testing::append_file(dir.path(), "data.bin", bytes.substr(0, 32));  // bytes 64..95 = 0..31
  auto data = ExternalData::beneath(dir.str());
  auto a = external_tensor("a", TensorProto::FLOAT, {8}, "data.bin", 0, 32);
  auto b = external_tensor("b", TensorProto::FLOAT, {8}, "data.bin", 64, 32);
  auto c = external_tensor("c", TensorProto::FLOAT, {8}, "data.bin", 32, 32);
  std::string streamed;
  ASSERT_TRUE(data->read_blocks(
                      c, [&](std::string_view s) { streamed += s; }, 5)
                  .ok());
  EXPECT_EQ(streamed, bytes.substr(32, 32));
  const uint64_t before = data->bytes_read();
  auto ha = data->content_hash(a), hb = data->content_hash(b), hc = data->content_hash(c);
  ASSERT_TRUE(ha.ok() && hb.ok() && hc.ok());
  EXPECT_EQ(*ha, *hb);
  EXPECT_NE(*ha, *hc);
  EXPECT_EQ(data->bytes_read(), before + 96);
  // Remembered per range: asking again reads nothing.
  EXPECT_EQ(*data->content_hash(a), *ha);
  EXPECT_EQ(data->bytes_read(), before + 96);
  EXPECT_TRUE(*data->same_payload(a, b, 7));
  EXPECT_FALSE(*data->same_payload(a, c, 7));
  const uint64_t compared = data->bytes_read();
  EXPECT_TRUE(*data->same_payload(a, a));  // the same range: nothing read
  EXPECT_EQ(data->bytes_read(), compared);
}

TEST(ExternalData, LoadFileReadsBesideTheModelAndClonesShareIt) {
  TempFolder dir;
  auto model = testing::parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,2] x) => (float[2,2] y) <float[2,2] w = {1, 2, 3, 4}> {
      y = Add (x, w)
    }
  )");
  testing::externalize(*model, dir.path(), "w.bin", {"w"});
  ASSERT_TRUE(paths::write_file_atomic((dir.path() / "m.onnx").string(),
                                       model->to_proto().SerializeAsString())
                  .ok());
  auto loaded = Model::load_file((dir.path() / "m.onnx").string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_NE((*loaded)->external_data(), nullptr);
  auto clone = (*loaded)->clone();
  EXPECT_EQ(clone->external_data(), (*loaded)->external_data());
  auto w = constant_proto(clone->graph().find_local("w"));
  ASSERT_TRUE(w);
  EXPECT_EQ(read_doubles(*w), (std::vector<double>{1, 2, 3, 4}));
  // Without ExternalData (parsed bytes) the constant cannot be read, and nothing fails.
  auto parsed = Model::parse(model->to_proto().SerializeAsString());
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(constant_proto((*parsed)->graph().find_local("w")));
  EXPECT_NE(constant_header((*parsed)->graph().find_local("w")), nullptr);
}

// A model with an external weight `w` (64 floats), an in-memory weight `big` (2 KiB) and a small
// one `small` (16 bytes).
std::unique_ptr<Model> mixed_model(const TempFolder& dir) {
  std::string big = "float[512] big = {";
  for (int i = 0; i < 512; ++i) big += (i ? ", " : "") + std::to_string(i);
  big += "}";
  std::string w = "float[64] w = {";
  for (int i = 0; i < 64; ++i) w += (i ? ", " : "") + std::to_string(-i);
  w += "}";
  auto model = testing::parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[512] x, float[64] v, float[4] u) => (float[512] y, float[64] z, float[4] s)
        <)" + big + ", " + w + R"(, float[4] small = {1, 2, 3, 4}> {
      y = Add (x, big)
      z = Add (v, w)
      s = Add (u, small)
    }
  )");
  testing::externalize(*model, dir.path(), "in.bin", {"w"});
  return model;
}

TEST(SerializeWithExternal, NewLargeTensorsGoToTheNewFile) {
  TempFolder in, out;
  auto model = mixed_model(in);
  auto reference = model->clone();
  Model::ExternalWrite write;
  write.folder = in.str();  // beside the input, which it must leave alone
  write.location = "new/weights.bin";
  auto saved = model->serialize_with_external(write);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->locations, (std::vector<std::string>{"in.bin", "new/weights.bin"}));
  EXPECT_EQ(saved->new_file_tensors, 1);
  EXPECT_EQ(saved->new_file_bytes, 2048u);
  EXPECT_EQ(fs::file_size(in.path() / "new/weights.bin"), 2048u);
  EXPECT_LT(saved->model.size(), 1024u);  // the 2 KiB weight is not in the model
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(saved->model));
  for (const auto& t : proto.graph().initializer()) {
    if (t.name() == "small") {
      EXPECT_FALSE(is_external(t));
    } else {
      EXPECT_TRUE(is_external(t)) << t.name();
    }
  }
  // Loaded again from disk, it computes what the model before saving did.
  ASSERT_TRUE(paths::write_file_atomic((in.path() / "saved.onnx").string(), saved->model).ok());
  auto reloaded = Model::load_file((in.path() / "saved.onnx").string());
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(testing::same_outputs(*reference, **reloaded), "");
}

TEST(SerializeWithExternal, AlignsOffsetsAndRespectsMinBytes) {
  TempFolder dir;
  auto model = mixed_model(dir);
  Model::ExternalWrite write;
  write.folder = dir.str();
  write.location = "w2.bin";
  write.min_bytes = 16;  // `small` too now
  write.alignment = 4096;
  auto saved = model->serialize_with_external(write);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->new_file_tensors, 2);
  EXPECT_EQ(saved->new_file_bytes, 4096u + 16u);  // `big` at 0, `small` at 4096
}

TEST(SerializeWithExternal, NothingToWriteCreatesNoFile) {
  TempFolder dir;
  auto model = mixed_model(dir);
  Model::ExternalWrite write;
  write.folder = dir.str();
  write.location = "unused.bin";
  write.min_bytes = 1 << 20;
  auto saved = model->serialize_with_external(write);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->new_file_bytes, 0u);
  EXPECT_EQ(saved->locations, (std::vector<std::string>{"in.bin"}));
  EXPECT_FALSE(fs::exists(dir.path() / "unused.bin"));
}

TEST(SerializeWithExternal, ALocationTheModelReadsIsRefused) {
  TempFolder dir;
  auto model = mixed_model(dir);
  const auto size = fs::file_size(dir.path() / "in.bin");
  Model::ExternalWrite write;
  write.folder = dir.str();
  write.location = "in.bin";
  auto saved = model->serialize_with_external(write);
  EXPECT_EQ(saved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(saved.status().message().find("already references"), std::string::npos);
  EXPECT_EQ(fs::file_size(dir.path() / "in.bin"), size);
  // The model is kept: it still saves.
  write.location = "other.bin";
  EXPECT_TRUE(model->serialize_with_external(write).ok());
}

TEST(SerializeWithExternal, WithoutExternalDataSavesAsBefore) {
  TempFolder dir;
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[300] x) => (float[300] y) <float[300] w = {)";
  std::string full = text;
  for (int i = 0; i < 300; ++i) full += (i ? ", " : "") + std::to_string(i);
  full += "}> {\n y = Add (x, w)\n }";
  auto a = testing::parse_text(full), b = testing::parse_text(full);
  Model::ExternalWrite write;
  write.folder = dir.str();
  write.location = "new.bin";
  auto saved = a->serialize_with_external(write);
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->model, *b->serialize_and_release());
  EXPECT_TRUE(saved->locations.empty());
  EXPECT_FALSE(fs::exists(dir.path() / "new.bin"));
  // Unless asked.
  auto c = testing::parse_text(full);
  write.even_without_external = true;
  auto forced = c->serialize_with_external(write);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->locations, (std::vector<std::string>{"new.bin"}));
  EXPECT_EQ(forced->new_file_bytes, 1200u);
}

// Written elsewhere with `compact`, a file the model uses only in part (here 4 KiB that a pass
// replaced follow `w`) is not referenced any more: the tensors still in use are copied to the new
// file, once per range; a file used in full keeps its reference.
TEST(SerializeWithExternal, CompactMovesTheTensorsOfPartlyUsedFiles) {
  std::string w = "{";
  for (int i = 0; i < 64; ++i) w += (i ? ", " : "") + std::to_string(i * 0.5);
  w += "}";
  const std::string text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[64] v, float[4] u) => (float[64] z, float[64] z2, float[4] s)
        <float[64] w = )" + w +
                           ", float[64] w2 = " + w + R"(, float[4] small = {1, 2, 3, 4}> {
      z = Add (v, w)
      z2 = Sub (v, w2)
      s = Add (u, small)
    }
  )";
  auto build = [&](const TempFolder& in) {
    auto model = testing::parse_text(text);
    testing::externalize(*model, in.path(), "in.bin", {"w"});
    testing::append_file(in.path(), "in.bin", std::string(4096, 'x'));
    TensorProto same = *model->graph().find_local("w")->initializer();  // w2: w's range
    same.set_name("w2");
    model->graph().find_local("w2")->set_initializer(same);
    testing::externalize(*model, in.path(), "full.bin", {"small"});
    model->set_external_data(ExternalData::beneath(in.str()));
    return model;
  };
  TempFolder in, out;
  auto model = build(in);
  auto reference = testing::parse_text(text);
  Model::ExternalWrite write;
  write.folder = out.str();
  write.location = "m.weights";
  write.compact = true;
  auto saved = model->serialize_with_external(write);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->locations, (std::vector<std::string>{"full.bin", "m.weights"}));
  EXPECT_EQ(saved->moved_tensors, 2);
  EXPECT_EQ(saved->new_file_tensors, 2);
  EXPECT_EQ(saved->new_file_bytes, 256u);  // one copy of w's 64 floats
  fs::copy_file(in.path() / "full.bin", out.path() / "full.bin");
  ASSERT_TRUE(paths::write_file_atomic((out.path() / "m.onnx").string(), saved->model).ok());
  auto reloaded = Model::load_file((out.path() / "m.onnx").string());
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(testing::same_outputs(*reference, **reloaded), "");
  // Without `compact` the partly used file stays referenced.
  TempFolder in2, out2;
  write.folder = out2.str();
  write.compact = false;
  auto kept = build(in2)->serialize_with_external(write);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->locations, (std::vector<std::string>{"full.bin", "in.bin"}));
  EXPECT_EQ(kept->moved_tensors, 0);
}

}  // namespace
}  // namespace graft::ir
