// KV capture files (kv_capture.h): round trips, every kind of bad file rejected with a message naming the bad
// value, and captures made from the default model (CaptureModelKv and `minimakv eval capture-kv`), skipped when
// the model is not fetched.
#include "minimakv/kv_capture.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include "minimakv/kv_capture_model.h"
#include "minimakv/llama_model.h"
#include "minimakv/model_files.h"
#include "minimakv/passkey_task.h"
#include "minimakv/scalar_formats.h"

namespace minimakv {
namespace {

// A small valid capture with Gaussian values (bf16-rounded K/V when dtype is bf16).
KvCapture SmallCapture(KvCaptureDtype dtype, uint64_t seed = 3) {
  KvCapture c;
  c.kv_dtype = dtype;
  c.num_q_heads = 6;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.page_tokens = 16;
  c.sm_scale = 0.125f;
  c.anchor_tokens = 32;
  c.recent_tokens = 48;
  c.tokens = 150;
  c.rotation_seed = 0x1234;
  c.num_queries = 3;
  c.model_layers = 10;
  c.note = "unit test";
  std::mt19937 rng{uint32_t(seed)};
  std::normal_distribution<float> gauss;
  for (int layer : {1, 4, 9}) {
    KvCaptureLayer l;
    l.layer = layer;
    l.k.resize(size_t(c.tokens) * c.kv_heads * c.head_dim);
    l.v.resize(l.k.size());
    l.q.resize(size_t(c.num_queries) * c.num_q_heads * c.head_dim);
    for (float& x : l.k) x = gauss(rng) * 3.0f;
    for (float& x : l.v) x = gauss(rng);
    for (float& x : l.q) x = gauss(rng);
    if (dtype == KvCaptureDtype::kBf16) {
      for (float& x : l.k) x = Bf16ToFloat(FloatToBf16(x));
      for (float& x : l.v) x = Bf16ToFloat(FloatToBf16(x));
    }
    c.layers.push_back(std::move(l));
  }
  return c;
}

void ExpectSame(const KvCapture& a, const KvCapture& b) {
  EXPECT_EQ(a.kv_dtype, b.kv_dtype);
  EXPECT_EQ(a.num_q_heads, b.num_q_heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.page_tokens, b.page_tokens);
  EXPECT_EQ(a.sm_scale, b.sm_scale);
  EXPECT_EQ(a.anchor_tokens, b.anchor_tokens);
  EXPECT_EQ(a.recent_tokens, b.recent_tokens);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.rotation_seed, b.rotation_seed);
  EXPECT_EQ(a.num_queries, b.num_queries);
  EXPECT_EQ(a.model_layers, b.model_layers);
  EXPECT_EQ(a.note, b.note);
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].layer, b.layers[i].layer);
    EXPECT_EQ(a.layers[i].k, b.layers[i].k);
    EXPECT_EQ(a.layers[i].v, b.layers[i].v);
    EXPECT_EQ(a.layers[i].q, b.layers[i].q);
  }
}

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()))).string();
}

void PutU32At(std::vector<uint8_t>* bytes, size_t offset, uint32_t x) {
  for (int i = 0; i < 4; ++i) (*bytes)[offset + size_t(i)] = uint8_t(x >> (8 * i));
}

// Recomputes the trailing FNV-1a checksum after a deliberate edit, so the reader reaches the check under test.
void Reseal(std::vector<uint8_t>* bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes->size() - 8; ++i) hash = (hash ^ (*bytes)[i]) * 0x100000001b3ull;
  for (int i = 0; i < 8; ++i) (*bytes)[bytes->size() - 8 + size_t(i)] = uint8_t(hash >> (8 * i));
}

// Decoding `bytes` fails with Corruption and a message that contains `needle`.
void ExpectCorrupt(const std::vector<uint8_t>& bytes, const std::string& needle) {
  KvCapture out;
  const Status s = DecodeKvCapture(bytes, &out);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message() << "\nwanted: " << needle;
}

