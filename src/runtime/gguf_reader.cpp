#include "minimakv/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include "minimakv/scalar_formats.h"

namespace minimakv {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747u;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kGgufVersion3 = 3;
// Nested metadata arrays are legal but no model uses more than one level; a cap keeps a hostile file from
// recursing the parser off the stack.
constexpr int kMaxArrayNesting = 4;
// Block sizes, ref: ggml-common.h (QK4_0 = QK4_1 = QK8_0 = 32 elements; QK_K = 256 elements per super-block).
constexpr int64_t kQk = 32;
constexpr int64_t kQkK = 256;
constexpr int64_t kQ4_0BlockBytes = 2 + kQk / 2;                 // fp16 d, 32 nibbles
constexpr int64_t kQ4_1BlockBytes = 2 + 2 + kQk / 2;             // fp16 d, fp16 m, 32 nibbles
constexpr int64_t kQ8_0BlockBytes = 2 + kQk;                     // fp16 d, 32 int8
constexpr int64_t kKScaleBytes = 12;                             // 8 x (6-bit scale, 6-bit min)
constexpr int64_t kQ4_KBlockBytes = 2 + 2 + kKScaleBytes + kQkK / 2;               // 144
constexpr int64_t kQ5_KBlockBytes = 2 + 2 + kKScaleBytes + kQkK / 8 + kQkK / 2;    // 176
constexpr int64_t kQ6_KBlockBytes = kQkK / 2 + kQkK / 4 + kQkK / 16 + 2;           // 210

uint16_t LoadU16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

// Bounds-checked little-endian cursor over the file bytes.
class Cursor {
 public:
  Cursor(const uint8_t* bytes, size_t size) : bytes_(bytes), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  Status Read(T* out, const char* what) {
    if (remaining() < sizeof(T)) {
      return Status::Corruption("GGUF truncated reading " + std::string(what) + " at byte " + std::to_string(pos_) +
                                " of " + std::to_string(size_));
    }
    std::memcpy(out, bytes_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }
  Status ReadString(std::string* out, const char* what) {
    uint64_t length = 0;
    MINIMAKV_RETURN_IF_ERROR(Read(&length, what));
    if (length > remaining()) {
      return Status::Corruption("GGUF " + std::string(what) + " length " + std::to_string(length) + " at byte " +
                                std::to_string(pos_ - sizeof(length)) + " exceeds the " +
                                std::to_string(remaining()) + " bytes left");
    }
    out->assign(reinterpret_cast<const char*>(bytes_ + pos_), size_t(length));
    pos_ += size_t(length);
    return Status::Ok();
  }

 private:
  const uint8_t* bytes_;
  size_t size_;
  size_t pos_ = 0;
};

bool IsKnownValueType(uint32_t t) { return t <= uint32_t(GgufValueType::kFloat64); }

// Smallest number of bytes one element of this type occupies; bounds array counts before allocating.
size_t MinElementBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8: case GgufValueType::kInt8: case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16: case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32: case GgufValueType::kInt32: case GgufValueType::kFloat32: return 4;
    case GgufValueType::kString: return 8;       // the length prefix
    case GgufValueType::kArray: return 4 + 8;    // element type + count
    case GgufValueType::kUint64: case GgufValueType::kInt64: case GgufValueType::kFloat64: return 8;
  }
  return 1;
}

