#include "minimakv/gguf_reader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "minimakv/scalar_formats.h"
#include "runtime/gguf_test_writer.h"

namespace minimakv {
namespace {

using testing::GgufTestWriter;

void PutU16(std::vector<uint8_t>* b, size_t at, uint16_t v) {
  (*b)[at] = uint8_t(v & 0xFF);
  (*b)[at + 1] = uint8_t(v >> 8);
}

// A small file with every metadata value type, nested and plain arrays, and three tensors.
std::vector<uint8_t> SampleFile() {
  GgufTestWriter w(64);
  w.AddU32("general.alignment", 64);
  w.AddString("general.architecture", "llama");
  w.AddU8("t.u8", 200);
  w.AddI8("t.i8", -100);
  w.AddU16("t.u16", 60000);
  w.AddI16("t.i16", -30000);
  w.AddU32("t.u32", 4000000000u);
  w.AddI32("t.i32", -2000000000);
  w.AddF32("t.f32", 1.5f);
  w.AddBool("t.bool", true);
  w.AddU64("t.u64", 1ull << 40);
  w.AddI64("t.i64", -(1ll << 40));
  w.AddF64("t.f64", -2.25);
  w.AddStringArray("t.strings", {"a", "", "h\xC3\xA9llo"});
  w.AddI32Array("t.ints", {1, -2, 3});
  w.AddF32Array("t.floats", {0.5f, -0.25f});
  w.AddF32Tensor("a.weight", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  w.AddF32Tensor("b.weight", {3}, {9, 10, 11});
  std::vector<uint8_t> q8(34, 0);  // one Q8_0 block: d = 0.5, q[j] = j - 16
  PutU16(&q8, 0, FloatToFp16(0.5f));
  for (int j = 0; j < 32; ++j) q8[2 + j] = uint8_t(int8_t(j - 16));
  w.AddTensor("c.weight", {32}, 8, q8);
  return w.Build();
}

TEST(GgufReader, ParsesEveryValueTypeAndTensors) {
  const std::vector<uint8_t> bytes = SampleFile();
  std::unique_ptr<GgufFile> f;
  ASSERT_TRUE(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).ok());
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 64u);
  std::string arch;
  ASSERT_TRUE(f->GetString("general.architecture", &arch).ok());
  EXPECT_EQ(arch, "llama");
  EXPECT_EQ(f->Find("t.u8")->as_uint, 200u);
  EXPECT_EQ(f->Find("t.i8")->as_int, -100);
  EXPECT_EQ(f->Find("t.u16")->as_uint, 60000u);
  EXPECT_EQ(f->Find("t.i16")->as_int, -30000);
  uint32_t u32 = 0;
  ASSERT_TRUE(f->GetUint32("t.u32", &u32).ok());
  EXPECT_EQ(u32, 4000000000u);
  EXPECT_EQ(f->Find("t.i32")->as_int, -2000000000);
  float f32 = 0;
  ASSERT_TRUE(f->GetFloat32("t.f32", &f32).ok());
  EXPECT_EQ(f32, 1.5f);
  bool b = false;
  ASSERT_TRUE(f->GetBool("t.bool", &b).ok());
  EXPECT_TRUE(b);
  EXPECT_EQ(f->Find("t.u64")->as_uint, 1ull << 40);
  EXPECT_EQ(f->Find("t.i64")->as_int, -(1ll << 40));
  EXPECT_EQ(f->Find("t.f64")->as_float, -2.25);
  const std::vector<std::string>* strings = nullptr;
  ASSERT_TRUE(f->GetStringArray("t.strings", &strings).ok());
  EXPECT_EQ(*strings, (std::vector<std::string>{"a", "", "h\xC3\xA9llo"}));
  std::vector<int64_t> ints;
  ASSERT_TRUE(f->GetIntArray("t.ints", &ints).ok());
  EXPECT_EQ(ints, (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f->Find("t.floats")->floats, (std::vector<double>{0.5, -0.25}));

  // Wrong-type and missing lookups are errors that name the key.
  Status s = f->GetString("t.u32", &arch);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("t.u32"), std::string::npos);
  EXPECT_EQ(f->GetUint32("t.i32", &u32).code(), StatusCode::kInvalidArgument);  // negative
  EXPECT_EQ(f->GetString("nope", &arch).code(), StatusCode::kNotFound);

