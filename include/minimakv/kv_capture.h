// KvCapture: a real model's KV cache and decode queries for a few layers, saved to a file so that the decode
// kernels (CPU and CUDA) can be checked on real data instead of random numbers. `minimakv eval capture-kv` makes
// one (kv_capture_model.h); tests/kernels/cuda/real_kv_check.cu reads it on the GPU machine.
//
// What it holds: the model's attention shape, the retention policy to rebuild the Minima-KV pages with, and per
// captured layer the dense K and V of every cached token (post-RoPE, exactly as the model produced them, or
// rounded to bf16 when kv_dtype is kBf16) and the post-RoPE fp32 queries of the decode steps that follow the
// prompt. Query i (0-based, of num_queries) sits at position tokens - num_queries + i and attends to the first
// QueryContextTokens(i) = tokens - num_queries + i + 1 tokens (its own K/V included, as a decode step appends
// its token before attending). The last query attends to all `tokens`.
//
// Pages are not stored: they are rebuilt from the dense K/V with the library's bit-exact CPU codecs
// (Fp8EncodeVector; TQ3 = Tq3EncodeVector of the FP8 decode, as PagedCache converts and as CudaConvertFp8ToTq3
// reproduces bit for bit), so a capture stays half the size and any policy can be applied to it.
//
// File format, version 1. All integers little-endian, floats IEEE-754 little-endian. Offsets in bytes.
//    0   8  magic "MKVCAPT1"
//    8   4  u32 version = 1
//   12   4  u32 kv_dtype: 0 = fp32 (4 bytes a value), 1 = bf16 (2 bytes a value, the high half of the fp32)
//   16   4  u32 num_q_heads                (1 .. 8192, a multiple of kv_heads)
//   20   4  u32 kv_heads                   (1 .. 1024)
//   24   4  u32 head_dim                   (64, 128 or 256)
//   28   4  u32 page_tokens                (1 .. 65536)
//   32   4  f32 sm_scale                   (finite, > 0; the model's softmax scale, 1/sqrt(head_dim))
//   36   4  u32 anchor_tokens              (retention policy of the Minima mix)
//   40   4  u32 recent_tokens
//   44   4  u32 tokens                     (cached tokens per layer, 1 .. 2^24)
//   48   8  u64 rotation_seed              (HadamardRotation seed of the TQ3 pages)
//   56   4  u32 num_queries                (1 .. min(tokens, 64))
//   60   4  u32 model_layers               (layers of the model, 1 .. 4096)
//   64   4  u32 num_layers                 (captured layers, 1 .. model_layers)
//   68   4  u32 note_bytes                 (0 .. 4096)
//   72   note_bytes  UTF-8 text, not NUL-terminated: where the capture came from (model, prompt, decode mode)
//   then num_layers layer records, each:
//        4  u32 layer index in the model   (< model_layers; strictly increasing from record to record)
//        4  u32 zero (reserved)
//        K  tokens * kv_heads * head_dim values of kv_dtype, [token][kv_head][coordinate]
//        V  the same for the values
//        Q  num_queries * num_q_heads * head_dim f32, [query][q_head][coordinate]
//   8  u64 FNV-1a 64 of every byte before it (offset basis 0xcbf29ce484222325, prime 0x100000001b3)
// The file size must equal exactly what the header implies. The reader checks every field, the size, the
// checksum and that no value is NaN or infinite, and returns a Status naming the bad value (never aborts).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "minimakv/status.h"

namespace minimakv {

inline constexpr char kKvCaptureMagic[8] = {'M', 'K', 'V', 'C', 'A', 'P', 'T', '1'};
inline constexpr uint32_t kKvCaptureVersion = 1;
inline constexpr size_t kKvCaptureHeaderBytes = 72;  // up to the note
inline constexpr int64_t kKvCaptureMaxTokens = int64_t(1) << 24;
inline constexpr int kKvCaptureMaxQueries = 64;
inline constexpr int kKvCaptureMaxModelLayers = 4096;
inline constexpr size_t kKvCaptureMaxNoteBytes = 4096;

enum class KvCaptureDtype : uint32_t { kFp32 = 0, kBf16 = 1 };

struct KvCaptureLayer {
  int layer = 0;              // index in the model
  std::vector<float> k;       // [tokens][kv_heads][head_dim]; bf16-representable values when kv_dtype is kBf16
  std::vector<float> v;       // same
  std::vector<float> q;       // [num_queries][num_q_heads][head_dim]
};

struct KvCapture {
  KvCaptureDtype kv_dtype = KvCaptureDtype::kBf16;
  int num_q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int page_tokens = 64;
  float sm_scale = 0.0f;
  int anchor_tokens = 256;
  int recent_tokens = 1024;
  int64_t tokens = 0;
  uint64_t rotation_seed = 0;
  int num_queries = 0;
  int model_layers = 0;
  std::string note;
  std::vector<KvCaptureLayer> layers;

  // Tokens query i attends to (see the header comment).
  int64_t QueryContextTokens(int query) const { return tokens - num_queries + query + 1; }
};

// InvalidArgument naming the first bad field, layer, or value (NaN/Inf: layer, tensor, token, head, coordinate).
// A kBf16 capture must hold bf16-representable values (what the file can carry).
Status ValidateKvCapture(const KvCapture& capture);

// Bytes of the file `capture` gives (header, note, layers, checksum); 0 if the sizes overflow.
uint64_t KvCaptureFileBytes(const KvCapture& capture);

// Serializes a valid capture (ValidateKvCapture first) into the file format above.
Status EncodeKvCapture(const KvCapture& capture, std::vector<uint8_t>* bytes);
// Parses and validates a whole file image: Corruption naming the bad field for a wrong magic, version, dtype,
// size that disagrees with the header, checksum or NaN/Inf value; never reads past `bytes`.
Status DecodeKvCapture(std::span<const uint8_t> bytes, KvCapture* out);

// Writes the file (to path + ".tmp", then renamed over path, so a failed write never leaves a partial capture).
Status WriteKvCapture(const KvCapture& capture, const std::string& path);
// Reads and validates a file: NotFound if it cannot be opened, else as DecodeKvCapture (the message names path).
// The header is read first, so a file without the magic, or one whose size is not what its header says, is
// rejected before it is read whole; ResourceExhausted if a file that passes does not fit in memory.
Status ReadKvCapture(const std::string& path, KvCapture* out);

}  // namespace minimakv