TEST(KvCaptureTest, RoundTripsBothDtypesThroughBytesAndFiles) {
  for (KvCaptureDtype dtype : {KvCaptureDtype::kBf16, KvCaptureDtype::kFp32}) {
    const KvCapture c = SmallCapture(dtype);
    std::vector<uint8_t> bytes;
    ASSERT_TRUE(EncodeKvCapture(c, &bytes).ok());
    EXPECT_EQ(bytes.size(), KvCaptureFileBytes(c));
    const size_t value_bytes = dtype == KvCaptureDtype::kFp32 ? 4 : 2;
    EXPECT_EQ(bytes.size(), kKvCaptureHeaderBytes + c.note.size() +
                                3 * (8 + 2 * 150 * 2 * 64 * value_bytes + 3 * 6 * 64 * 4) + 8);
    EXPECT_EQ(std::memcmp(bytes.data(), "MKVCAPT1", 8), 0);
    KvCapture back;
    const Status s = DecodeKvCapture(bytes, &back);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectSame(c, back);

    const std::string path = TempPath("kv_capture_roundtrip");
    ASSERT_TRUE(WriteKvCapture(c, path).ok());
    KvCapture from_file;
    const Status r = ReadKvCapture(path, &from_file);
    ASSERT_TRUE(r.ok()) << r.ToString();
    ExpectSame(c, from_file);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    std::filesystem::remove(path);
  }
}

TEST(KvCaptureTest, RejectsBadFilesNamingTheBadValue) {
  const KvCapture c = SmallCapture(KvCaptureDtype::kBf16);
  std::vector<uint8_t> good;
  ASSERT_TRUE(EncodeKvCapture(c, &good).ok());

  ExpectCorrupt({}, "truncated: 0 bytes");
  ExpectCorrupt(std::vector<uint8_t>(good.begin(), good.begin() + 40), "shorter than the 72-byte header");
  std::vector<uint8_t> b = good;
  b[0] = 'X';
  ExpectCorrupt(b, "wrong magic");
  b = good;
  PutU32At(&b, 8, 2);
  ExpectCorrupt(b, "version 2 is not the supported version 1");
  b = good;
  PutU32At(&b, 12, 7);
  ExpectCorrupt(b, "kv_dtype 7");
  b = good;
  PutU32At(&b, 24, 96);
  ExpectCorrupt(b, "head_dim 96");
  b = good;
  PutU32At(&b, 16, 5);  // 5 query heads over 2 KV heads
  ExpectCorrupt(b, "num_q_heads 5");
  b = good;
  PutU32At(&b, 44, 0x80000000u);
  ExpectCorrupt(b, "tokens 2147483648 is out of range");
  b = good;
  PutU32At(&b, 56, 0);
  ExpectCorrupt(b, "num_queries 0");
  // Sizes that disagree: a file cut short, one byte too many, and a header that claims more tokens.
  ExpectCorrupt(std::vector<uint8_t>(good.begin(), good.end() - 1000), "truncated: the file has");
  b = good;
  b.push_back(0);
  ExpectCorrupt(b, "size mismatch: the file has " + std::to_string(good.size() + 1) + " bytes");
  b = good;
  PutU32At(&b, 44, 151);
  ExpectCorrupt(b, "truncated");
  // A flipped byte in the data, caught by the checksum.
  b = good;
  b[good.size() / 2] ^= 0x10;
  ExpectCorrupt(b, "checksum");
  // Layer indices out of order (checksum recomputed so the field check is what fires).
  b = good;
  const size_t record = 8 + 2 * 150 * 2 * 64 * 2 + 3 * 6 * 64 * 4;
  PutU32At(&b, kKvCaptureHeaderBytes + c.note.size() + record, 0);  // second layer index 4 -> 0
  Reseal(&b);
  ExpectCorrupt(b, "layer index 0 does not follow layer 1");
  b = good;
  PutU32At(&b, kKvCaptureHeaderBytes + c.note.size(), 10);  // first layer index 1 -> 10 of 10 model layers
  Reseal(&b);
  ExpectCorrupt(b, "layer index 10 not in [0, model_layers 10)");
  // A NaN in the K values (bf16 0x7FC0) at token 2, head 1, coordinate 5 of the first layer.
  b = good;
  const size_t k_at = kKvCaptureHeaderBytes + c.note.size() + 8 + 2 * ((2 * 2 + 1) * 64 + 5);
  b[k_at] = 0xC0;
  b[k_at + 1] = 0x7F;
  Reseal(&b);
  ExpectCorrupt(b, "layer 1 K token 2 head 1 coordinate 5 is NaN");
  // An infinite query (fp32 0x7F800000): query 1, head 3, coordinate 0 of the first layer.
  b = good;
  const size_t q_at = kKvCaptureHeaderBytes + c.note.size() + 8 + 2 * 150 * 2 * 64 * 2 + 4 * ((1 * 6 + 3) * 64);
  PutU32At(&b, q_at, 0x7F800000u);
  Reseal(&b);
  ExpectCorrupt(b, "layer 1 Q query 1 head 3 coordinate 0 is infinite");

  KvCapture out;
  const Status missing = ReadKvCapture("/nonexistent/dir/capture.mkvcap", &out);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("/nonexistent/dir/capture.mkvcap"), std::string::npos);

  // Files that are not captures (read header first): a larger file of other bytes, an empty file, a cut one.
  const std::string path = TempPath("kv_capture_not_a_capture");
  const auto read_file_of = [&](const std::vector<uint8_t>& content) {
    {
      std::ofstream file(path, std::ios::binary | std::ios::trunc);
      file.write(reinterpret_cast<const char*>(content.data()), std::streamsize(content.size()));
    }
    KvCapture read;
    const Status s = ReadKvCapture(path, &read);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
    return s.message();
  };
  EXPECT_NE(read_file_of(std::vector<uint8_t>(100000, 'G')).find("wrong magic"), std::string::npos);
  EXPECT_NE(read_file_of({}).find("truncated: 0 bytes"), std::string::npos);
  EXPECT_NE(read_file_of(std::vector<uint8_t>(good.begin(), good.begin() + 40)).find("truncated: 40 bytes"),
            std::string::npos);
  EXPECT_NE(read_file_of(std::vector<uint8_t>(good.begin(), good.end() - 1)).find("truncated"), std::string::npos);
  // A capture's header on a (sparse) 64 GiB file: the size disagrees with the header, said before the file is read
  // (was: it was read whole first, ResourceExhausted where 64 GiB did not fit, else 64 GiB read for nothing).
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(good.data()), std::streamsize(good.size()));
  }
  std::error_code resize_error;
  std::filesystem::resize_file(path, uint64_t(1) << 36, resize_error);
  if (!resize_error) {
    KvCapture read;
    const Status s = ReadKvCapture(path, &read);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    EXPECT_NE(s.message().find("size mismatch: the file has 68719476736 bytes"), std::string::npos) << s.message();
  }
  std::filesystem::remove(path);
}

