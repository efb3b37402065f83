// Tensor <-> TensorProto conversion for every element type, and the allocation limit.
#include "core/eval/tensor.h"

#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include <gtest/gtest.h>

#include "core/eval/broadcast.h"
#include "core/eval/budget.h"
#include "core/eval/kernel.h"
#include "core/ir/tensor.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

constexpr uint64_t kLimit = 1 << 20;

TensorProto proto_of(int32_t dtype, std::vector<int64_t> dims) {
  TensorProto p;
  p.set_data_type(dtype);
  for (int64_t d : dims) p.add_dims(d);
  return p;
}

// Typed-field proto -> Tensor -> raw proto -> Tensor gives the same tensor and values.
void expect_round_trip(const TensorProto& typed, const std::vector<double>& values) {
  auto t = Tensor::from_proto(typed, kLimit);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(t->get_double(i), values[i]) << i;
  TensorProto raw = t->to_proto("x");
  EXPECT_EQ(raw.name(), "x");
  EXPECT_TRUE(raw.has_raw_data());
  EXPECT_EQ(raw.data_type(), typed.data_type());
  auto back = Tensor::from_proto(raw, kLimit);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == *t);
  EXPECT_EQ(back->dims(), t->dims());
}

TEST(TensorTest, FloatRoundTrip) {
  TensorProto p = proto_of(TensorProto::FLOAT, {2, 2});
  for (float f : {1.5f, -2.0f, 0.0f, 3.25f}) p.add_float_data(f);
  expect_round_trip(p, {1.5, -2.0, 0.0, 3.25});
}

TEST(TensorTest, DoubleRoundTrip) {
  TensorProto p = proto_of(TensorProto::DOUBLE, {3});
  for (double d : {0.1, -1e300, 7.0}) p.add_double_data(d);
  expect_round_trip(p, {0.1, -1e300, 7.0});
}

TEST(TensorTest, Float16RoundTrip) {
  TensorProto p = proto_of(TensorProto::FLOAT16, {4});
  // 1.0, -2.0, 0.5, 65504 (largest half) in IEEE binary16 bits.
  for (int bits : {0x3c00, 0xc000, 0x3800, 0x7bff}) p.add_int32_data(bits);
  expect_round_trip(p, {1.0, -2.0, 0.5, 65504.0});
  auto t = Tensor::from_proto(p, kLimit);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->element_size(), 2u);
  t->set_double(0, 0.25);
  EXPECT_EQ(t->data<uint16_t>()[0], 0x3400);
  t->set_double(1, 1e6);  // overflows half: infinity
  EXPECT_TRUE(std::isinf(t->get_double(1)));
}

TEST(TensorTest, BFloat16RoundTrip) {
  TensorProto p = proto_of(TensorProto::BFLOAT16, {2});
  for (int bits : {0x3f80, 0xc040}) p.add_int32_data(bits);  // 1.0, -3.0
  expect_round_trip(p, {1.0, -3.0});
}

TEST(TensorTest, IntegerRoundTrips) {
  struct Case {
    int32_t dtype;
    std::vector<int64_t> values;
  };
  for (const Case& c : std::vector<Case>{
           {TensorProto::INT8, {-128, 0, 127}},
           {TensorProto::INT16, {-32768, 5, 32767}},
           {TensorProto::INT32, {std::numeric_limits<int32_t>::min(), 0, 42}},
           {TensorProto::INT64, {std::numeric_limits<int64_t>::min(), -1, 1ll << 40}},
           {TensorProto::UINT8, {0, 200, 255}},
           {TensorProto::UINT16, {0, 65535, 9}},
           {TensorProto::UINT32, {0, 4294967295ll, 17}},
           {TensorProto::UINT64, {0, 1ll << 62, 3}},
           {TensorProto::BOOL, {1, 0, 1}},
       }) {
    SCOPED_TRACE(c.dtype);
    TensorProto p = proto_of(c.dtype, {3});
    for (int64_t v : c.values) {
      if (c.dtype == TensorProto::INT64) {
        p.add_int64_data(v);
      } else if (c.dtype == TensorProto::UINT32 || c.dtype == TensorProto::UINT64) {
        p.add_uint64_data(static_cast<uint64_t>(v));
      } else {
        p.add_int32_data(static_cast<int32_t>(v));
      }
    }
    auto t = Tensor::from_proto(p, kLimit);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->element_size(), ir::element_size(c.dtype));
    for (size_t i = 0; i < c.values.size(); ++i) EXPECT_EQ(t->get_int64(i), c.values[i]);
    auto back = Tensor::from_proto(t->to_proto(), kLimit);
    ASSERT_TRUE(back.ok());
    EXPECT_TRUE(*back == *t);
    EXPECT_TRUE(is_integer_type(c.dtype) || c.dtype == TensorProto::BOOL);
    EXPECT_FALSE(is_float_type(c.dtype));
  }
}