Status ReadScalar(Cursor* c, GgufValueType t, GgufValue* v) {
  switch (t) {
    case GgufValueType::kUint8: { uint8_t x; MINIMAKV_RETURN_IF_ERROR(c->Read(&x, "uint8 value")); v->as_uint = x; break; }
    case GgufValueType::kInt8: { int8_t x; MINIMAKV_RETURN_IF_ERROR(c->Read(&x, "int8 value")); v->as_int = x; break; }
    case GgufValueType::kUint16: { uint16_t x; MINIMAKV_RETURN_IF_ERROR(c->Read(&x, "uint16 value")); v->as_uint = x; break; }
    case GgufValueType::kInt16: { int16_t x; MINIMAKV_RETURN_IF_ERROR(c->Read(&x, "int16 value")); v->as_int = x; break; }
    case GgufValueType::kUint32: { uint32_t x; MINIMAKV_RETURN_IF_ERROR(c->Read(&x, "uint32 value")); v->as_uint = x; break; }
    case GgufValueType::kInt32: { int32_t x; MINIMAKV_RETURN_IF_ERROR(c->Read(&x, "int32 value")); v->as_int = x; break; }
    case GgufValueType::kFloat32: { float x; MINIMAKV_RETURN_IF_ERROR(c->Read(&x, "float32 value")); v->as_float = x; break; }
    case GgufValueType::kBool: {
      uint8_t x;
      MINIMAKV_RETURN_IF_ERROR(c->Read(&x, "bool value"));
      if (x > 1) return Status::Corruption("GGUF bool value " + std::to_string(x) + " is neither 0 nor 1");
      v->as_uint = x;
      break;
    }
    case GgufValueType::kUint64: { uint64_t x; MINIMAKV_RETURN_IF_ERROR(c->Read(&x, "uint64 value")); v->as_uint = x; break; }
    case GgufValueType::kInt64: { int64_t x; MINIMAKV_RETURN_IF_ERROR(c->Read(&x, "int64 value")); v->as_int = x; break; }
    case GgufValueType::kFloat64: { double x; MINIMAKV_RETURN_IF_ERROR(c->Read(&x, "float64 value")); v->as_float = x; break; }
    case GgufValueType::kString: return c->ReadString(&v->string, "string value");
    case GgufValueType::kArray: return Status::Internal("ReadScalar called on an array");
  }
  return Status::Ok();
}

bool IsUnsignedLike(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kUint16 || t == GgufValueType::kUint32 ||
         t == GgufValueType::kUint64 || t == GgufValueType::kBool;
}
bool IsSigned(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kInt64;
}
bool IsFloat(GgufValueType t) { return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64; }

Status ReadValue(Cursor* c, GgufValueType t, GgufValue* v, int depth) {
  v->type = t;
  if (t != GgufValueType::kArray) return ReadScalar(c, t, v);
  if (depth >= kMaxArrayNesting) {
    return Status::Corruption("GGUF arrays nested deeper than " + std::to_string(kMaxArrayNesting));
  }
  uint32_t element_type = 0;
  MINIMAKV_RETURN_IF_ERROR(c->Read(&element_type, "array element type"));
  if (!IsKnownValueType(element_type)) {
    return Status::Corruption("GGUF array element type " + std::to_string(element_type) + " is not a GGUF value type");
  }
  uint64_t count = 0;
  MINIMAKV_RETURN_IF_ERROR(c->Read(&count, "array count"));
  const GgufValueType et = GgufValueType(element_type);
  if (count > c->remaining() / MinElementBytes(et)) {
    return Status::Corruption("GGUF array count " + std::to_string(count) + " of " +
                              std::string(GgufValueTypeName(et)) + " cannot fit in the " +
                              std::to_string(c->remaining()) + " bytes left");
  }
  v->array_type = et;
  v->array_count = count;
  GgufValue element;
  if (et == GgufValueType::kString) {
    v->strings.resize(size_t(count));
    for (auto& s : v->strings) MINIMAKV_RETURN_IF_ERROR(c->ReadString(&s, "array string"));
  } else if (et == GgufValueType::kArray) {
    v->arrays.resize(size_t(count));
    for (auto& a : v->arrays) MINIMAKV_RETURN_IF_ERROR(ReadValue(c, et, &a, depth + 1));
  } else {
    if (IsFloat(et)) v->floats.reserve(size_t(count));
    else if (IsSigned(et)) v->ints.reserve(size_t(count));
    else v->uints.reserve(size_t(count));
    for (uint64_t i = 0; i < count; ++i) {
      MINIMAKV_RETURN_IF_ERROR(ReadScalar(c, et, &element));
      if (IsFloat(et)) v->floats.push_back(element.as_float);
      else if (IsSigned(et)) v->ints.push_back(element.as_int);
      else v->uints.push_back(element.as_uint);
    }
  }
  return Status::Ok();
}