  ASSERT_EQ(f->tensors().size(), 3u);
  const GgufTensorInfo* a = f->FindTensor("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dims, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a->rows(), 2);
  EXPECT_EQ(a->size_bytes, 32u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 64, reinterpret_cast<uintptr_t>(f->tensors()[0].data) % 64);
  float values[8];
  ASSERT_TRUE(DequantizeToFloat(a->type, a->data, 8, values).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(values[i], float(i + 1));
  const GgufTensorInfo* c = f->FindTensor("c.weight");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->type, GgmlType::kQ8_0);
  float q[32];
  ASSERT_TRUE(DequantizeToFloat(c->type, c->data, 32, q).ok());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(q[j], 0.5f * float(j - 16));
  EXPECT_EQ(f->FindTensor("missing"), nullptr);
}

TEST(GgufReader, OpensFileFromDiskWithMmap) {
  const std::vector<uint8_t> bytes = SampleFile();
  const std::string path = minimakv::testing::UniqueTempPath("gguf_reader_test");
  FILE* fp = std::fopen(path.c_str(), "wb");
  ASSERT_NE(fp, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), fp), bytes.size());
  std::fclose(fp);
  std::unique_ptr<GgufFile> f;
  ASSERT_TRUE(GgufFile::Open(path, &f).ok());
  EXPECT_EQ(f->tensors().size(), 3u);
  std::remove(path.c_str());
  EXPECT_EQ(GgufFile::Open(path, &f).code(), StatusCode::kNotFound);
}

// ---- dequantization: each expected value is computed from the block layout written independently ----
uint8_t RandByte(std::mt19937* rng) { return uint8_t((*rng)() & 0xFF); }

TEST(GgufDequantize, Q4_0AndQ4_1) {
  std::mt19937 rng(1);
  std::vector<uint8_t> b0(18), b1(20);
  for (auto& x : b0) x = RandByte(&rng);
  for (auto& x : b1) x = RandByte(&rng);
  PutU16(&b0, 0, FloatToFp16(0.125f));
  PutU16(&b1, 0, FloatToFp16(0.25f));
  PutU16(&b1, 2, FloatToFp16(-1.5f));
  float y0[32], y1[32];
  ASSERT_TRUE(DequantizeToFloat(GgmlType::kQ4_0, b0.data(), 32, y0).ok());
  ASSERT_TRUE(DequantizeToFloat(GgmlType::kQ4_1, b1.data(), 32, y1).ok());
  for (int i = 0; i < 32; ++i) {
    // element i < 16 is the low nibble of byte i, element i >= 16 the high nibble of byte i - 16
    const int n0 = i < 16 ? (b0[2 + i] & 15) : (b0[2 + i - 16] >> 4);
    const int n1 = i < 16 ? (b1[4 + i] & 15) : (b1[4 + i - 16] >> 4);
    EXPECT_EQ(y0[i], 0.125f * float(n0 - 8)) << i;
    EXPECT_EQ(y1[i], 0.25f * float(n1) - 1.5f) << i;
  }
  EXPECT_EQ(DequantizeToFloat(GgmlType::kQ4_1, b1.data(), 31, y1).code(), StatusCode::kInvalidArgument);
}