// Random header edits (checksum resealed so the field checks run) and random cuts: every result is a Status, never
// a crash or a read out of bounds (the ASan build runs this too).
TEST(KvCaptureTest, SurvivesRandomHeaderEditsAndCuts) {
  const KvCapture c = SmallCapture(KvCaptureDtype::kFp32);
  std::vector<uint8_t> good;
  ASSERT_TRUE(EncodeKvCapture(c, &good).ok());
  std::mt19937 rng{17};
  int rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<uint8_t> b = good;
    const int edits = 1 + int(rng() % 3);
    for (int e = 0; e < edits; ++e) b[rng() % kKvCaptureHeaderBytes] = uint8_t(rng());
    Reseal(&b);
    KvCapture out;
    rejected += DecodeKvCapture(b, &out).ok() ? 0 : 1;
    const size_t cut = rng() % good.size();
    EXPECT_FALSE(DecodeKvCapture(std::span<const uint8_t>(good.data(), cut), &out).ok()) << "cut at " << cut;
  }
  EXPECT_GT(rejected, 250);  // a few edits land on fields any value of which is valid (the seed, the scale)
}

TEST(KvCaptureTest, ValidateRejectsBadCapturesBeforeWriting) {
  KvCapture c = SmallCapture(KvCaptureDtype::kBf16);
  c.layers[1].k[7] = 1.0f + 1.0f / 1024.0f;  // not a bf16 value
  std::vector<uint8_t> bytes;
  Status s = EncodeKvCapture(c, &bytes);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 4 K value 7 is not a bf16 value"), std::string::npos) << s.message();
  c = SmallCapture(KvCaptureDtype::kFp32);
  c.layers[0].v.pop_back();
  s = ValidateKvCapture(c);
  EXPECT_NE(s.message().find("layer 1 holds 19200 K and 19199 V values"), std::string::npos) << s.message();
  c = SmallCapture(KvCaptureDtype::kFp32);
  c.num_queries = 200;
  EXPECT_FALSE(ValidateKvCapture(c).ok());
  c = SmallCapture(KvCaptureDtype::kFp32);
  c.sm_scale = NAN;
  EXPECT_NE(ValidateKvCapture(c).message().find("sm_scale"), std::string::npos);
  EXPECT_FALSE(WriteKvCapture(c, TempPath("kv_capture_bad")).ok());
  EXPECT_FALSE(std::filesystem::exists(TempPath("kv_capture_bad")));
}

