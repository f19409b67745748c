#include "minimakv/kv_capture.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <exception>
#include <iterator>

#include "minimakv/page_layout.h"
#include "minimakv/scalar_formats.h"

namespace minimakv {
namespace {

constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
constexpr size_t kLayerRecordHeaderBytes = 8;
constexpr size_t kChecksumBytes = 8;

uint64_t Fnv1a64(const uint8_t* data, size_t n) {
  uint64_t hash = kFnvOffsetBasis;
  for (size_t i = 0; i < n; ++i) hash = (hash ^ data[i]) * kFnvPrime;
  return hash;
}

size_t DtypeBytes(KvCaptureDtype dtype) { return dtype == KvCaptureDtype::kFp32 ? 4 : 2; }
const char* DtypeName(KvCaptureDtype dtype) { return dtype == KvCaptureDtype::kFp32 ? "fp32" : "bf16"; }

// Little-endian writers and a bounds-checked reader (this file format is little-endian on every host).
void PutU32(std::vector<uint8_t>* out, uint32_t x) {
  for (int i = 0; i < 4; ++i) out->push_back(uint8_t(x >> (8 * i)));
}
void PutU64(std::vector<uint8_t>* out, uint64_t x) {
  for (int i = 0; i < 8; ++i) out->push_back(uint8_t(x >> (8 * i)));
}
void PutF32(std::vector<uint8_t>* out, float x) { PutU32(out, FloatBits(x)); }

uint32_t GetU32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t GetU64(const uint8_t* p) { return uint64_t(GetU32(p)) | uint64_t(GetU32(p + 4)) << 32; }
uint16_t GetU16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }

// Per-layer sizes, in values; false when they overflow (the limits in the header comment keep them far below).
struct LayerSizes {
  uint64_t kv_values = 0;  // per tensor (K or V)
  uint64_t q_values = 0;
  uint64_t record_bytes = 0;
};
LayerSizes SizesOf(const KvCapture& c) {
  LayerSizes s;
  s.kv_values = uint64_t(c.tokens) * uint64_t(c.kv_heads) * uint64_t(c.head_dim);
  s.q_values = uint64_t(c.num_queries) * uint64_t(c.num_q_heads) * uint64_t(c.head_dim);
  s.record_bytes = kLayerRecordHeaderBytes + 2 * s.kv_values * DtypeBytes(c.kv_dtype) + 4 * s.q_values;
  return s;
}

// The shape fields, without the per-layer data (shared by Validate and Decode, which checks them before it
// trusts any size).
Status CheckShape(const KvCapture& c) {
  auto bad = [](const std::string& what, int64_t value, const std::string& want) {
    return Status::InvalidArgument("KV capture: " + what + " " + std::to_string(value) + " " + want);
  };
  if (c.kv_dtype != KvCaptureDtype::kFp32 && c.kv_dtype != KvCaptureDtype::kBf16) {
    return bad("kv_dtype", int64_t(c.kv_dtype), "is neither 0 (fp32) nor 1 (bf16)");
  }
  if (c.kv_heads < 1 || c.kv_heads > 1024) return bad("kv_heads", c.kv_heads, "not in [1, 1024]");
  if (c.num_q_heads < 1 || c.num_q_heads > 8192 || c.num_q_heads % c.kv_heads != 0) {
    return bad("num_q_heads", c.num_q_heads, "must be in [1, 8192] and a multiple of kv_heads " + std::to_string(c.kv_heads));
  }
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256) return bad("head_dim", c.head_dim, "is not 64, 128 or 256");
  if (c.page_tokens < 1 || c.page_tokens > kMaxPageTokens) {
    return bad("page_tokens", c.page_tokens, "not in [1, " + std::to_string(kMaxPageTokens) + "]");
  }
  if (!std::isfinite(c.sm_scale) || !(c.sm_scale > 0.0f)) {
    return Status::InvalidArgument("KV capture: sm_scale " + std::to_string(c.sm_scale) + " is not finite and > 0");
  }
  if (c.anchor_tokens < 0) return bad("anchor_tokens", c.anchor_tokens, "is negative");
  if (c.recent_tokens < 0) return bad("recent_tokens", c.recent_tokens, "is negative");
  if (c.tokens < 1 || c.tokens > kKvCaptureMaxTokens) return bad("tokens", c.tokens, "not in [1, 2^24]");
  if (c.num_queries < 1 || c.num_queries > kKvCaptureMaxQueries || c.num_queries > c.tokens) {
    return bad("num_queries", c.num_queries, "not in [1, min(tokens, 64)]");
  }
  if (c.model_layers < 1 || c.model_layers > kKvCaptureMaxModelLayers) {
    return bad("model_layers", c.model_layers, "not in [1, 4096]");
  }
  if (c.layers.empty() || int64_t(c.layers.size()) > c.model_layers) {
    return bad("captured layer count", int64_t(c.layers.size()), "not in [1, model_layers]");
  }
  if (c.note.size() > kKvCaptureMaxNoteBytes) return bad("note of", int64_t(c.note.size()), "bytes exceeds 4096");
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const int layer = c.layers[i].layer;
    if (layer < 0 || layer >= c.model_layers) {
      return bad("layer index", layer, "not in [0, model_layers " + std::to_string(c.model_layers) + ")");
    }
    if (i > 0 && layer <= c.layers[i - 1].layer) {
      return bad("layer index", layer, "does not follow layer " + std::to_string(c.layers[i - 1].layer) +
                                           " (indices must increase strictly)");
    }
  }
  return Status::Ok();
}

