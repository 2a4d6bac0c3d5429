#include "qkv/io/npy.hpp"

#include <gtest/gtest.h>

#include <limits>

#include "io/io_test_util.hpp"
#include "qkv/io/half.hpp"

namespace qkv::io {
namespace {

using test::bytes_of;
using test::expect_data_error;
using test::TempDir;
using test::write_raw;

// A .npy file from a header dict (padded like NumPy does) and raw data, format `major`.0.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  const std::size_t pre = major == 1 ? 10 : 12;
  std::string h = dict;
  while ((pre + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  if (major == 1) out += bytes_of(static_cast<uint16_t>(h.size()));
  else out += bytes_of(static_cast<uint32_t>(h.size()));
  return out + h + data;
}

TEST(Npy, RoundTripF32) {
  TempDir tmp;
  const std::string path = tmp.path("a.npy");
  const std::vector<float> v = {1.5f, -2.0f, 0.1f, 1e-40f, 3.0f, 4.0f};
  write_npy(path, {2, 3}, v.data());
  const std::string raw = test::read_raw(path);
  EXPECT_EQ(raw.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const uint16_t hlen = static_cast<uint16_t>(static_cast<unsigned char>(raw[8]) | (static_cast<unsigned char>(raw[9]) << 8));
  EXPECT_EQ((10 + hlen) % 64, 0);
  EXPECT_EQ(raw[10 + hlen - 1], '\n');
  EXPECT_NE(raw.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"), std::string::npos);
  const NpyArray a = read_npy(path);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(a.data.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a.data[i], static_cast<double>(v[i]));
  EXPECT_EQ(tmp.entries(), std::vector<std::string>{"a.npy"});
}

TEST(Npy, RoundTripI32OneDimAndScalarAndEmpty) {
  TempDir tmp;
  const std::vector<int32_t> v = {-2147483647 - 1, -1, 0, 7, 2147483647};
  write_npy(tmp.path("i.npy"), {5}, v.data());
  EXPECT_NE(test::read_raw(tmp.path("i.npy")).find("'descr': '<i4'"), std::string::npos);
  EXPECT_NE(test::read_raw(tmp.path("i.npy")).find("'shape': (5,)"), std::string::npos);
  const NpyArray a = read_npy(tmp.path("i.npy"));
  EXPECT_EQ(a.shape, std::vector<int64_t>{5});
  EXPECT_EQ(a.data, (std::vector<double>{-2147483648.0, -1, 0, 7, 2147483647.0}));

  const float s = 9.0f;
  write_npy(tmp.path("s.npy"), {}, &s);
  const NpyArray b = read_npy(tmp.path("s.npy"));
  EXPECT_TRUE(b.shape.empty());
  EXPECT_EQ(b.data, std::vector<double>{9.0});

  write_npy(tmp.path("e.npy"), std::vector<int64_t>{0, 4}, static_cast<const float*>(nullptr));
  const NpyArray c = read_npy(tmp.path("e.npy"));
  EXPECT_EQ(c.shape, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(c.data.empty());
}

TEST(Npy, ReadsAllDtypesAndVersions) {
  TempDir tmp;
  struct Case {
    std::string descr, data;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {"<f8", bytes_of(std::vector<double>{0.1, -1e300}), {0.1, -1e300}},
      {"<f2", bytes_of(std::vector<uint16_t>{float_to_f16(0.5f), 0x7c00}), {0.5, std::numeric_limits<double>::infinity()}},
      {"<i8", bytes_of(std::vector<int64_t>{-5, int64_t{1} << 40}), {-5, 1099511627776.0}},
      {"|u1", std::string("\x00\xff", 2), {0, 255}},
      {"|i1", std::string("\x80\x7f", 2), {-128, 127}},
      {"<u2", bytes_of(std::vector<uint16_t>{65535, 1}), {65535, 1}},
      {"<i2", bytes_of(std::vector<int16_t>{-32768, 3}), {-32768, 3}},
      {"<u4", bytes_of(std::vector<uint32_t>{4294967295u, 0}), {4294967295.0, 0}},
      {"<u8", bytes_of(std::vector<uint64_t>{7, 1}), {7, 1}},
      {"|b1", std::string("\x01\x00", 2), {1, 0}},
  };
  for (int major : {1, 2, 3}) {
    for (const Case& c : cases) {
      const std::string path = tmp.path("d.npy");
      write_raw(path, npy_bytes("{'descr': '" + c.descr + "', 'fortran_order': False, 'shape': (2,), }", c.data, major));
      const NpyArray a = read_npy(path);
      EXPECT_EQ(a.shape, std::vector<int64_t>{2}) << c.descr;
      EXPECT_EQ(a.data, c.want) << c.descr << " v" << major;
    }
  }
  // Key order and quoting as other writers produce it, no trailing comma, odd alignment.
  write_raw(tmp.path("o.npy"), npy_bytes("{\"shape\": (1, 2), \"fortran_order\": False, \"descr\": \"<f4\"}",
                                         bytes_of(std::vector<float>{1, 2})));
  EXPECT_EQ(read_npy(tmp.path("o.npy")).data, (std::vector<double>{1, 2}));
}

class NpyBad : public ::testing::Test {
 protected:
  void expect_bad(const std::string& bytes, std::initializer_list<std::string> parts) {
    const std::string path = tmp_.path("bad.npy");
    write_raw(path, bytes);
    expect_data_error([&] { read_npy(path); }, {path});
    expect_data_error([&] { read_npy(path); }, parts);
  }
  TempDir tmp_;
};

const std::string kF4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";

TEST_F(NpyBad, EmptyFile) { expect_bad("", {"file is 0 bytes", "expected at least 10"}); }
TEST_F(NpyBad, BadMagic) { expect_bad("PK\x03\x04 not npy at all", {"not a .npy file"}); }
TEST_F(NpyBad, UnknownVersion) {
  std::string b = npy_bytes(kF4, std::string(16, '\0'));
  b[6] = 4;
  expect_bad(b, {"format version 4.0", "expected 1.0, 2.0 or 3.0"});
}
TEST_F(NpyBad, HeaderLongerThanFile) {
  std::string b = npy_bytes(kF4, "");
  b[8] = '\xff';
  b[9] = '\xff';
  expect_bad(b, {"header length is 65535 bytes", "only 118 bytes follow"});
}
TEST_F(NpyBad, AbsurdV2HeaderLength) {
  std::string b = npy_bytes(kF4, "", 2);
  b.replace(8, 4, bytes_of(uint32_t{0xffffffffu}));
  expect_bad(b, {"header length is 4294967295 bytes"});
}
TEST_F(NpyBad, FortranOrder) {
  expect_bad(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", std::string(16, '\0')),
             {"fortran_order is True", "C-order"});
}
TEST_F(NpyBad, BigEndian) {
  expect_bad(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", std::string(8, '\0')),
             {"'>f4' is big-endian"});
}
TEST_F(NpyBad, UnsupportedDtype) {
  expect_bad(npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')),
             {"unsupported dtype '<c8'"});
}
TEST_F(NpyBad, StructuredDtype) {
  expect_bad(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", std::string(8, '\0')),
             {"structured dtype"});
}
TEST_F(NpyBad, MalformedHeader) {
  expect_bad(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2) ", std::string(16, '\0')),
             {".npy header", "expected ',' or '}'"});
  expect_bad(npy_bytes("{'descr': '<f4', 'shape': (2, 2), }", std::string(16, '\0')), {"missing key 'fortran_order'"});
  expect_bad(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", std::string(16, '\0')),
             {"unexpected key 'x'"});
  expect_bad(npy_bytes("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 2)}", std::string(16, '\0')),
             {"expected True or False"});
}
TEST_F(NpyBad, NegativeShape) {
  expect_bad(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 2), }", ""), {"negative dimension"});
}
TEST_F(NpyBad, OverflowingShape) {
  expect_bad(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", ""),
             {"overflows int64"});
  expect_bad(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", ""),
             {"shape [4294967296, 4294967296] of <f8 overflows"});
}
TEST_F(NpyBad, TruncatedData) {
  expect_bad(npy_bytes(kF4, std::string(12, '\0')), {"shape [2, 2] of <f4 needs 16 data bytes, found 12", "truncated"});
}
TEST_F(NpyBad, TrailingBytes) {
  expect_bad(npy_bytes(kF4, std::string(20, '\0')), {"needs 16 data bytes, found 20", "trailing"});
}

TEST(NpyWrite, UnwritableDirectoryLeavesNoFile) {
  TempDir tmp;
  const float v = 1;
  const std::string path = tmp.path("missing/x.npy");
  expect_data_error([&] { write_npy(path, {1}, &v); }, {path, "No such file or directory"});
  expect_data_error([&] { write_npy(tmp.path("y.npy"), {-1}, &v); }, {"y.npy", "invalid shape [-1]"});
  EXPECT_TRUE(tmp.entries().empty());
}

}  // namespace
}  // namespace qkv::io
