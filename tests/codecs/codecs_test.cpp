#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "minimakv/bf16_codec.h"
#include "minimakv/fp8_codec.h"
#include "minimakv/hadamard_rotation.h"
#include "minimakv/kv_format.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/tq3_codec.h"

namespace minimakv {
namespace {

std::vector<float> Gaussian(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(ScalarFormats, E4m3RoundTripsEveryFiniteCode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;  // NaN encodings
    const float value = E4m3ToFloat(uint8_t(code));
    const uint8_t back = FloatToE4m3(value);
    if (code == 0x80) {
      EXPECT_EQ(back, 0x80);  // -0 keeps its sign
    } else {
      EXPECT_EQ(back, code) << "value " << value;
    }
  }
  EXPECT_EQ(E4m3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0x01), 1.0f / 512.0f);
  EXPECT_EQ(FloatToE4m3(1000.0f), 0x7E);   // saturates
  EXPECT_EQ(FloatToE4m3(-1000.0f), 0xFE);
}

TEST(ScalarFormats, E4m3RoundsToNearestEven) {
  // 1.0625 lies halfway between 1.0 (mantissa 000) and 1.125 (001): ties to even -> 1.0.
  EXPECT_EQ(E4m3ToFloat(FloatToE4m3(1.0625f)), 1.0f);
  // 1.1875 lies halfway between 1.125 (001) and 1.25 (010): -> 1.25.
  EXPECT_EQ(E4m3ToFloat(FloatToE4m3(1.1875f)), 1.25f);
  // Subnormal tie: 1.5 * 2^-9 -> 2 * 2^-9.
  EXPECT_EQ(E4m3ToFloat(FloatToE4m3(1.5f / 512.0f)), 2.0f / 512.0f);
}

TEST(ScalarFormats, Fp16MatchesReferenceOnManyValues) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-26.0f, 17.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = std::exp2(exponent(rng)) * (i % 2 ? -1.0f : 1.0f);
    const uint16_t h = FloatToFp16(x);
    const float back = Fp16ToFloat(h);
    if (std::fabs(x) >= 65520.0f) {
      EXPECT_TRUE(std::isinf(back));
      continue;
    }
    // Nearest: no other fp16 value is closer.
    const float up = Fp16ToFloat(uint16_t(h + 1));
    const float down = Fp16ToFloat(uint16_t(h - 1));
    const float err = std::fabs(back - x);
    if ((h & 0x7FFF) != 0x7BFF && (h & 0x7FFF) != 0) {
      EXPECT_LE(err, std::fabs(up - x)) << x;
      EXPECT_LE(err, std::fabs(down - x)) << x;
    }
  }
  EXPECT_EQ(Fp16ToFloat(FloatToFp16(65504.0f)), 65504.0f);
  EXPECT_EQ(FloatToFp16(1.0f), 0x3C00);
}

TEST(ScalarFormats, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.00390625f)), 1.0f);        // tie -> even
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.01171875f)), 1.015625f);   // tie -> even (up)
}

// The TQ3 magnitudes are B_m / alpha with B_m small integers, exact in int8, bf16 and fp16 (tq3_codec.h says why);
// the stored fp32 values are the correctly rounded quotients and stay within 2.2e-3 (relative) of Max's table.
TEST(Tq3Centroids, UnitsAreExact16BitValuesAndMagnitudesTheirQuotients) {
  const double kMaxTable[4] = {0.2451, 0.7560, 1.3440, 2.1520};
  for (int m = 0; m < 4; ++m) {
    const float units = kTq3MagnitudeUnits[m];
    EXPECT_EQ(Bf16ToFloat(FloatToBf16(units)), units) << m;
    EXPECT_EQ(Fp16ToFloat(FloatToFp16(units)), units) << m;
    EXPECT_EQ(float(int8_t(units)), units) << m;  // one int8 digit (the GPU key scores)
    volatile float alpha = kTq3UnitsPerMagnitude;  // volatile: a run-time fp32 division, not a folded constant
    EXPECT_EQ(units / alpha, Tq3Magnitude(m)) << m;
    EXPECT_LT(std::fabs(double(Tq3Magnitude(m)) / kMaxTable[m] - 1.0), 2.2e-3) << m;
    if (m > 0) EXPECT_LT(Tq3Magnitude(m - 1), Tq3Magnitude(m));
  }
}

TEST(HeadDim, UnsupportedValuesGetAClearError) {
  for (int d : {0, 32, 96, 100, 512, -64}) {
    const Status s = CheckHeadDim(d);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(std::to_string(d)), std::string::npos) << s.ToString();
    HadamardRotation rotation;
    EXPECT_FALSE(HadamardRotation::Create(d, 1, &rotation).ok());
  }
  for (int d : kSupportedHeadDims) EXPECT_TRUE(CheckHeadDim(d).ok());
}

class CodecsByHeadDim : public ::testing::TestWithParam<int> {};