TEST(TensorTest, RawDataIsCopiedAsIs) {
  TensorProto p = proto_of(TensorProto::INT32, {2});
  int32_t v[2] = {7, -9};
  p.set_raw_data(std::string(reinterpret_cast<const char*>(v), sizeof(v)));
  auto t = Tensor::from_proto(p, kLimit);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->data<int32_t>()[1], -9);
  p.set_raw_data("abc");  // wrong size
  EXPECT_FALSE(Tensor::from_proto(p, kLimit).ok());
}

TEST(TensorTest, RawBoolBytesAreNormalised) {
  TensorProto p = proto_of(TensorProto::BOOL, {3});
  p.set_raw_data(std::string("\x00\x02\xff", 3));
  auto t = Tensor::from_proto(p, kLimit);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->data<uint8_t>()[0], 0);
  EXPECT_EQ(t->data<uint8_t>()[1], 1);
  EXPECT_EQ(t->data<uint8_t>()[2], 1);
}

TEST(TensorTest, StringRoundTrip) {
  TensorProto p = proto_of(TensorProto::STRING, {3});
  for (const char* s : {"a", "", "hello world"}) p.add_string_data(s);
  auto t = Tensor::from_proto(p, kLimit);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->strings(), (std::vector<std::string>{"a", "", "hello world"}));
  TensorProto out = t->to_proto();
  EXPECT_EQ(out.string_data_size(), 3);
  EXPECT_FALSE(out.has_raw_data());
  auto back = Tensor::from_proto(out, kLimit);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == *t);
  auto zeros = Tensor::zeros(TensorProto::STRING, {2}, kLimit);
  ASSERT_TRUE(zeros.ok());
  EXPECT_EQ(zeros->strings().size(), 2u);
}

TEST(TensorTest, ScalarAndEmpty) {
  TensorProto p = proto_of(TensorProto::FLOAT, {});
  p.add_float_data(4.0f);
  auto s = Tensor::from_proto(p, kLimit);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->rank(), 0);
  EXPECT_EQ(s->size(), 1);
  auto e = Tensor::zeros(TensorProto::FLOAT, {3, 0}, kLimit);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size(), 0);
  EXPECT_EQ(e->bytes(), 0u);
}

TEST(TensorTest, MismatchedFieldCountIsAnError) {
  TensorProto p = proto_of(TensorProto::FLOAT, {3});
  p.add_float_data(1);
  EXPECT_EQ(Tensor::from_proto(p, kLimit).status().code(), absl::StatusCode::kInvalidArgument);
  TensorProto s = proto_of(TensorProto::STRING, {2});
  s.add_string_data("x");
  EXPECT_FALSE(Tensor::from_proto(s, kLimit).ok());
}