// NaN/Inf check of one tensor, naming where the bad value sits. dims: [rows][heads][head_dim].
Status CheckFinite(const std::vector<float>& x, int layer, const char* tensor, const char* row_name, int heads,
                   int head_dim) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isfinite(x[i])) continue;
    const size_t row = i / (size_t(heads) * head_dim), head = i / head_dim % heads, coordinate = i % head_dim;
    return Status::InvalidArgument("KV capture: layer " + std::to_string(layer) + " " + tensor + " " + row_name + " " +
                                   std::to_string(row) + " head " + std::to_string(head) + " coordinate " +
                                   std::to_string(coordinate) + " is " + (std::isnan(x[i]) ? "NaN" : "infinite"));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateKvCapture(const KvCapture& c) {
  MINIMAKV_RETURN_IF_ERROR(CheckShape(c));
  const LayerSizes sizes = SizesOf(c);
  for (const KvCaptureLayer& l : c.layers) {
    const std::string where = "KV capture: layer " + std::to_string(l.layer) + " ";
    if (l.k.size() != sizes.kv_values || l.v.size() != sizes.kv_values) {
      return Status::InvalidArgument(where + "holds " + std::to_string(l.k.size()) + " K and " +
                                     std::to_string(l.v.size()) + " V values, the shape says " +
                                     std::to_string(sizes.kv_values) + " each");
    }
    if (l.q.size() != sizes.q_values) {
      return Status::InvalidArgument(where + "holds " + std::to_string(l.q.size()) + " query values, the shape says " +
                                     std::to_string(sizes.q_values));
    }
    MINIMAKV_RETURN_IF_ERROR(CheckFinite(l.k, l.layer, "K", "token", c.kv_heads, c.head_dim));
    MINIMAKV_RETURN_IF_ERROR(CheckFinite(l.v, l.layer, "V", "token", c.kv_heads, c.head_dim));
    MINIMAKV_RETURN_IF_ERROR(CheckFinite(l.q, l.layer, "Q", "query", c.num_q_heads, c.head_dim));
    if (c.kv_dtype == KvCaptureDtype::kBf16) {
      for (const std::vector<float>* t : {&l.k, &l.v}) {
        for (size_t i = 0; i < t->size(); ++i) {
          if (Bf16ToFloat(FloatToBf16((*t)[i])) != (*t)[i]) {
            return Status::InvalidArgument(where + (t == &l.k ? "K" : "V") + " value " + std::to_string(i) +
                                           " is not a bf16 value (a bf16 capture stores bf16-rounded K/V)");
          }
        }
      }
    }
  }
  return Status::Ok();
}