// A real capture of a short passkey prompt: shape, positions and values as the session produced them.
TEST(KvCaptureModelTest, CapturesLayersOfTheDefaultModel) {
  std::unique_ptr<LlamaModel> model;
  if (!LlamaModel::Load(DefaultModelPath(), &model).ok()) GTEST_SKIP() << "model not fetched: " << DefaultModelPath();
  PasskeyCase pc;
  ASSERT_TRUE(BuildPasskeyCase(model->tokenizer(), 512, 0.5, 1, &pc).ok());
  KvCaptureOptions options;
  options.layers = {29, 0, 7, 7};  // sorted and de-duplicated by the call
  options.num_queries = 3;
  options.kv_dtype = KvCaptureDtype::kFp32;
  int progress_calls = 0;
  options.on_progress = [&](int, int) { ++progress_calls; };
  KvCapture c;
  std::vector<int32_t> generated;
  const Status s = CaptureModelKv(*model, pc.prompt_ids, options, &c, &generated);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const LlamaConfig& config = model->config();
  EXPECT_EQ(c.num_q_heads, config.num_q_heads);
  EXPECT_EQ(c.kv_heads, config.num_kv_heads);
  EXPECT_EQ(c.head_dim, config.head_dim);
  EXPECT_EQ(c.tokens, int64_t(pc.prompt_ids.size()) + 3);
  EXPECT_EQ(c.QueryContextTokens(0), int64_t(pc.prompt_ids.size()) + 1);
  EXPECT_EQ(c.model_layers, config.num_layers);
  EXPECT_FLOAT_EQ(c.sm_scale, 1.0f / std::sqrt(float(config.head_dim)));
  ASSERT_EQ(c.layers.size(), 3u);
  EXPECT_EQ(c.layers[0].layer, 0);
  EXPECT_EQ(c.layers[1].layer, 7);
  EXPECT_EQ(c.layers[2].layer, 29);
  EXPECT_EQ(generated.size(), 3u);
  EXPECT_EQ(progress_calls, config.num_layers + 3);
  EXPECT_TRUE(ValidateKvCapture(c).ok());
  // Every token row and every query was written (a row left at zero would mean a missed position).
  const size_t kv_row = size_t(c.kv_heads) * c.head_dim, q_row = size_t(c.num_q_heads) * c.head_dim;
  for (const KvCaptureLayer& l : c.layers) {
    for (int64_t t = 0; t < c.tokens; ++t) {
      double k2 = 0.0;
      for (size_t i = 0; i < kv_row; ++i) k2 += double(l.k[size_t(t) * kv_row + i]) * l.k[size_t(t) * kv_row + i];
      ASSERT_GT(k2, 0.0) << "layer " << l.layer << " token " << t;
    }
    for (int q = 0; q < c.num_queries; ++q) {
      double q2 = 0.0;
      for (size_t i = 0; i < q_row; ++i) q2 += double(l.q[size_t(q) * q_row + i]) * l.q[size_t(q) * q_row + i];
      ASSERT_GT(q2, 0.0) << "layer " << l.layer << " query " << q;
    }
  }
  // A bad layer is refused up front.
  options.layers = {config.num_layers};
  EXPECT_EQ(CaptureModelKv(*model, pc.prompt_ids, options, &c).code(), StatusCode::kInvalidArgument);
}

