// MatMul paths (AVX-512 VNNI on repacked weights, AVX2, scalar DotQ8RowScalar) against each other (VNNI ==
// AVX2 exactly, both within fp32 summation order of the scalar reference) on random
// Q4_0 / Q4_1 / Q8_0 matrices: odd block counts (a zero-padded last pair), row counts that are not a multiple
// of the 4-row register tile, 1..9 tokens (token tails), 1 and 2 threads.
#include "runtime/quant_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "minimakv/gguf_reader.h"
#include "minimakv/scalar_formats.h"
#include "minimakv/thread_pool.h"

namespace minimakv {
namespace {

// Random blocks of `type` with sane fp16 scales (and mins for Q4_1).
std::vector<uint8_t> RandomMatrix(GgmlType type, int64_t rows, int64_t cols, std::mt19937* rng) {
  int64_t block_elements = 0, block_bytes = 0;
  EXPECT_TRUE(GgmlTypeBlock(uint32_t(type), &block_elements, &block_bytes).ok());
  const int64_t blocks = rows * cols / block_elements;
  std::vector<uint8_t> data(size_t(blocks * block_bytes));
  for (auto& b : data) b = uint8_t((*rng)());
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t d = FloatToFp16(scale(*rng));
    data[size_t(b * block_bytes)] = uint8_t(d & 0xFF);
    data[size_t(b * block_bytes + 1)] = uint8_t(d >> 8);
    if (type == GgmlType::kQ4_1) {
      const uint16_t m = FloatToFp16(-scale(*rng) * 8.0f);
      data[size_t(b * block_bytes + 2)] = uint8_t(m & 0xFF);
      data[size_t(b * block_bytes + 3)] = uint8_t(m >> 8);
    }
  }
  return data;
}

TEST(QuantMatmul, VnniAndAvx2MatchScalarReference) {
  std::mt19937 rng(21);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  struct Case {
    int64_t rows, cols;
  };
  for (GgmlType type : {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0}) {
    for (const Case c : {Case{37, 96}, Case{64, 576}, Case{5, 32}, Case{12, 1536}, Case{33, 320}}) {
      const std::vector<uint8_t> data = RandomMatrix(type, c.rows, c.cols, &rng);
      GgufTensorInfo info;
      info.name = "w";
      info.type = type;
      info.dims = {c.cols, c.rows};
      info.num_elements = c.rows * c.cols;
      info.size_bytes = data.size();
      info.data = data.data();
      WeightMatrix w;
      ASSERT_TRUE(WeightMatrix::FromTensor(info, &w).ok());
      EXPECT_EQ(w.vnni_blocks > 0, MatMulHasVnni());
      for (int64_t tokens : {1, 3, 4, 9}) {
        std::vector<float> x(size_t(tokens * c.cols));
        for (float& v : x) v = dist(rng);
        x[0] = 0.0f;  // an all-but-one-zero block and an exactly zero block exercise amax == 0
        if (c.cols >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
        // sum_i (|w_i| + 2 |m_block|) |x_i| per row and token: bounds |d q x| + |m x| of every term.
        std::vector<std::vector<double>> magnitude(size_t(c.rows), std::vector<double>(size_t(tokens), 0.0));
        const int64_t row_bytes = int64_t(data.size()) / c.rows, block_bytes = row_bytes / (c.cols / 32);
        std::vector<float> wrow(size_t(c.cols));
        for (int64_t r = 0; r < c.rows; ++r) {
          ASSERT_TRUE(DequantizeToFloat(type, data.data() + r * row_bytes, c.cols, wrow.data()).ok());
          for (int64_t i = 0; i < c.cols; ++i) {
            const uint8_t* blk = data.data() + r * row_bytes + (i / 32) * block_bytes;
            const double m = type == GgmlType::kQ4_1 ? std::fabs(Fp16ToFloat(uint16_t(blk[2] | (blk[3] << 8)))) : 0.0;
            for (int64_t t = 0; t < tokens; ++t) {
              magnitude[size_t(r)][size_t(t)] += (std::fabs(wrow[size_t(i)]) + 2 * m) * std::fabs(x[size_t(t * c.cols + i)]);
            }
          }
        }
        for (int threads : {1, 2}) {
          ThreadPool pool(threads);
          MatMulScratch scratch;
          std::vector<float> ref(size_t(tokens * c.rows)), avx2(ref.size()), vnni(ref.size());
          MatMul(w, x.data(), tokens, ref.data(), &pool, &scratch, MatMulPath::kScalar);
          MatMul(w, x.data(), tokens, avx2.data(), &pool, &scratch, MatMulPath::kAvx2);
          MatMul(w, x.data(), tokens, vnni.data(), &pool, &scratch, MatMulPath::kAuto);
          for (size_t i = 0; i < ref.size(); ++i) {
            // Only fp32 summation order differs: a few ulp of the magnitude of the summed terms (Q4_1's d * q * x
            // and m * x cancel), far below one weight code's step (d * |x| ~ 1e-2).
            const int64_t t = int64_t(i) / c.rows, r = int64_t(i) % c.rows;
            const double tol = 2e-6 * magnitude[size_t(r)][size_t(t)];
            EXPECT_NEAR(avx2[i], ref[i], tol) << GgmlTypeName(type) << " " << c.rows << "x" << c.cols << " t" << tokens;
            // The VNNI path repeats the AVX2 path's lane arithmetic and order: equal bit for bit.
            EXPECT_EQ(vnni[i], avx2[i]) << GgmlTypeName(type) << " " << c.rows << "x" << c.cols << " t" << tokens
                                        << " i " << i;
          }
        }
      }
    }
  }
}

// A group (shared activations, one parallel region over stacked rows) equals separate MatMul calls exactly,
// with row counts that are not multiples of the 16-row chunk grain.
TEST(QuantMatmul, GroupEqualsSeparateCalls) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (GgmlType type : {GgmlType::kQ4_1, GgmlType::kQ8_0}) {
    const int64_t cols = 160;
    const int64_t rows[] = {48, 21, 35};
    std::vector<std::vector<uint8_t>> data;
    std::vector<WeightMatrix> ws(3);
    for (int i = 0; i < 3; ++i) {
      data.push_back(RandomMatrix(type, rows[i], cols, &rng));
      GgufTensorInfo info;
      info.name = "w" + std::to_string(i);
      info.type = type;
      info.dims = {cols, rows[i]};
      info.num_elements = rows[i] * cols;
      info.size_bytes = data.back().size();
      info.data = data.back().data();
      ASSERT_TRUE(WeightMatrix::FromTensor(info, &ws[size_t(i)]).ok());
    }
    for (int64_t tokens : {1, 6}) {
      std::vector<float> x(size_t(tokens * cols));
      for (float& v : x) v = dist(rng);
      ThreadPool pool(2);
      MatMulScratch scratch;
      std::vector<std::vector<float>> separate(3), grouped(3);
      const WeightMatrix* group[3];
      float* outs[3];
      for (int i = 0; i < 3; ++i) {
        separate[size_t(i)].resize(size_t(tokens * rows[i]));
        grouped[size_t(i)].assign(size_t(tokens * rows[i]), NAN);
        MatMul(ws[size_t(i)], x.data(), tokens, separate[size_t(i)].data(), &pool, &scratch);
        group[i] = &ws[size_t(i)];
        outs[i] = grouped[size_t(i)].data();
      }
      MatMulGroup(group, x.data(), tokens, outs, &pool, &scratch);
      for (int i = 0; i < 3; ++i) EXPECT_EQ(grouped[size_t(i)], separate[size_t(i)]) << GgmlTypeName(type) << " " << i;
    }
  }
}

}  // namespace
}  // namespace minimakv