uint64_t KvCaptureFileBytes(const KvCapture& c) {
  if (!CheckShape(c).ok()) return 0;
  return kKvCaptureHeaderBytes + c.note.size() + c.layers.size() * SizesOf(c).record_bytes + kChecksumBytes;
}

Status EncodeKvCapture(const KvCapture& c, std::vector<uint8_t>* bytes) {
  MINIMAKV_RETURN_IF_ERROR(ValidateKvCapture(c));
  std::vector<uint8_t>& out = *bytes;
  out.clear();
  out.reserve(size_t(KvCaptureFileBytes(c)));
  out.insert(out.end(), std::begin(kKvCaptureMagic), std::end(kKvCaptureMagic));
  PutU32(&out, kKvCaptureVersion);
  PutU32(&out, uint32_t(c.kv_dtype));
  PutU32(&out, uint32_t(c.num_q_heads));
  PutU32(&out, uint32_t(c.kv_heads));
  PutU32(&out, uint32_t(c.head_dim));
  PutU32(&out, uint32_t(c.page_tokens));
  PutF32(&out, c.sm_scale);
  PutU32(&out, uint32_t(c.anchor_tokens));
  PutU32(&out, uint32_t(c.recent_tokens));
  PutU32(&out, uint32_t(c.tokens));
  PutU64(&out, c.rotation_seed);
  PutU32(&out, uint32_t(c.num_queries));
  PutU32(&out, uint32_t(c.model_layers));
  PutU32(&out, uint32_t(c.layers.size()));
  PutU32(&out, uint32_t(c.note.size()));
  out.insert(out.end(), c.note.begin(), c.note.end());
  for (const KvCaptureLayer& l : c.layers) {
    PutU32(&out, uint32_t(l.layer));
    PutU32(&out, 0);
    for (const std::vector<float>* t : {&l.k, &l.v}) {
      for (float x : *t) {
        if (c.kv_dtype == KvCaptureDtype::kFp32) {
          PutF32(&out, x);
        } else {
          const uint16_t h = FloatToBf16(x);
          out.push_back(uint8_t(h));
          out.push_back(uint8_t(h >> 8));
        }
      }
    }
    for (float x : l.q) PutF32(&out, x);
  }
  PutU64(&out, Fnv1a64(out.data(), out.size()));
  return Status::Ok();
}