void DequantQ4_0(const uint8_t* b, float* y) {
  const float d = Fp16ToFloat(LoadU16(b));
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQk / 2; ++j) {
    y[j] = float(int(qs[j] & 0x0F) - 8) * d;
    y[j + kQk / 2] = float(int(qs[j] >> 4) - 8) * d;
  }
}
void DequantQ4_1(const uint8_t* b, float* y) {
  const float d = Fp16ToFloat(LoadU16(b));
  const float m = Fp16ToFloat(LoadU16(b + 2));
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQk / 2; ++j) {
    y[j] = float(qs[j] & 0x0F) * d + m;
    y[j + kQk / 2] = float(qs[j] >> 4) * d + m;
  }
}
void DequantQ8_0(const uint8_t* b, float* y) {
  const float d = Fp16ToFloat(LoadU16(b));
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < kQk; ++j) y[j] = float(qs[j]) * d;
}
// The 12 scale bytes of Q4_K/Q5_K hold 8 (scale, min) pairs of 6 bits: pairs 0..3 in the low 6 bits of
// bytes 0..3 (scales) and 4..7 (mins); pairs 4..7 take their low 4 bits from bytes 8..11 (scale low nibble,
// min high nibble) and their top 2 bits from the spare top bits of bytes 0..3 (scales) and 4..7 (mins).
void KScaleMin(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
// Q4_K: 8 sub-blocks of 32; each 32 bytes of qs hold sub-blocks 2i (low nibbles) and 2i+1 (high nibbles).
void DequantQ4_K(const uint8_t* b, float* y) {
  const float d = Fp16ToFloat(LoadU16(b));
  const float dmin = Fp16ToFloat(LoadU16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 4 + kKScaleBytes;
  for (int pair = 0; pair < 4; ++pair) {
    int sc0, m0, sc1, m1;
    KScaleMin(2 * pair, scales, &sc0, &m0);
    KScaleMin(2 * pair + 1, scales, &sc1, &m1);
    const float d0 = d * float(sc0), min0 = dmin * float(m0);
    const float d1 = d * float(sc1), min1 = dmin * float(m1);
    for (int l = 0; l < 32; ++l) {
      y[l] = d0 * float(qs[l] & 0x0F) - min0;
      y[l + 32] = d1 * float(qs[l] >> 4) - min1;
    }
    y += 64;
    qs += 32;
  }
}
// Q5_K: as Q4_K plus a fifth bit per element: bit 2i (sub-block 2i) or 2i+1 of qh[l].
void DequantQ5_K(const uint8_t* b, float* y) {
  const float d = Fp16ToFloat(LoadU16(b));
  const float dmin = Fp16ToFloat(LoadU16(b + 2));
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 4 + kKScaleBytes;
  const uint8_t* qs = qh + kQkK / 8;
  for (int pair = 0; pair < 4; ++pair) {
    int sc0, m0, sc1, m1;
    KScaleMin(2 * pair, scales, &sc0, &m0);
    KScaleMin(2 * pair + 1, scales, &sc1, &m1);
    const float d0 = d * float(sc0), min0 = dmin * float(m0);
    const float d1 = d * float(sc1), min1 = dmin * float(m1);
    const uint8_t bit0 = uint8_t(1u << (2 * pair));
    const uint8_t bit1 = uint8_t(2u << (2 * pair));
    for (int l = 0; l < 32; ++l) {
      y[l] = d0 * float((qs[l] & 0x0F) + ((qh[l] & bit0) ? 16 : 0)) - min0;
      y[l + 32] = d1 * float((qs[l] >> 4) + ((qh[l] & bit1) ? 16 : 0)) - min1;
    }
    y += 64;
    qs += 32;
  }
}
// Q6_K: two halves of 128 elements. In a half, element l + 32 k (l < 32, k = 0..3) takes its low 4 bits from
// ql[l + 32 (k % 2)] (low nibble for k < 2, high nibble for k >= 2) and its top 2 bits from bits 2k..2k+1 of
// qh[l]; the 6-bit value is offset by 32. Each 16 elements share one int8 scale.
void DequantQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + kQkK / 2;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + kQkK / 2 + kQkK / 4);
  const float d = Fp16ToFloat(LoadU16(b + kQkK / 2 + kQkK / 4 + kQkK / 16));
  constexpr int kQ6Offset = 32;
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = int((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - kQ6Offset;
      const int q2 = int((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - kQ6Offset;
      const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - kQ6Offset;
      const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - kQ6Offset;
      y[l] = d * float(sc[is]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

std::string_view GgmlTypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ4_1: return "Q4_1";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ4_K: return "Q4_K";
    case GgmlType::kQ5_K: return "Q5_K";
    case GgmlType::kQ6_K: return "Q6_K";
    case GgmlType::kBf16: return "BF16";
  }
  return "unknown";
}

Status GgmlTypeBlock(uint32_t type_id, int64_t* block_elements, int64_t* block_bytes) {
  switch (GgmlType(type_id)) {
    case GgmlType::kF32: *block_elements = 1; *block_bytes = 4; return Status::Ok();
    case GgmlType::kF16: *block_elements = 1; *block_bytes = 2; return Status::Ok();
    case GgmlType::kBf16: *block_elements = 1; *block_bytes = 2; return Status::Ok();
    case GgmlType::kQ4_0: *block_elements = kQk; *block_bytes = kQ4_0BlockBytes; return Status::Ok();
    case GgmlType::kQ4_1: *block_elements = kQk; *block_bytes = kQ4_1BlockBytes; return Status::Ok();
    case GgmlType::kQ8_0: *block_elements = kQk; *block_bytes = kQ8_0BlockBytes; return Status::Ok();
    case GgmlType::kQ4_K: *block_elements = kQkK; *block_bytes = kQ4_KBlockBytes; return Status::Ok();
    case GgmlType::kQ5_K: *block_elements = kQkK; *block_bytes = kQ5_KBlockBytes; return Status::Ok();
    case GgmlType::kQ6_K: *block_elements = kQkK; *block_bytes = kQ6_KBlockBytes; return Status::Ok();
  }
  return Status::Unsupported("ggml tensor type " + std::to_string(type_id) +
                             " is not supported (F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K are)");
}

Status DequantizeToFloat(GgmlType type, const void* data, int64_t count, float* out) {
  int64_t block_elements = 0, block_bytes = 0;
  MINIMAKV_RETURN_IF_ERROR(GgmlTypeBlock(uint32_t(type), &block_elements, &block_bytes));
  if (count < 0 || count % block_elements != 0) {
    return Status::InvalidArgument("dequantize count " + std::to_string(count) + " is not a multiple of the " +
                                   std::string(GgmlTypeName(type)) + " block of " + std::to_string(block_elements));
  }
  const uint8_t* b = static_cast<const uint8_t*>(data);
  const int64_t blocks = count / block_elements;
  switch (type) {
    case GgmlType::kF32: std::memcpy(out, b, size_t(count) * 4); break;
    case GgmlType::kF16: for (int64_t i = 0; i < count; ++i) out[i] = Fp16ToFloat(LoadU16(b + 2 * i)); break;
    case GgmlType::kBf16: for (int64_t i = 0; i < count; ++i) out[i] = Bf16ToFloat(LoadU16(b + 2 * i)); break;
    case GgmlType::kQ4_0: for (int64_t i = 0; i < blocks; ++i) DequantQ4_0(b + i * block_bytes, out + i * kQk); break;
    case GgmlType::kQ4_1: for (int64_t i = 0; i < blocks; ++i) DequantQ4_1(b + i * block_bytes, out + i * kQk); break;
    case GgmlType::kQ8_0: for (int64_t i = 0; i < blocks; ++i) DequantQ8_0(b + i * block_bytes, out + i * kQk); break;
    case GgmlType::kQ4_K: for (int64_t i = 0; i < blocks; ++i) DequantQ4_K(b + i * block_bytes, out + i * kQkK); break;
    case GgmlType::kQ5_K: for (int64_t i = 0; i < blocks; ++i) DequantQ5_K(b + i * block_bytes, out + i * kQkK); break;
    case GgmlType::kQ6_K: for (int64_t i = 0; i < blocks; ++i) DequantQ6_K(b + i * block_bytes, out + i * kQkK); break;
  }
  return Status::Ok();
}

int64_t GgufTensorInfo::rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < dims.size(); ++i) r *= dims[i];
  return r;
}

GgufFile::~GgufFile() {
  if (map_ != nullptr) munmap(map_, map_size_);
}

Status GgufFile::Open(const std::string& path, std::unique_ptr<GgufFile>* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::NotFound("cannot open GGUF file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::NotFound("'" + path + "' is not a regular file");
  }
  auto file = std::make_unique<GgufFile>();
  file->size_ = size_t(st.st_size);
  if (file->size_ > 0) {
    void* map = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      ::close(fd);
      return Status::Internal("mmap of '" + path + "' failed: " + std::strerror(errno));
    }
    file->map_ = map;
    file->map_size_ = file->size_;
    file->bytes_ = static_cast<const uint8_t*>(map);
  }
  ::close(fd);
  Status s = file->Parse();
  if (!s.ok()) return s.code() == StatusCode::kCorruption ? Status::Corruption("'" + path + "': " + s.message()) : s;
  *out = std::move(file);
  return Status::Ok();
}

Status GgufFile::OpenBuffer(const uint8_t* bytes, size_t size, std::unique_ptr<GgufFile>* out) {
  auto file = std::make_unique<GgufFile>();
  file->owned_.assign(bytes, bytes + size);
  file->bytes_ = file->owned_.data();
  file->size_ = size;
  MINIMAKV_RETURN_IF_ERROR(file->Parse());
  *out = std::move(file);
  return Status::Ok();
}

Status GgufFile::Parse() {
  Cursor c(bytes_, size_);
  uint32_t magic = 0;
  MINIMAKV_RETURN_IF_ERROR(c.Read(&magic, "magic"));
  if (magic != kGgufMagic) return Status::Corruption("not a GGUF file: magic 0x" + [&] {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", magic);
    return std::string(buf);
  }());
  MINIMAKV_RETURN_IF_ERROR(c.Read(&version_, "version"));
  if (version_ != kGgufVersion3) {
    return Status::Unsupported("GGUF version " + std::to_string(version_) + " (only version 3 is supported)");
  }
  uint64_t tensor_count = 0, kv_count = 0;
  MINIMAKV_RETURN_IF_ERROR(c.Read(&tensor_count, "tensor count"));
  MINIMAKV_RETURN_IF_ERROR(c.Read(&kv_count, "metadata count"));
  // Minimum encoded sizes: a key-value is key length (8) + type (4) + 1 value byte; a tensor info is name
  // length (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
  constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
  constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
  if (kv_count > c.remaining() / kMinKvBytes) {
    return Status::Corruption("GGUF metadata count " + std::to_string(kv_count) + " cannot fit in " +
                              std::to_string(size_) + " bytes");
  }
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key;
    MINIMAKV_RETURN_IF_ERROR(c.ReadString(&key, "metadata key"));
    uint32_t type = 0;
    MINIMAKV_RETURN_IF_ERROR(c.Read(&type, "metadata value type"));
    if (!IsKnownValueType(type)) {
      return Status::Corruption("GGUF metadata '" + key + "' has value type " + std::to_string(type) +
                                ", not a GGUF value type");
    }
    GgufValue value;
    MINIMAKV_RETURN_IF_ERROR(ReadValue(&c, GgufValueType(type), &value, 0));
    if (!metadata_.emplace(key, std::move(value)).second) {
      return Status::Corruption("GGUF metadata key '" + key + "' appears twice");
    }
  }
  if (const GgufValue* a = Find("general.alignment")) {
    if (a->type != GgufValueType::kUint32 || a->as_uint == 0 || (a->as_uint & (a->as_uint - 1)) != 0) {
      return Status::Corruption("GGUF general.alignment must be a uint32 power of two, got " +
                                std::to_string(a->as_uint) + " of type " + std::string(GgufValueTypeName(a->type)));
    }
    alignment_ = a->as_uint;
  }

  if (tensor_count > c.remaining() / kMinTensorInfoBytes) {
    return Status::Corruption("GGUF tensor count " + std::to_string(tensor_count) + " cannot fit in " +
                              std::to_string(size_) + " bytes");
  }
  tensors_.resize(size_t(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo& t = tensors_[size_t(i)];
    MINIMAKV_RETURN_IF_ERROR(c.ReadString(&t.name, "tensor name"));
    uint32_t n_dims = 0;
    MINIMAKV_RETURN_IF_ERROR(c.Read(&n_dims, "tensor rank"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return Status::Corruption("GGUF tensor '" + t.name + "' has rank " + std::to_string(n_dims) + " (1.." +
                                std::to_string(kMaxDims) + " allowed)");
    }
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      MINIMAKV_RETURN_IF_ERROR(c.Read(&dim, "tensor dimension"));
      if (dim == 0 || dim > uint64_t(std::numeric_limits<int64_t>::max()) / uint64_t(elements)) {
        return Status::Corruption("GGUF tensor '" + t.name + "' dimension " + std::to_string(d) + " = " +
                                  std::to_string(dim) + " is zero or overflows the element count");
      }
      t.dims.push_back(int64_t(dim));
      elements *= int64_t(dim);
    }
    t.num_elements = elements;
    uint32_t type = 0;
    MINIMAKV_RETURN_IF_ERROR(c.Read(&type, "tensor type"));
    int64_t block_elements = 0, block_bytes = 0;
    Status s = GgmlTypeBlock(type, &block_elements, &block_bytes);
    if (!s.ok()) return Status::Unsupported("GGUF tensor '" + t.name + "': " + s.message());
    t.type = GgmlType(type);
    if (t.dims[0] % block_elements != 0) {
      return Status::Corruption("GGUF tensor '" + t.name + "' row length " + std::to_string(t.dims[0]) +
                                " is not a multiple of the " + std::string(GgmlTypeName(t.type)) + " block of " +
                                std::to_string(block_elements));
    }
    const uint64_t blocks = uint64_t(elements / block_elements);
    if (blocks > size_ / uint64_t(block_bytes)) {  // also keeps blocks * block_bytes from overflowing
      return Status::Corruption("GGUF tensor '" + t.name + "' of " + std::to_string(elements) +
                                " elements cannot fit in a " + std::to_string(size_) + "-byte file");
    }
    t.size_bytes = blocks * uint64_t(block_bytes);
    MINIMAKV_RETURN_IF_ERROR(c.Read(&t.offset_bytes, "tensor offset"));
    if (t.offset_bytes % alignment_ != 0) {
      return Status::Corruption("GGUF tensor '" + t.name + "' offset " + std::to_string(t.offset_bytes) +
                                " is not a multiple of the alignment " + std::to_string(alignment_));
    }
    if (!tensor_index_.emplace(t.name, size_t(i)).second) {
      return Status::Corruption("GGUF tensor name '" + t.name + "' appears twice");
    }
  }
  // The data section starts at the next multiple of the alignment after the tensor table.
  const uint64_t data_start = (uint64_t(c.pos()) + alignment_ - 1) / alignment_ * alignment_;
  if (tensor_count > 0 && data_start > size_) {
    return Status::Corruption("GGUF data section would start at byte " + std::to_string(data_start) +
                              ", past the end of the " + std::to_string(size_) + "-byte file");
  }
  const uint64_t data_bytes = tensor_count > 0 ? size_ - data_start : 0;
  for (GgufTensorInfo& t : tensors_) {
    if (t.offset_bytes > data_bytes || t.size_bytes > data_bytes - t.offset_bytes) {
      return Status::Corruption("GGUF tensor '" + t.name + "' bytes [" + std::to_string(t.offset_bytes) + ", +" +
                                std::to_string(t.size_bytes) + ") run past the " + std::to_string(data_bytes) +
                                "-byte data section (file truncated?)");
    }
    t.data = bytes_ + data_start + t.offset_bytes;
  }
  return Status::Ok();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
Status Missing(std::string_view key) { return Status::NotFound("GGUF metadata key '" + std::string(key) + "' is missing"); }
Status WrongType(std::string_view key, const GgufValue& v, const char* wanted) {
  return Status::InvalidArgument("GGUF metadata '" + std::string(key) + "' is " +
                                 std::string(GgufValueTypeName(v.type)) + ", expected " + wanted);
}
}  // namespace

Status GgufFile::GetString(std::string_view key, std::string* out) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (v->type != GgufValueType::kString) return WrongType(key, *v, "string");
  *out = v->string;
  return Status::Ok();
}