// Data that does not match the dims is refused before anything is charged or allocated: a few
// bytes declaring a tensor just under the limit cost nothing.
TEST(TensorTest, MismatchedDataIsRefusedBeforeAllocating) {
  auto budget = Budget::make(/*max_bytes=*/0, /*max_work=*/0);
  BudgetScope scope(budget.get());
  TensorProto raw = proto_of(TensorProto::FLOAT, {256, 1024});
  raw.set_raw_data(std::string(4, '\0'));
  EXPECT_EQ(Tensor::from_proto(raw, kLimit).status().message(),
            "raw_data has 4 bytes, expected 1048576");
  TensorProto typed = proto_of(TensorProto::INT8, {1 << 20});
  typed.add_int32_data(1);
  EXPECT_EQ(Tensor::from_proto(typed, kLimit).status().message(),
            "tensor field has 1 entries, expected 1048576");
  TensorProto complex = proto_of(TensorProto::COMPLEX64, {2});
  complex.add_float_data(1);
  complex.add_float_data(2);
  EXPECT_EQ(Tensor::from_proto(complex, kLimit).status().message(),
            "tensor field has 2 entries, expected 4");
  EXPECT_EQ(budget->peak_bytes(), 0u);
  complex.add_float_data(3);
  complex.add_float_data(4);
  EXPECT_TRUE(Tensor::from_proto(complex, kLimit).ok());
  EXPECT_EQ(budget->peak_bytes(), 16u);
}