namespace {

// The header's fields, checked, into *c (layers sized, placeholder indices) and *note_bytes, and that a file of
// `file_bytes` bytes is as long as the header says (*expected). Reads only the first kKvCaptureHeaderBytes of
// `bytes`, so ReadKvCapture can check a file before reading it whole.
Status DecodeKvCaptureHeader(std::span<const uint8_t> bytes, uint64_t file_bytes, KvCapture* c_out,
                             uint32_t* note_bytes_out, uint64_t* expected_out) {
  auto corrupt = [](const std::string& message) { return Status::Corruption("KV capture: " + message); };
  if (bytes.size() < kKvCaptureHeaderBytes) {
    return corrupt("truncated: " + std::to_string(file_bytes) + " bytes, shorter than the " +
                   std::to_string(kKvCaptureHeaderBytes) + "-byte header");
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kKvCaptureMagic, sizeof(kKvCaptureMagic)) != 0) {
    return corrupt("wrong magic (not a minimakv KV capture: the first 8 bytes are not \"MKVCAPT1\")");
  }
  const uint32_t version = GetU32(p + 8);
  if (version != kKvCaptureVersion) {
    return corrupt("version " + std::to_string(version) + " is not the supported version " +
                   std::to_string(kKvCaptureVersion));
  }
  // Every u32 field must fit an int before it is trusted as one.
  struct Field {
    const char* name;
    size_t offset;
  };
  static constexpr Field kIntFields[] = {{"kv_dtype", 12},      {"num_q_heads", 16},   {"kv_heads", 20},
                                         {"head_dim", 24},      {"page_tokens", 28},   {"anchor_tokens", 36},
                                         {"recent_tokens", 40}, {"tokens", 44},        {"num_queries", 56},
                                         {"model_layers", 60},  {"num_layers", 64},    {"note_bytes", 68}};
  for (const Field& f : kIntFields) {
    const uint32_t x = GetU32(p + f.offset);
    if (x > 0x7fffffffu) return corrupt(std::string(f.name) + " " + std::to_string(x) + " is out of range");
  }
  KvCapture c;
  c.kv_dtype = KvCaptureDtype(GetU32(p + 12));
  c.num_q_heads = int(GetU32(p + 16));
  c.kv_heads = int(GetU32(p + 20));
  c.head_dim = int(GetU32(p + 24));
  c.page_tokens = int(GetU32(p + 28));
  c.sm_scale = FloatFromBits(GetU32(p + 32));
  c.anchor_tokens = int(GetU32(p + 36));
  c.recent_tokens = int(GetU32(p + 40));
  c.tokens = int64_t(GetU32(p + 44));
  c.rotation_seed = GetU64(p + 48);
  c.num_queries = int(GetU32(p + 56));
  c.model_layers = int(GetU32(p + 60));
  const uint32_t num_layers = GetU32(p + 64);
  const uint32_t note_bytes = GetU32(p + 68);
  if (num_layers < 1 || num_layers > uint32_t(kKvCaptureMaxModelLayers)) {
    return corrupt("num_layers " + std::to_string(num_layers) + " not in [1, 4096]");
  }
  if (note_bytes > kKvCaptureMaxNoteBytes) return corrupt("note_bytes " + std::to_string(note_bytes) + " exceeds 4096");
  // The shape, with placeholder layer indices, before any size is computed from it.
  c.layers.resize(num_layers);
  for (uint32_t i = 0; i < num_layers; ++i) c.layers[i].layer = int(i);
  if (Status s = CheckShape(c); !s.ok()) return corrupt(s.message().substr(std::strlen("KV capture: ")));
  const LayerSizes sizes = SizesOf(c);
  const uint64_t expected = kKvCaptureHeaderBytes + note_bytes + num_layers * sizes.record_bytes + kChecksumBytes;
  if (file_bytes != expected) {
    return corrupt(std::string(file_bytes < expected ? "truncated: " : "size mismatch: ") + "the file has " +
                   std::to_string(file_bytes) + " bytes, its header (" + std::to_string(num_layers) + " layers of " +
                   std::to_string(c.tokens) + " tokens, " + DtypeName(c.kv_dtype) + ", " +
                   std::to_string(c.num_queries) + " queries) says " + std::to_string(expected));
  }
  *c_out = std::move(c);
  *note_bytes_out = note_bytes;
  *expected_out = expected;
  return Status::Ok();
}

}  // namespace