TEST_P(CodecsByHeadDim, RotationIsOrthonormalAndInvertible) {
  const int d = GetParam();
  HadamardRotation rotation;
  ASSERT_TRUE(HadamardRotation::Create(d, 42, &rotation).ok());
  const std::vector<float> x = Gaussian(d, 1);
  std::vector<float> y(d), back(d);
  rotation.Forward(x.data(), y.data());
  rotation.Inverse(y.data(), back.data());
  double nx = 0, ny = 0;
  for (int i = 0; i < d; ++i) {
    nx += double(x[i]) * x[i];
    ny += double(y[i]) * y[i];
    EXPECT_NEAR(back[i], x[i], 1e-5f);
  }
  EXPECT_NEAR(nx, ny, 1e-4 * nx);
  // Different seeds give different sign vectors.
  HadamardRotation other;
  ASSERT_TRUE(HadamardRotation::Create(d, 43, &other).ok());
  EXPECT_NE(rotation.signs(), other.signs());
}

TEST_P(CodecsByHeadDim, Tq3PackUnpackIsBitExact) {
  const int d = GetParam();
  std::mt19937 rng(3);
  std::vector<int> indices(d);
  std::vector<uint32_t> words(3 * d / 32, 0xA5A5A5A5u);  // garbage must be overwritten
  for (int i = 0; i < d; ++i) {
    indices[i] = int(rng() % 8);
    Tq3SetIndex(words.data(), i, indices[i]);
  }
  for (int i = 0; i < d; ++i) EXPECT_EQ(Tq3GetIndex(words.data(), i), indices[i]);
  // Layout (tq3_codec.h): coordinate 33 (group 1, word 0, nibble 1) sits in bits 4..6 of word 3; coordinate 58
  // (group 1, spill nibble 2) in bit 11 of words 3, 4, 5.
  std::fill(words.begin(), words.end(), 0u);
  Tq3SetIndex(words.data(), 33, 5);
  EXPECT_EQ(words[3], 0x50u);
  Tq3SetIndex(words.data(), 58, 6);
  EXPECT_EQ(words[3], 0x50u);
  EXPECT_EQ(words[4], 1u << 11);
  EXPECT_EQ(words[5], 1u << 11);
  EXPECT_EQ(Tq3GetIndex(words.data(), 58), 6);
  // Masked words give coordinates 8i .. 8i + 7 as nibbles; the spill nibbles give 24 .. 31.
  if (d >= 64) {
    for (int i = 0; i < 64; ++i) Tq3SetIndex(words.data(), i, indices[i]);
    for (int g = 0; g < 2; ++g) {
      const uint32_t* w = words.data() + 3 * g;
      const uint32_t spill = ((w[0] >> 3) & 0x11111111u) | ((w[1] >> 2) & 0x22222222u) | ((w[2] >> 1) & 0x44444444u);
      for (int n = 0; n < 8; ++n) {
        for (int i = 0; i < 3; ++i) EXPECT_EQ(int((w[i] >> (4 * n)) & 7u), indices[32 * g + 8 * i + n]);
        EXPECT_EQ(int((spill >> (4 * n)) & 7u), indices[32 * g + 24 + n]);
      }
    }
  }
}

TEST_P(CodecsByHeadDim, Tq3BytesAreDeterministicForASeed) {
  const int d = GetParam();
  HadamardRotation a, b, c;
  ASSERT_TRUE(HadamardRotation::Create(d, 9, &a).ok());
  ASSERT_TRUE(HadamardRotation::Create(d, 9, &b).ok());
  ASSERT_TRUE(HadamardRotation::Create(d, 10, &c).ok());
  const std::vector<float> x = Gaussian(d, 5);
  std::vector<uint8_t> ca(Tq3CodeBytes(d)), cb(Tq3CodeBytes(d)), cc(Tq3CodeBytes(d));
  uint16_t sa, sb, sc;
  ASSERT_TRUE(Tq3EncodeVector(a, x.data(), ca.data(), &sa).ok());
  ASSERT_TRUE(Tq3EncodeVector(b, x.data(), cb.data(), &sb).ok());
  ASSERT_TRUE(Tq3EncodeVector(c, x.data(), cc.data(), &sc).ok());
  EXPECT_EQ(ca, cb);
  EXPECT_EQ(sa, sb);
  EXPECT_NE(ca, cc);
}