TEST(TensorTest, AllocationLimit) {
  EXPECT_TRUE(Tensor::zeros(TensorProto::FLOAT, {256, 1024}, kLimit).ok());  // exactly 1 MiB
  EXPECT_EQ(Tensor::zeros(TensorProto::FLOAT, {256, 1025}, kLimit).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Tensor::zeros(TensorProto::DOUBLE, {1ll << 40, 1ll << 40}, kLimit).status().code(),
            absl::StatusCode::kInvalidArgument);  // overflows int64
  EXPECT_FALSE(Tensor::zeros(TensorProto::FLOAT, {-1}, kLimit).ok());
  EXPECT_EQ(Tensor::zeros(TensorProto::STRING, {1 << 20}, kLimit).status().code(),
            absl::StatusCode::kResourceExhausted);
  // A proto declaring a huge shape is rejected before its (absent) data is looked at.
  TensorProto p = proto_of(TensorProto::INT64, {1 << 20, 1 << 10});
  EXPECT_EQ(Tensor::from_proto(p, kLimit).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(TensorTest, ExternalDataIsUnsupported) {
  TensorProto p = proto_of(TensorProto::FLOAT, {1});
  p.set_data_location(TensorProto::EXTERNAL);
  EXPECT_EQ(Tensor::from_proto(p, kLimit).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(TensorTest, Conversions) {
  auto t = Tensor::zeros(TensorProto::INT8, {3}, kLimit);
  ASSERT_TRUE(t.ok());
  t->set_double(0, -3.7);  // truncates
  t->set_int64(1, 300);    // wraps like a C cast
  EXPECT_EQ(t->get_int64(0), -3);
  EXPECT_EQ(t->get_int64(1), 44);
  auto f = Tensor::zeros(TensorProto::FLOAT, {1}, kLimit);
  ASSERT_TRUE(f.ok());
  f->set_double(0, std::nan(""));
  EXPECT_EQ(f->get_int64(0), 0);
  auto a = Tensor::zeros(TensorProto::FLOAT, {1}, kLimit);
  a->set_double(0, std::nan(""));
  EXPECT_TRUE(*a == *f);  // NaNs compare by bits
}

// ---------------------------------------------------------------------------------------------
// 4-bit types: packed two per byte in protos (low nibble first), one per byte in a Tensor.

TEST(TensorTest, Int4RawDataUnpacksLowNibbleFirstAndPacksBack) {
  TensorProto p = proto_of(ir::kInt4, {5});
  // Elements 1, -2 | 7, -8 | 3 (and a padding nibble of 0): bytes 0xe1, 0x87, 0x03.
  p.set_raw_data(std::string("\xe1\x87\x03", 3));
  auto t = Tensor::from_proto(p, kLimit);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->element_size(), 1u);
  EXPECT_EQ(t->bytes(), 5u);
  std::vector<int64_t> got;
  for (int64_t i = 0; i < t->size(); ++i) got.push_back(t->get_int64(i));
  EXPECT_EQ(got, (std::vector<int64_t>{1, -2, 7, -8, 3}));
  EXPECT_EQ(t->get_double(1), -2.0);
  TensorProto back = t->to_proto("w");
  EXPECT_EQ(back.data_type(), ir::kInt4);
  EXPECT_EQ(back.raw_data(), std::string("\xe1\x87\x03", 3));
}

TEST(TensorTest, Uint4Int32DataHoldsOnePackedByteAndRoundTrips) {
  TensorProto p = proto_of(ir::kUint4, {2, 2});
  // int32_data: one packed byte per entry (onnx >= 1.16), so 4 elements take 2 entries.
  p.add_int32_data(0xf0);  // 0, 15
  p.add_int32_data(0x39);  // 9, 3
  expect_round_trip(p, {0, 15, 9, 3});
  auto t = Tensor::from_proto(p, kLimit);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->to_proto().raw_data(), std::string("\xf0\x39", 2));
}

TEST(TensorTest, FourBitSizesAreCheckedExactlyBeforeAllocating) {
  struct Case {
    int32_t dtype;
    std::vector<int64_t> dims;
    size_t raw;  // raw_data bytes given
  };
  // ceil(n / 2) bytes exactly: one byte short, one too many, the unpacked size, an odd count.
  for (const Case& c : {Case{ir::kInt4, {5}, 2}, Case{ir::kInt4, {5}, 4}, Case{ir::kUint4, {4}, 4},
                        Case{ir::kUint4, {3}, 1}, Case{ir::kInt4, {1}, 0}}) {
    TensorProto p = proto_of(c.dtype, c.dims);
    p.set_raw_data(std::string(c.raw, '\x11'));
    auto t = Tensor::from_proto(p, kLimit);
    EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << c.raw << " " << t.status();
  }
  // The same for int32_data entries, and for dims claiming far more than the message holds.
  TensorProto fields = proto_of(ir::kInt4, {3});
  fields.add_int32_data(1);
  EXPECT_TRUE(absl::IsInvalidArgument(Tensor::from_proto(fields, kLimit).status()));
  TensorProto huge = proto_of(ir::kInt4, {int64_t{1} << 40});
  huge.set_raw_data("\x01");
  EXPECT_FALSE(Tensor::from_proto(huge, uint64_t{1} << 50).ok());
  // Empty and odd-sized tensors that match.
  TensorProto empty = proto_of(ir::kUint4, {0, 3});
  empty.set_raw_data("");
  auto e = Tensor::from_proto(empty, kLimit);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->size(), 0);
  EXPECT_EQ(e->to_proto().raw_data(), "");
}

TEST(TensorTest, FourBitSetInt64WrapsIntoTheTypesRange) {
  auto s = Tensor::zeros(ir::kInt4, {4}, kLimit);
  auto u = Tensor::zeros(ir::kUint4, {4}, kLimit);
  ASSERT_TRUE(s.ok() && u.ok());
  const std::vector<int64_t> in{7, 8, -9, 23};
  for (int64_t i = 0; i < 4; ++i) {
    s->set_int64(i, in[i]);
    u->set_int64(i, in[i]);
  }
  // Two's complement in 4 bits (as Cast between integer types discards high bits).
  EXPECT_EQ(s->get_int64(0), 7);
  EXPECT_EQ(s->get_int64(1), -8);
  EXPECT_EQ(s->get_int64(2), 7);
  EXPECT_EQ(s->get_int64(3), 7);
  EXPECT_EQ(u->get_int64(1), 8);
  EXPECT_EQ(u->get_int64(2), 7);
  EXPECT_EQ(u->get_int64(3), 7);
  // Every stored element packs and unpacks to itself.
  auto back = Tensor::from_proto(s->to_proto(), kLimit);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == *s);
  EXPECT_TRUE(is_integer_type(ir::kInt4) && is_integer_type(ir::kUint4));
}

