#include "qkv/io/safetensors.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "io/io_test_util.hpp"

namespace qkv::io {
namespace {

using test::bytes_of;
using test::expect_data_error;
using test::TempDir;
using test::write_raw;

// A safetensors file from a literal header and data section.
std::string st_bytes(const std::string& header, const std::string& data) {
  return bytes_of(static_cast<uint64_t>(header.size())) + header + data;
}

std::string f32_bytes(const std::vector<float>& v) { return bytes_of(v); }

std::vector<float> read_all(const SafetensorsFile& f, const std::string& name) {
  const TensorInfo* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  std::vector<float> out(static_cast<std::size_t>(t->numel()));
  f.read_f32(*t, out.data());
  return out;
}

TEST(Safetensors, RoundTripF32WithMetadataScalarAndEmptyTensors) {
  TempDir tmp;
  const std::string path = tmp.path("m.safetensors");
  const std::vector<float> a = {1, -2, 3.5f, 4, 5, 6}, s = {42.0f}, b = {0.25f, -0.0f, 1e-40f};
  write_safetensors(path,
                    {{"a", {2, 3}, a.data()}, {"scalar", {}, s.data()}, {"empty", {0, 7}, nullptr}, {"b", {3}, b.data()}},
                    {{"format", "pt"}, {"config", "{\"n_embd\": 4}"}});
  const std::string raw = test::read_raw(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start 8-byte aligned";
  EXPECT_EQ(raw[8 + n - 1] == ' ' || raw[8 + n - 1] == '}', true);

  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("config"), "{\"n_embd\": 4}");
  ASSERT_EQ(f.tensors().size(), 4u);
  for (std::size_t i = 1; i < f.tensors().size(); ++i) EXPECT_LE(f.tensors()[i - 1].begin, f.tensors()[i].begin);
  const TensorInfo* ta = f.find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, DType::F32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->numel(), 6);
  EXPECT_EQ(ta->end - ta->begin, 24u);
  const float* view = f.f32_view(*ta);
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(std::vector<float>(view, view + 6), a);
  EXPECT_EQ(read_all(f, "a"), a);
  EXPECT_EQ(read_all(f, "scalar"), s);
  EXPECT_EQ(f.find("scalar")->numel(), 1);
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_EQ(read_all(f, "empty").size(), 0u);
  const auto rb = read_all(f, "b");
  ASSERT_EQ(rb.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(std::bit_cast<uint32_t>(rb[i]), std::bit_cast<uint32_t>(b[i]));
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"m.safetensors"});  // no temporary left
}

TEST(Safetensors, RoundTripF16AndBF16ExactOnSpecialValues) {
  TempDir tmp;
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> v = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, inf, -inf, std::nanf(""),
                                std::ldexp(1.0f, -24), std::ldexp(5.0f, -24), 0.1f, 1e10f, 3.14159265f};
  for (DType dt : {DType::F16, DType::BF16}) {
    const std::string path = tmp.path(std::string("h_") + dtype_name(dt) + ".safetensors");
    write_safetensors(path, {{"v", {static_cast<int64_t>(v.size())}, v.data()}}, {}, dt);
    const SafetensorsFile f = SafetensorsFile::open(path);
    const TensorInfo* t = f.find("v");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, dt);
    EXPECT_EQ(t->end - t->begin, 2 * v.size());
    EXPECT_EQ(f.f32_view(*t), nullptr) << "no F32 view of a half tensor";
    EXPECT_TRUE(f.metadata().empty());
    std::vector<float> out(v.size());
    f.read_f32(*t, out.data());
    for (std::size_t i = 0; i < v.size(); ++i) {
      const float want = dt == DType::F16 ? f16_to_float(float_to_f16(v[i])) : bf16_to_float(float_to_bf16(v[i]));
      EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(want)) << dtype_name(dt) << " " << i;
    }
    // Values representable in the narrow type come back bit-exactly; special values stay special.
    EXPECT_EQ(out[2], 1.0f);
    EXPECT_EQ(out[3], -2.5f);
    EXPECT_TRUE(std::signbit(out[1]));
    EXPECT_EQ(out[5], inf);
    EXPECT_EQ(out[6], -inf);
    EXPECT_TRUE(std::isnan(out[7]));
    if (dt == DType::F16) {
      EXPECT_EQ(out[4], 65504.0f);
      EXPECT_EQ(out[8], std::ldexp(1.0f, -24));  // subnormals survive exactly
      EXPECT_EQ(out[9], std::ldexp(5.0f, -24));
      EXPECT_EQ(out[11], inf);  // 1e10 overflows binary16
    } else {
      EXPECT_EQ(out[11], bf16_to_float(float_to_bf16(1e10f)));
      EXPECT_NE(out[11], inf);
    }
  }
}