TEST_P(CodecsByHeadDim, Tq3NormalizedMseMatchesTheory) {
  // ref: Lloyd-Max 3-bit distortion for N(0,1) is 0.03455; TurboQuant's bound for unit vectors.
  const int d = GetParam();
  HadamardRotation rotation;
  ASSERT_TRUE(HadamardRotation::Create(d, HadamardRotation::kDefaultSeed, &rotation).ok());
  std::vector<uint8_t> codes(Tq3CodeBytes(d));
  std::vector<float> x_hat(d);
  double sum_nmse = 0.0;
  const int trials = 2000;
  for (int t = 0; t < trials; ++t) {
    const std::vector<float> x = Gaussian(d, 1000 + t);
    uint16_t scale;
    ASSERT_TRUE(Tq3EncodeVector(rotation, x.data(), codes.data(), &scale).ok());
    Tq3DecodeVector(rotation, codes.data(), scale, x_hat.data());
    double err = 0, norm = 0, norm_hat = 0;
    for (int i = 0; i < d; ++i) {
      err += double(x[i] - x_hat[i]) * (x[i] - x_hat[i]);
      norm += double(x[i]) * x[i];
      norm_hat += double(x_hat[i]) * x_hat[i];
    }
    // Norm correction: the reconstruction keeps the norm up to the fp16 scale's rounding (2^-11).
    EXPECT_NEAR(std::sqrt(norm_hat), std::sqrt(norm), 1e-3 * std::sqrt(norm));
    sum_nmse += err / norm;
  }
  const double nmse = sum_nmse / trials;
  EXPECT_GE(nmse, 0.030);
  EXPECT_LE(nmse, 0.040);
  RecordProperty("tq3_nmse", std::to_string(nmse));
}

TEST_P(CodecsByHeadDim, Tq3ZeroVectorDecodesToZero) {
  const int d = GetParam();
  HadamardRotation rotation;
  ASSERT_TRUE(HadamardRotation::Create(d, 1, &rotation).ok());
  std::vector<float> x(d, 0.0f), x_hat(d, 1.0f);
  std::vector<uint8_t> codes(Tq3CodeBytes(d));
  uint16_t scale = 1;
  ASSERT_TRUE(Tq3EncodeVector(rotation, x.data(), codes.data(), &scale).ok());
  EXPECT_EQ(scale, 0);
  Tq3DecodeVector(rotation, codes.data(), scale, x_hat.data());
  for (float v : x_hat) EXPECT_EQ(v, 0.0f);
}

TEST_P(CodecsByHeadDim, Fp8RelativeErrorIsBounded) {
  // E4M3 keeps 3 mantissa bits: relative error <= 2^-4 for normals; with the per-vector scale the largest
  // element maps to 448 exactly, so the vector error is bounded by 2^-4 of its norm.
  const int d = GetParam();
  std::vector<uint8_t> codes(d);
  std::vector<float> back(d);
  for (int t = 0; t < 200; ++t) {
    std::vector<float> x = Gaussian(d, 77 + t);
    for (float& v : x) v *= float(t + 1) * 0.37f;
    float scale;
    ASSERT_TRUE(Fp8EncodeVector(x.data(), d, codes.data(), &scale).ok());
    Fp8DecodeVector(codes.data(), scale, d, back.data());
    double err = 0, norm = 0, amax = 0;
    for (int i = 0; i < d; ++i) {
      err += double(x[i] - back[i]) * (x[i] - back[i]);
      norm += double(x[i]) * x[i];
      amax = std::max(amax, double(std::fabs(x[i])));
      // Per element: half an ulp of E4M3 at its exponent, or half a subnormal step of the scaled range.
      const double bound = std::max(std::fabs(double(x[i])) * 0.0625, amax / 448.0 * (1.0 / 512.0));
      EXPECT_LE(std::fabs(double(x[i]) - back[i]), bound + 1e-12) << "i=" << i;
    }
    EXPECT_LE(std::sqrt(err / norm), 0.0625);
    float max_back = 0.0f;
    for (float v : back) max_back = std::max(max_back, std::fabs(v));
    EXPECT_NEAR(max_back, amax, 1e-6 * amax);
  }
}

TEST_P(CodecsByHeadDim, NonFiniteInputIsRejectedNamingTheCoordinate) {
  const int d = GetParam();
  HadamardRotation rotation;
  ASSERT_TRUE(HadamardRotation::Create(d, 1, &rotation).ok());
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> x = Gaussian(d, 2);
    x[d / 2 + 1] = bad;
    std::vector<uint8_t> codes(2 * d, 0xCD);
    const std::vector<uint8_t> before = codes;
    uint16_t h[256];
    float scale = 0;
    uint16_t tq3_scale = 0;
    const Status s_bf16 = Bf16EncodeVector(x.data(), d, h);
    const Status s_fp8 = Fp8EncodeVector(x.data(), d, codes.data(), &scale);
    const Status s_tq3 = Tq3EncodeVector(rotation, x.data(), codes.data(), &tq3_scale);
    for (const Status* s : {&s_bf16, &s_fp8, &s_tq3}) {
      EXPECT_EQ(s->code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s->message().find("coordinate " + std::to_string(d / 2 + 1)), std::string::npos) << s->ToString();
    }
    EXPECT_EQ(codes, before);  // nothing written on error
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CodecsByHeadDim, ::testing::Values(64, 128, 256));

}  // namespace
}  // namespace minimakv