TEST(TensorTest, FourBitPackingRoundTripsEveryValue) {
  // All 16 values of each type, at even and odd positions, odd and even counts.
  for (int32_t dtype : {ir::kInt4, ir::kUint4}) {
    for (size_t n : {size_t{15}, size_t{16}, size_t{33}}) {
      std::vector<int8_t> values(n);
      for (size_t i = 0; i < n; ++i)
        values[i] = static_cast<int8_t>(dtype == ir::kInt4 ? static_cast<int>(i * 7 % 16) - 8
                                                           : static_cast<int>(i * 7 % 16));
      TensorProto p = ir::make_4bit_tensor(dtype, {static_cast<int64_t>(n)}, values);
      EXPECT_EQ(p.raw_data().size(), (n + 1) / 2);
      auto t = Tensor::from_proto(p, kLimit);
      ASSERT_TRUE(t.ok()) << t.status();
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(t->get_int64(static_cast<int64_t>(i)), values[i]);
      EXPECT_EQ(t->to_proto().raw_data(), p.raw_data());
      auto ints = ir::read_int64s(p);
      ASSERT_TRUE(ints.has_value());
      EXPECT_EQ(*ints, std::vector<int64_t>(values.begin(), values.end()));
    }
  }
  EXPECT_EQ(ir::payload_size(ir::kInt4, 5), 3u);
  EXPECT_EQ(ir::payload_size(ir::kUint4, 0), 0u);
  EXPECT_EQ(ir::payload_size(TensorProto::FLOAT, 3), 12u);
  EXPECT_FALSE(ir::payload_size(TensorProto::STRING, 3).has_value());
  EXPECT_EQ(ir::dtype_name(ir::kInt4), "int4");
  EXPECT_EQ(ir::dtype_name(ir::kUint4), "uint4");
  EXPECT_EQ(ir::dtype_name(TensorProto::FLOAT), "float");
}