TEST(Safetensors, UnalignedDataSectionIsReadCorrectly) {
  TempDir tmp;
  // A header of odd length puts the data section at an odd file offset (as in GPT-2's release).
  std::string header =
      R"({"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"h":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},"g":{"dtype":"F16","shape":[1],"data_offsets":[22,24]}})";
  if ((8 + header.size()) % 2 == 0) header += ' ';
  ASSERT_EQ((8 + header.size()) % 2, 1u);
  const std::vector<float> x = {1.5f, -2.0f, 3.0e-3f, 7.0f};
  const std::vector<uint16_t> h = {float_to_bf16(1.0f), float_to_bf16(-3.0f), float_to_bf16(0.5f)};
  const std::vector<uint16_t> g = {float_to_f16(-0.75f)};
  const std::string path = tmp.path("odd.safetensors");
  write_raw(path, st_bytes(header, f32_bytes(x) + bytes_of(h) + bytes_of(g)));
  const SafetensorsFile f = SafetensorsFile::open(path);
  const TensorInfo* t = f.find("x");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(f.f32_view(*t), nullptr) << "a misaligned F32 tensor must not be viewed in place";
  EXPECT_EQ(read_all(f, "x"), x);
  EXPECT_EQ(read_all(f, "h"), (std::vector<float>{1.0f, -3.0f, 0.5f}));
  EXPECT_EQ(read_all(f, "g"), (std::vector<float>{-0.75f}));
  EXPECT_EQ(f.tensors()[0].name, "x");
  EXPECT_EQ(f.tensors()[1].name, "h");
  EXPECT_EQ(f.tensors()[2].name, "g");
}

TEST(Safetensors, TensorsAreSortedByOffsetWhateverTheHeaderOrder) {
  TempDir tmp;
  const std::string header =
      R"({"late":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"__metadata__":{"k":"v"},"early":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const std::string path = tmp.path("order.safetensors");
  write_raw(path, st_bytes(header, f32_bytes({10.0f, 20.0f})));
  const SafetensorsFile f = SafetensorsFile::open(path);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "early");
  EXPECT_EQ(f.tensors()[1].name, "late");
  EXPECT_EQ(read_all(f, "late"), std::vector<float>{20.0f});
  EXPECT_EQ(f.metadata().at("k"), "v");
}

TEST(Safetensors, MoveKeepsTheMappingAlive) {
  TempDir tmp;
  const std::string path = tmp.path("mv.safetensors");
  const std::vector<float> a = {1, 2, 3};
  write_safetensors(path, {{"a", {3}, a.data()}}, {});
  SafetensorsFile f = SafetensorsFile::open(path);
  SafetensorsFile g = std::move(f);
  EXPECT_EQ(read_all(g, "a"), a);
  SafetensorsFile h = SafetensorsFile::open(path);
  h = std::move(g);
  EXPECT_EQ(read_all(h, "a"), a);
}

// ---- malformed inputs: each must be a qkv::Error naming the file and the problem ----

class SafetensorsBad : public ::testing::Test {
 protected:
  // Writes `bytes` and expects open() to fail with a message holding the path and `parts`.
  void expect_bad(const std::string& bytes, std::initializer_list<std::string> parts) {
    const std::string path = tmp_.path("bad.safetensors");
    write_raw(path, bytes);
    expect_data_error([&] { SafetensorsFile::open(path); }, {path});
    expect_data_error([&] { SafetensorsFile::open(path); }, parts);
  }
  TempDir tmp_;
};