// Packs 8 (scale, min) 6-bit pairs the way Q4_K/Q5_K store them.
void PackKScales(const int sc[8], const int mn[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = uint8_t((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

TEST(GgufDequantize, Q4_KAndQ5_K) {
  std::mt19937 rng(2);
  const float d = 0.0625f, dmin = 0.03125f;
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = int(rng() % 64);
    mn[j] = int(rng() % 64);
  }
  std::vector<uint8_t> b4(144), b5(176);
  for (auto& x : b4) x = RandByte(&rng);
  for (auto& x : b5) x = RandByte(&rng);
  PutU16(&b4, 0, FloatToFp16(d));
  PutU16(&b4, 2, FloatToFp16(dmin));
  PackKScales(sc, mn, &b4[4]);
  PutU16(&b5, 0, FloatToFp16(d));
  PutU16(&b5, 2, FloatToFp16(dmin));
  PackKScales(sc, mn, &b5[4]);
  std::vector<float> y4(256), y5(256);
  ASSERT_TRUE(DequantizeToFloat(GgmlType::kQ4_K, b4.data(), 256, y4.data()).ok());
  ASSERT_TRUE(DequantizeToFloat(GgmlType::kQ5_K, b5.data(), 256, y5.data()).ok());
  for (int i = 0; i < 256; ++i) {
    const int sub = i / 32, l = i % 32, byte = (sub / 2) * 32 + l;
    const int n4 = sub % 2 == 0 ? (b4[16 + byte] & 15) : (b4[16 + byte] >> 4);
    EXPECT_EQ(y4[i], d * float(sc[sub]) * float(n4) - dmin * float(mn[sub])) << i;
    const uint8_t* qh = &b5[16];
    const uint8_t* qs = &b5[48];
    const int n5 = (sub % 2 == 0 ? (qs[byte] & 15) : (qs[byte] >> 4)) + (((qh[l] >> sub) & 1) << 4);
    EXPECT_EQ(y5[i], d * float(sc[sub]) * float(n5) - dmin * float(mn[sub])) << i;
  }
}

TEST(GgufDequantize, Q6_K) {
  std::mt19937 rng(3);
  std::vector<uint8_t> b(210);
  for (auto& x : b) x = RandByte(&rng);
  const float d = 0.01f;
  PutU16(&b, 208, FloatToFp16(d));
  const float dh = Fp16ToFloat(FloatToFp16(d));
  std::vector<float> y(256);
  ASSERT_TRUE(DequantizeToFloat(GgmlType::kQ6_K, b.data(), 256, y.data()).ok());
  const uint8_t* ql = &b[0];
  const uint8_t* qh = &b[128];
  const int8_t* scales = reinterpret_cast<const int8_t*>(&b[192]);
  for (int i = 0; i < 256; ++i) {
    const int half = i / 128, r = i % 128, k = r / 32, l = r % 32;
    const int low = (ql[half * 64 + l + 32 * (k % 2)] >> (4 * (k / 2))) & 15;
    const int high = (qh[half * 32 + l] >> (2 * k)) & 3;
    const int q = (low | (high << 4)) - 32;
    EXPECT_EQ(y[i], dh * float(scales[half * 8 + r / 16]) * float(q)) << i;
  }
}

TEST(GgufDequantize, F16AndBf16) {
  std::vector<uint8_t> h(4), bf(4);
  PutU16(&h, 0, FloatToFp16(-3.5f));
  PutU16(&h, 2, FloatToFp16(65504.0f));
  PutU16(&bf, 0, FloatToBf16(1.0e20f));
  PutU16(&bf, 2, FloatToBf16(-0.5f));
  float y[2];
  ASSERT_TRUE(DequantizeToFloat(GgmlType::kF16, h.data(), 2, y).ok());
  EXPECT_EQ(y[0], -3.5f);
  EXPECT_EQ(y[1], 65504.0f);
  ASSERT_TRUE(DequantizeToFloat(GgmlType::kBf16, bf.data(), 2, y).ok());
  EXPECT_EQ(y[0], Bf16ToFloat(FloatToBf16(1.0e20f)));
  EXPECT_EQ(y[1], -0.5f);
}

// ---- malformed files: a clear error, never a crash or an out-of-bounds read (run under ASan in CI) ----
TEST(GgufReader, RejectsSpecificCorruptions) {
  std::unique_ptr<GgufFile> f;
  std::vector<uint8_t> bytes = SampleFile();
  bytes[0] = 'X';
  EXPECT_EQ(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).code(), StatusCode::kCorruption);
  bytes = SampleFile();
  bytes[4] = 2;  // version 2
  EXPECT_EQ(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).code(), StatusCode::kUnsupported);
  bytes = SampleFile();
  bytes[15] = 0x7F;  // tensor count ~ 2^63
  Status s = GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("tensor count"), std::string::npos) << s.ToString();

  GgufTestWriter unknown_type;
  unknown_type.AddTensor("x", {32}, 99, std::vector<uint8_t>(64, 0));
  bytes = unknown_type.Build();
  s = GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("99"), std::string::npos) << s.ToString();

  GgufTestWriter bad_row;  // Q4_1 rows must be whole blocks of 32
  bad_row.AddTensor("x", {16}, 3, std::vector<uint8_t>(20, 0));
  bytes = bad_row.Build();
  EXPECT_EQ(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).code(), StatusCode::kCorruption);

  GgufTestWriter bad_alignment(32);
  bad_alignment.AddU32("general.alignment", 24);
  bytes = bad_alignment.Build();
  EXPECT_EQ(GgufFile::OpenBuffer(bytes.data(), bytes.size(), &f).code(), StatusCode::kCorruption);
}

TEST(GgufReader, EveryTruncationIsAnError) {
  const std::vector<uint8_t> bytes = SampleFile();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::unique_ptr<GgufFile> f;
    const Status s = GgufFile::OpenBuffer(bytes.data(), cut, &f);
    EXPECT_FALSE(s.ok()) << "truncated at " << cut << " of " << bytes.size();
  }
}

TEST(GgufReader, RandomByteCorruptionNeverCrashes) {
  const std::vector<uint8_t> original = SampleFile();
  std::mt19937 rng(12345);
  constexpr int kTrials = 4000;
  int rejected = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    std::vector<uint8_t> bytes = original;
    const int flips = 1 + int(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const size_t at = rng() % bytes.size();
      bytes[at] = (rng() % 2) ? uint8_t(rng()) : uint8_t(bytes[at] ^ (1u << (rng() % 8)));
    }
    const size_t size = (rng() % 8 == 0) ? rng() % bytes.size() : bytes.size();
    std::unique_ptr<GgufFile> f;
    const Status s = GgufFile::OpenBuffer(bytes.data(), size, &f);
    if (!s.ok()) {
      ++rejected;
      EXPECT_FALSE(s.message().empty());
      continue;
    }
    // Accepted files must only point inside the buffer; touch every tensor byte so ASan would catch a lie.
    for (const GgufTensorInfo& t : f->tensors()) {
      std::vector<float> out(size_t(t.num_elements));
      ASSERT_TRUE(DequantizeToFloat(t.type, t.data, t.num_elements, out.data()).ok());
    }
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace minimakv