// view_of reads raw_data in place and keeps the proto alive; what it cannot read as stored it
// converts as from_proto does.
TEST(TensorTest, ViewOfReadsRawDataInPlaceAndKeepsItAlive) {
  TensorProto p = proto_of(TensorProto::FLOAT, {2, 3});
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, -0.5f, 7.0f};
  p.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  auto shared = std::make_shared<const TensorProto>(p);
  const char* bytes = shared->raw_data().data();
  auto view = Tensor::view_of(shared, kLimit);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_TRUE(view->is_view());
  EXPECT_EQ(std::as_const(*view).data<char>(), bytes);  // not copied
  EXPECT_EQ(view->bytes(), 24u);
  auto copied = Tensor::from_proto(p, kLimit);
  ASSERT_TRUE(copied.ok());
  EXPECT_FALSE(copied->is_view());
  EXPECT_TRUE(*view == *copied);
  EXPECT_EQ(view->to_proto().raw_data(), p.raw_data());
  // Copies read the same bytes, which outlive the caller's pointer to the proto.
  shared.reset();
  Tensor copy = *view;
  EXPECT_TRUE(copy.is_view());
  EXPECT_EQ(std::as_const(copy).data<char>(), bytes);
  EXPECT_TRUE(copy == *copied);
  // Writing copies the bytes first: the other views do not change.
  Tensor moved = std::move(*view);
  EXPECT_TRUE(moved.is_view());
  moved.set_double(0, 42.0);
  EXPECT_FALSE(moved.is_view());
  EXPECT_EQ(moved.get_double(0), 42.0);
  EXPECT_EQ(moved.get_double(5), 7.0);
  EXPECT_TRUE(copy == *copied);
  copy.own();
  EXPECT_FALSE(copy.is_view());
  EXPECT_TRUE(copy == *copied);
  // Too large, or data that does not match the dims: refused as from_proto refuses.
  auto p2 = std::make_shared<const TensorProto>(p);
  EXPECT_EQ(Tensor::view_of(p2, 16).status().code(), absl::StatusCode::kResourceExhausted);
  TensorProto short_data = p;
  short_data.mutable_raw_data()->resize(20);
  EXPECT_EQ(
      Tensor::view_of(std::make_shared<const TensorProto>(short_data), kLimit).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(TensorTest, ViewOfConvertsWhatItCannotReadAsStored) {
  TensorProto typed = proto_of(TensorProto::FLOAT, {3});
  for (float v : {1.0f, 2.0f, 3.0f}) typed.add_float_data(v);
  TensorProto bools = proto_of(TensorProto::BOOL, {3});
  bools.set_raw_data(std::string("\x00\x02\x01", 3));
  TensorProto int4 = proto_of(ir::kInt4, {3});
  int4.set_raw_data(std::string("\x21\x0f", 2));
  TensorProto strings = proto_of(TensorProto::STRING, {2});
  strings.add_string_data("a");
  strings.add_string_data("bc");
  for (const TensorProto* p : {&typed, &bools, &int4, &strings}) {
    auto view = Tensor::view_of(std::make_shared<const TensorProto>(*p), kLimit);
    auto copied = Tensor::from_proto(*p, kLimit);
    ASSERT_TRUE(view.ok() && copied.ok()) << p->data_type();
    EXPECT_FALSE(view->is_view()) << p->data_type();
    EXPECT_TRUE(*view == *copied) << p->data_type();
  }
}

// A view's bytes are charged to the run's budget as a copy's would be, and released with it.
TEST(TensorTest, ViewIsChargedLikeACopy) {
  TensorProto proto = proto_of(TensorProto::DOUBLE, {100});
  proto.set_raw_data(std::string(800, '\0'));
  auto p = std::make_shared<const TensorProto>(std::move(proto));
  auto budget = Budget::make(1000, 0);
  {
    BudgetScope scope(budget.get());
    auto view = Tensor::view_of(p, kLimit);
    ASSERT_TRUE(view.ok());
    EXPECT_TRUE(view->is_view());
    EXPECT_EQ(budget->live_bytes(), 800u);
    auto second = Tensor::view_of(p, kLimit);  // 1600 bytes would pass the budget
    EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(budget->live_bytes(), 800u);
  }
  EXPECT_EQ(budget->live_bytes(), 0u);
  EXPECT_EQ(budget->peak_bytes(), 800u);
}

TEST(BroadcastTest, Shapes) {
  auto s = broadcast_shape({{2, 1, 4}, {3, 1}, {}});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_FALSE(broadcast_shape({{2, 3}, {4}}).ok());
  EXPECT_EQ(*broadcast_shape({{0, 1}, {1, 5}}), (std::vector<int64_t>{0, 5}));
  EXPECT_TRUE(broadcastable_to({3, 1}, {2, 3, 4}));
  EXPECT_FALSE(broadcastable_to({2, 3, 4}, {3, 4}));
}

TEST(BroadcastTest, IteratorOffsets) {
  std::vector<int64_t> out = {2, 3};
  BroadcastIterator it(out, {{2, 1}, {3}, {2, 3}, {}});
  for (int64_t i = 0; i < 6; ++i, it.next()) {
    int64_t r = i / 3, c = i % 3;
    EXPECT_EQ(it.offset(0), r);
    EXPECT_EQ(it.offset(1), c);
    EXPECT_EQ(it.offset(2), i);
    EXPECT_EQ(it.offset(3), 0);
  }
}

TEST(KernelRegistryTest, LookupRespectsDomainAndOpset) {
  EXPECT_EQ(find_kernel("NoSuchOp", "", 17), nullptr);
  register_kernel("GraftTestOp", 3, 7, [](KernelContext&) { return absl::OkStatus(); });
  EXPECT_EQ(find_kernel("GraftTestOp", "", 2), nullptr);
  EXPECT_NE(find_kernel("GraftTestOp", "", 3), nullptr);
  EXPECT_NE(find_kernel("GraftTestOp", "ai.onnx", 7), nullptr);
  EXPECT_EQ(find_kernel("GraftTestOp", "", 8), nullptr);
  EXPECT_EQ(find_kernel("GraftTestOp", "com.microsoft", 5), nullptr);
}

// A matrix transpose takes a tiled path per element width; it must agree with the general path
// (reached here through a trailing 1 in the dims) on sizes that are not multiples of the tile.
TEST(TensorTest, TiledMatrixTransposeAgreesWithTheGeneralPath) {
  for (auto dtype : {TensorProto::UINT8, TensorProto::FLOAT16, TensorProto::FLOAT,
                     TensorProto::INT64, TensorProto::BOOL, TensorProto::DOUBLE}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{45, 70}, {1, 33}, {64, 32}}) {
      auto x = Tensor::zeros(dtype, {rows, cols}, kLimit);
      ASSERT_TRUE(x.ok());
      auto* bytes = x->data<uint8_t>();
      for (size_t i = 0; i < static_cast<size_t>(rows * cols) * x->element_size(); ++i)
        bytes[i] = static_cast<uint8_t>(i * 7 + i / 13);
      auto tiled = transposed(*x, {rows, cols}, {1, 0}, kLimit);
      auto general = transposed(*x, {rows, cols, 1}, {1, 0, 2}, kLimit);
      ASSERT_TRUE(tiled.ok() && general.ok());
      EXPECT_EQ(tiled->dims(), (std::vector<int64_t>{cols, rows}));
      const size_t n = static_cast<size_t>(rows * cols) * x->element_size();
      EXPECT_EQ(std::string(tiled->data<char>(), n), std::string(general->data<char>(), n))
          << dtype << " " << rows << "x" << cols;
    }
  }
}