const std::string kOne = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST_F(SafetensorsBad, MissingFile) {
  expect_data_error([&] { SafetensorsFile::open(tmp_.path("nope.safetensors")); }, {"nope.safetensors", "cannot open"});
}
TEST_F(SafetensorsBad, Directory) {
  expect_data_error([&] { SafetensorsFile::open(tmp_.dir().string()); }, {tmp_.dir().string(), "not a regular file"});
}
TEST_F(SafetensorsBad, EmptyFile) { expect_bad("", {"file is 0 bytes", "expected at least 8"}); }
TEST_F(SafetensorsBad, TinyFile) { expect_bad("abc", {"file is 3 bytes", "expected at least 8"}); }
TEST_F(SafetensorsBad, HeaderLongerThanFile) {
  expect_bad(bytes_of(uint64_t{1000}) + "{}", {"header length is 1000 bytes", "only 2 bytes follow"});
}
TEST_F(SafetensorsBad, AbsurdHeaderLength) {
  expect_bad(bytes_of(uint64_t{1} << 63) + "{}", {"header length is 9223372036854775808", "at most 100000000"});
}
TEST_F(SafetensorsBad, HeaderNotUtf8) {
  expect_bad(st_bytes("{\"t\xff\":{}}", ""), {"not valid UTF-8", "byte 3"});
}
TEST_F(SafetensorsBad, HeaderNotJson) { expect_bad(st_bytes("{\"t\": nope}", ""), {"not valid JSON"}); }
TEST_F(SafetensorsBad, HeaderNotObject) { expect_bad(st_bytes("[1, 2]", ""), {"JSON object", "'['"}); }
TEST_F(SafetensorsBad, EmptyHeader) { expect_bad(st_bytes("", ""), {"JSON object", "empty header"}); }
TEST_F(SafetensorsBad, EntryNotObject) { expect_bad(st_bytes(R"({"t": 5})", ""), {"tensor \"t\"", "found number 5"}); }
TEST_F(SafetensorsBad, DeeplyNestedHeaderIsAnErrorNotAStackOverflow) {
  const std::string deep = "{\"t\":" + std::string(1000000, '[') + "1" + std::string(1000000, ']') + "}";
  expect_bad(st_bytes(deep, ""), {"tensor \"t\"", "found array [[[...]]]"});
}
TEST_F(SafetensorsBad, DuplicateKey) {
  expect_bad(st_bytes(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                      f32_bytes({1})),
             {"\"t\" twice"});
}
TEST_F(SafetensorsBad, MetadataNotStrings) {
  expect_bad(st_bytes(R"({"__metadata__":{"n":3}})", ""), {"__metadata__ key \"n\"", "expected a string", "found number 3"});
}
TEST_F(SafetensorsBad, UnknownDtype) {
  expect_bad(st_bytes(R"({"t":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
             {"tensor \"t\"", "unknown dtype \"Q7\"", "expected F32, F16 or BF16"});
}
TEST_F(SafetensorsBad, UnsupportedFormatDtype) {
  expect_bad(st_bytes(R"({"t":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')),
             {"tensor \"t\"", "dtype I64 is not supported"});
}
TEST_F(SafetensorsBad, DtypeWrongJsonType) {
  expect_bad(st_bytes(R"({"t":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
             {"tensor \"t\"", "dtype: expected a string", "found number 4"});
}
TEST_F(SafetensorsBad, MissingOffsets) {
  expect_bad(st_bytes(R"({"t":{"dtype":"F32","shape":[1]}})", ""), {"tensor \"t\"", "missing \"data_offsets\""});
}
TEST_F(SafetensorsBad, OffsetsWrongArity) {
  expect_bad(st_bytes(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", std::string(4, '\0')),
             {"tensor \"t\"", "expected an array [begin, end]", "found array [0]"});
}
TEST_F(SafetensorsBad, OffsetsPastEnd) {
  expect_bad(st_bytes(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f32_bytes({1, 2})),
             {"tensor \"t\"", "data_offsets [0, 16]", "past the end of the data section, which is 8 bytes"});
}
TEST_F(SafetensorsBad, OffsetsOverlap) {
  expect_bad(st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      f32_bytes({1, 2, 3})),
             {"tensor \"b\"", "overlap tensor \"a\"", "expected begin 8, found 4"});
}
TEST_F(SafetensorsBad, OffsetsHole) {
  expect_bad(st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                      f32_bytes({1, 2, 3})),
             {"tensor \"b\"", "hole", "expected it to begin at 4", "found 8"});
}
TEST_F(SafetensorsBad, HoleAtStart) {
  expect_bad(st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32_bytes({1, 2})),
             {"tensor \"a\"", "hole", "expected it to begin at 0", "found 4"});
}
TEST_F(SafetensorsBad, EndBeforeBegin) {
  expect_bad(st_bytes(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", f32_bytes({1, 2})),
             {"tensor \"a\"", "end is before begin"});
}
TEST_F(SafetensorsBad, ShapeDoesNotMatchBytes) {
  expect_bad(st_bytes(R"({"t":{"dtype":"F16","shape":[2,3],"data_offsets":[0,24]}})", std::string(24, '\0')),
             {"tensor \"t\"", "span 24 bytes, expected 12", "shape [2, 3] of F16"});
}
TEST_F(SafetensorsBad, NegativeShape) {
  expect_bad(st_bytes(R"({"t":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,0]}})", ""),
             {"tensor \"t\"", "shape[0] is number -1", "expected a non-negative integer"});
}
TEST_F(SafetensorsBad, FractionalShape) {
  expect_bad(st_bytes(R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,0]}})", ""),
             {"tensor \"t\"", "shape[0]", "expected a non-negative integer", "found number 1.5"});
}
TEST_F(SafetensorsBad, OverflowingShape) {
  expect_bad(st_bytes(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
             {"tensor \"t\"", "shape [4294967296, 4294967296] of F32 overflows"});
  expect_bad(st_bytes(R"({"t":{"dtype":"F32","shape":[3000000000000000000],"data_offsets":[0,0]}})", ""),
             {"tensor \"t\"", "overflows"});
  expect_bad(st_bytes(R"({"t":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,0]}})", ""),
             {"tensor \"t\"", "shape[0] is 18446744073709551615, too large"});
}
TEST_F(SafetensorsBad, TrailingBytes) {
  expect_bad(st_bytes(kOne, f32_bytes({1, 2}) + "xyz"), {"data section is 11 bytes", "cover 8", "3 trailing bytes", "after tensor \"t\""});
}
TEST_F(SafetensorsBad, TrailingBytesWithoutTensors) {
  expect_bad(st_bytes("{}", "zz"), {"data section is 2 bytes", "2 trailing bytes"});
}
TEST_F(SafetensorsBad, TruncatedData) {
  expect_bad(st_bytes(kOne, f32_bytes({1})), {"tensor \"t\"", "past the end of the data section, which is 4 bytes", "truncated"});
}

TEST(SafetensorsWrite, UnwritableDirectoryLeavesNoFile) {
  TempDir tmp;
  const std::vector<float> a = {1, 2};
  const std::string path = tmp.path("no/such/dir/x.safetensors");
  expect_data_error([&] { write_safetensors(path, {{"a", {2}, a.data()}}, {}); }, {path, "No such file or directory"});
  EXPECT_TRUE(tmp.entries().empty());
}

TEST(SafetensorsWrite, TargetIsADirectoryLeavesNoTemporary) {
  TempDir tmp;
  const std::vector<float> a = {1, 2};
  const std::string path = tmp.path("adir");
  std::filesystem::create_directory(path);
  expect_data_error([&] { write_safetensors(path, {{"a", {2}, a.data()}}, {}); }, {path, "cannot write"});
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"adir"});
}

TEST(SafetensorsWrite, BadTensorsAreRejectedBeforeWriting) {
  TempDir tmp;
  const std::string path = tmp.path("x.safetensors");
  const std::vector<float> a = {1, 2};
  expect_data_error([&] { write_safetensors(path, {{"a", {2}, a.data()}, {"a", {2}, a.data()}}, {}); },
                    {path, "tensor \"a\"", "twice"});
  expect_data_error([&] { write_safetensors(path, {{"a", {-2}, a.data()}}, {}); }, {path, "tensor \"a\"", "invalid shape [-2]"});
  expect_data_error([&] { write_safetensors(path, {{"a", {2}, nullptr}}, {}); }, {path, "tensor \"a\"", "null"});
  expect_data_error([&] { write_safetensors(path, {{"__metadata__", {2}, a.data()}}, {}); }, {path, "reserved"});
  EXPECT_TRUE(tmp.entries().empty());
}

}  // namespace
}  // namespace qkv::io