// Positions: layer 0's q and k depend only on the token and its position, so the capture's decode-step queries and
// K rows must equal the rows a single prefill of prompt + generated tokens computes at the same positions.
TEST(KvCaptureModelTest, DecodeQueriesSitAtTheirPositions) {
  std::unique_ptr<LlamaModel> model;
  if (!LlamaModel::Load(DefaultModelPath(), &model).ok()) GTEST_SKIP() << "model not fetched: " << DefaultModelPath();
  PasskeyCase pc;
  ASSERT_TRUE(BuildPasskeyCase(model->tokenizer(), 256, 0.5, 2, &pc).ok());
  KvCaptureOptions options;
  options.layers = {0};
  options.num_queries = 3;
  options.kv_dtype = KvCaptureDtype::kFp32;
  KvCapture c;
  std::vector<int32_t> generated;
  ASSERT_TRUE(CaptureModelKv(*model, pc.prompt_ids, options, &c, &generated).ok());
  std::vector<int32_t> all = pc.prompt_ids;
  all.insert(all.end(), generated.begin(), generated.end());
  std::vector<float> q0, k0;
  SessionOptions so;
  so.mode = KvMode::kBf16;
  so.max_tokens = int(all.size());
  so.qkv_observer = [&](const LayerQkv& seen) {
    if (seen.layer != 0) return;
    q0.assign(seen.q, seen.q + seen.tokens * c.num_q_heads * c.head_dim);
    k0.assign(seen.k, seen.k + seen.tokens * c.kv_heads * c.head_dim);
  };
  std::unique_ptr<InferenceSession> session;
  ASSERT_TRUE(InferenceSession::Create(model.get(), so, &session).ok());
  std::vector<float> logits;
  ASSERT_TRUE(session->Forward(all, false, &logits).ok());
  ASSERT_EQ(int64_t(all.size()), c.tokens);
  const size_t q_row = size_t(c.num_q_heads) * c.head_dim;
  auto rel = [](const float* a, const float* b, size_t n) {
    double err = 0.0, ref = 0.0;
    for (size_t i = 0; i < n; ++i) err += double(a[i] - b[i]) * (a[i] - b[i]), ref += double(b[i]) * b[i];
    return std::sqrt(err / ref);
  };
  for (int i = 0; i < c.num_queries; ++i) {
    const size_t position = size_t(c.tokens - c.num_queries + i);
    // The same weights and inputs; only the matmul's batching may differ (one row against a chunk).
    EXPECT_LT(rel(&c.layers[0].q[size_t(i) * q_row], &q0[position * q_row], q_row), 1e-3) << "query " << i;
  }
  EXPECT_LT(rel(c.layers[0].k.data(), k0.data(), k0.size()), 1e-3);
}

#ifdef MINIMAKV_CLI_PATH
// `minimakv eval capture-kv` end to end at a small context: the file it writes reads back with the asked shape.
TEST(KvCaptureModelTest, CliWritesACaptureForASmallContext) {
  std::unique_ptr<LlamaModel> model;
  if (!LlamaModel::Load(DefaultModelPath(), &model).ok()) GTEST_SKIP() << "model not fetched: " << DefaultModelPath();
  model.reset();
  const std::string path = TempPath("kv_capture_cli.mkvcap");
  const std::string command = std::string(MINIMAKV_CLI_PATH) + " eval capture-kv --context 512 --layers 3,15 " +
                              "--queries 2 --progress off --out " + path + " > /dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  KvCapture c;
  const Status s = ReadKvCapture(path, &c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(c.kv_dtype, KvCaptureDtype::kBf16);
  EXPECT_EQ(c.num_queries, 2);
  EXPECT_LE(c.tokens, 512 + 2);
  EXPECT_GT(c.tokens, 400);
  ASSERT_EQ(c.layers.size(), 2u);
  EXPECT_EQ(c.layers[0].layer, 3);
  EXPECT_EQ(c.layers[1].layer, 15);
  EXPECT_EQ(c.anchor_tokens, 256);
  EXPECT_EQ(c.recent_tokens, 1024);
  EXPECT_NE(c.note.find("passkey prompt"), std::string::npos);
  std::filesystem::remove(path);
  // Usage errors exit 2: no --out, a layer past the model's.
  EXPECT_EQ(WEXITSTATUS(std::system((std::string(MINIMAKV_CLI_PATH) + " eval capture-kv 2> /dev/null").c_str())), 2);
  const std::string bad_layer = std::string(MINIMAKV_CLI_PATH) + " eval capture-kv --context 512 --layers 30 " +
                                "--progress off --out " + path + " 2> /dev/null";
  EXPECT_EQ(WEXITSTATUS(std::system(bad_layer.c_str())), 2);
  EXPECT_FALSE(std::filesystem::exists(path));
}
#endif

}  // namespace
}  // namespace minimakv