// transposed(): result dim i is dims[perm[i]]; dims may insert 1s into x's own (unsqueeze).
TEST(TensorTest, TransposedMovesElements) {
  auto x = Tensor::zeros(TensorProto::INT32, {2, 3}, kLimit);
  ASSERT_TRUE(x.ok());
  for (int64_t i = 0; i < 6; ++i) x->set_int64(i, i);
  auto t = transposed(*x, {2, 3}, {1, 0}, kLimit);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dims(), (std::vector<int64_t>{3, 2}));
  std::vector<int64_t> got;
  for (int64_t i = 0; i < 6; ++i) got.push_back(t->get_int64(i));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  // Read as [1, 2, 3] and moved to [3, 1, 2]: the 1 goes in the middle, elements as above.
  auto u = transposed(*x, {1, 2, 3}, {2, 0, 1}, kLimit);
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->dims(), (std::vector<int64_t>{3, 1, 2}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(u->get_int64(i), got[static_cast<size_t>(i)]);
  // A rank-4 case against the definition out[a][b][c][d] = in[.] with in dims [2,1,3,2].
  auto y = Tensor::zeros(TensorProto::FLOAT, {2, 1, 3, 2}, kLimit);
  ASSERT_TRUE(y.ok());
  for (int64_t i = 0; i < 12; ++i) y->set_double(i, static_cast<double>(i));
  const std::vector<int64_t> perm{3, 0, 2, 1};
  auto z = transposed(*y, {2, 1, 3, 2}, perm, kLimit);
  ASSERT_TRUE(z.ok());
  const std::vector<int64_t> in_dims{2, 1, 3, 2};
  int64_t k = 0;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t d = 0; d < 1; ++d) {
          // Result index (a, b, c, d) is source index i with i[perm[j]] = result[j].
          int64_t src[4];
          src[perm[0]] = a;
          src[perm[1]] = b;
          src[perm[2]] = c;
          src[perm[3]] = d;
          const int64_t flat = ((src[0] * 1 + src[1]) * 3 + src[2]) * 2 + src[3];
          EXPECT_EQ(z->get_double(k++), static_cast<double>(flat));
        }
}

TEST(TensorTest, TransposedRefusesBadArguments) {
  auto x = Tensor::zeros(TensorProto::FLOAT, {2, 3}, kLimit);
  ASSERT_TRUE(x.ok());
  EXPECT_FALSE(transposed(*x, {2, 3}, {0, 0}, kLimit).ok());
  EXPECT_FALSE(transposed(*x, {2, 3}, {0, 2}, kLimit).ok());
  EXPECT_FALSE(transposed(*x, {2, 3}, {0}, kLimit).ok());
  EXPECT_FALSE(transposed(*x, {3, 3}, {1, 0}, kLimit).ok());
  EXPECT_FALSE(transposed(*x, {-2, -3}, {1, 0}, kLimit).ok());
  EXPECT_FALSE(transposed(*x, {2, 3}, {1, 0}, 8).ok());  // over max_bytes
}

}  // namespace
}  // namespace graft::eval