Status GgufFile::GetUint32(std::string_view key, uint32_t* out) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (IsUnsignedLike(v->type) && v->type != GgufValueType::kBool && v->as_uint <= 0xFFFFFFFFull) {
    *out = uint32_t(v->as_uint);
    return Status::Ok();
  }
  if (IsSigned(v->type) && v->as_int >= 0 && v->as_int <= int64_t(0xFFFFFFFFll)) {
    *out = uint32_t(v->as_int);
    return Status::Ok();
  }
  return WrongType(key, *v, "an integer in [0, 2^32)");
}

Status GgufFile::GetFloat32(std::string_view key, float* out) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (IsFloat(v->type)) *out = float(v->as_float);
  else if (IsSigned(v->type)) *out = float(v->as_int);
  else if (IsUnsignedLike(v->type) && v->type != GgufValueType::kBool) *out = float(v->as_uint);
  else return WrongType(key, *v, "a number");
  return Status::Ok();
}

Status GgufFile::GetBool(std::string_view key, bool* out) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (v->type != GgufValueType::kBool) return WrongType(key, *v, "bool");
  *out = v->as_uint != 0;
  return Status::Ok();
}

Status GgufFile::GetStringArray(std::string_view key, const std::vector<std::string>** out) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (v->type != GgufValueType::kArray || v->array_type != GgufValueType::kString) {
    return WrongType(key, *v, "an array of strings");
  }
  *out = &v->strings;
  return Status::Ok();
}

Status GgufFile::GetIntArray(std::string_view key, std::vector<int64_t>* out) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Missing(key);
  if (v->type != GgufValueType::kArray || !(IsSigned(v->array_type) || IsUnsignedLike(v->array_type))) {
    return WrongType(key, *v, "an array of integers");
  }
  out->clear();
  if (IsSigned(v->array_type)) {
    *out = v->ints;
  } else {
    for (uint64_t u : v->uints) {
      if (u > uint64_t(std::numeric_limits<int64_t>::max())) return WrongType(key, *v, "integers below 2^63");
      out->push_back(int64_t(u));
    }
  }
  return Status::Ok();
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace minimakv