Status DecodeKvCapture(std::span<const uint8_t> bytes, KvCapture* out) {
  auto corrupt = [](const std::string& message) { return Status::Corruption("KV capture: " + message); };
  KvCapture c;
  uint32_t note_bytes = 0;
  uint64_t expected = 0;
  MINIMAKV_RETURN_IF_ERROR(DecodeKvCaptureHeader(bytes, bytes.size(), &c, &note_bytes, &expected));
  const uint8_t* p = bytes.data();
  const LayerSizes sizes = SizesOf(c);
  const uint64_t stored_sum = GetU64(p + expected - kChecksumBytes);
  const uint64_t sum = Fnv1a64(p, size_t(expected - kChecksumBytes));
  if (stored_sum != sum) {
    char text[96];
    std::snprintf(text, sizeof(text), "checksum 0x%016llx does not match the bytes (0x%016llx)",
                  (unsigned long long)stored_sum, (unsigned long long)sum);
    return corrupt(text);
  }
  c.note.assign(reinterpret_cast<const char*>(p + kKvCaptureHeaderBytes), note_bytes);
  size_t at = kKvCaptureHeaderBytes + note_bytes;
  const size_t value_bytes = DtypeBytes(c.kv_dtype);
  for (KvCaptureLayer& l : c.layers) {
    const uint32_t layer = GetU32(p + at), reserved = GetU32(p + at + 4);
    if (layer > 0x7fffffffu) return corrupt("layer index " + std::to_string(layer) + " is out of range");
    if (reserved != 0) return corrupt("reserved word of layer " + std::to_string(layer) + " is not zero");
    l.layer = int(layer);
    at += kLayerRecordHeaderBytes;
    for (std::vector<float>* t : {&l.k, &l.v}) {
      t->resize(size_t(sizes.kv_values));
      for (float& x : *t) {
        x = value_bytes == 4 ? FloatFromBits(GetU32(p + at)) : Bf16ToFloat(GetU16(p + at));
        at += value_bytes;
      }
    }
    l.q.resize(size_t(sizes.q_values));
    for (float& x : l.q) {
      x = FloatFromBits(GetU32(p + at));
      at += 4;
    }
  }
  if (Status s = ValidateKvCapture(c); !s.ok()) return corrupt(s.message().substr(std::strlen("KV capture: ")));
  *out = std::move(c);
  return Status::Ok();
}

Status WriteKvCapture(const KvCapture& capture, const std::string& path) {
  std::vector<uint8_t> bytes;
  MINIMAKV_RETURN_IF_ERROR(EncodeKvCapture(capture, &bytes));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::NotFound("cannot write KV capture '" + tmp + "'");
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return Status::ResourceExhausted("failed writing " + std::to_string(bytes.size()) + " bytes to '" + tmp + "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::NotFound("cannot rename '" + tmp + "' to '" + path + "'");
  }
  return Status::Ok();
}

Status ReadKvCapture(const std::string& path, KvCapture* out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::NotFound("cannot open KV capture '" + path + "'");
  const std::streamoff size = in.tellg();
  in.seekg(0);
  if (size < 0 || !in) return Status::Corruption("KV capture '" + path + "': cannot tell its size");
  // The header first: a file that is not a capture (a model file given by mistake) is rejected on its first bytes
  // instead of being read whole.
  std::vector<uint8_t> bytes(size_t(std::min<std::streamoff>(size, std::streamoff(kKvCaptureHeaderBytes))));
  in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!in) return Status::Corruption("KV capture '" + path + "': read error");
  if (bytes.size() == kKvCaptureHeaderBytes && std::memcmp(bytes.data(), kKvCaptureMagic, sizeof(kKvCaptureMagic)) == 0) {
    // A header that disagrees with the file's size is reported before the file is read whole.
    KvCapture header;
    uint32_t note_bytes = 0;
    uint64_t expected = 0;
    if (Status s = DecodeKvCaptureHeader(bytes, uint64_t(size), &header, &note_bytes, &expected); !s.ok()) {
      return Status::Corruption("'" + path + "': " + s.message());
    }
    try {
      bytes.resize(size_t(size));
    } catch (const std::exception&) {
      return Status::ResourceExhausted("KV capture '" + path + "': cannot hold its " + std::to_string(size) +
                                       " bytes in memory");
    }
    in.read(reinterpret_cast<char*>(bytes.data() + kKvCaptureHeaderBytes),
            std::streamsize(bytes.size() - kKvCaptureHeaderBytes));
    if (!in) return Status::Corruption("KV capture '" + path + "': read error");
  }
  Status s = DecodeKvCapture(bytes, out);
  if (!s.ok()) return Status::Corruption("'" + path + "': " + s.message());
  return Status::Ok();
}

}  // namespace minimakv
