// GgufFile: a read-only view of a GGUF v3 model file (the llama.cpp / ggml container): header, metadata
// key-values (every value type, arrays included), the tensor table and the tensor bytes, which stay in the
// memory-mapped file. ref: ggml docs/gguf.md (file layout, value type ids, alignment rule).
//
// Every length, count, offset and type read from the file is checked against the file size before use, so a
// truncated or corrupt file yields Status::Corruption (or Unsupported for a valid but unknown tensor type)
// naming the bad value; it never reads out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "minimakv/status.h"

namespace minimakv {

// Metadata value type ids, as stored in the file.
enum class GgufValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7,
  kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
std::string_view GgufValueTypeName(GgufValueType type);

// One metadata value. Scalars fill exactly one of as_uint / as_int / as_float (bool and unsigned types use
// as_uint, signed ones as_int, floats as_float); strings fill `string`; arrays set array_type and fill
// `strings` (string elements), `uints`/`ints`/`floats` (scalar elements, by the same rule) or `arrays`
// (nested arrays). array_count is the element count in every case.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  uint64_t as_uint = 0;
  int64_t as_int = 0;
  double as_float = 0.0;
  std::string string;
  GgufValueType array_type = GgufValueType::kUint8;
  uint64_t array_count = 0;
  std::vector<std::string> strings;
  std::vector<uint64_t> uints;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<GgufValue> arrays;
};

// ggml tensor element types this reader can dequantize (ids as in ggml.h's enum ggml_type).
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ8_0 = 8, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBf16 = 30,
};
std::string_view GgmlTypeName(GgmlType type);
// Elements per block and bytes per block; Unsupported for a type id this reader does not know.
Status GgmlTypeBlock(uint32_t type_id, int64_t* block_elements, int64_t* block_bytes);
// Dequantizes `count` elements (a multiple of the type's block size) starting at `data` into fp32 `out`.
// `data` must hold count / block_elements * block_bytes bytes.
Status DequantizeToFloat(GgmlType type, const void* data, int64_t count, float* out);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (row) length; at most 4 dims
  GgmlType type = GgmlType::kF32;
  uint64_t offset_bytes = 0;  // relative to the start of the data section
  uint64_t size_bytes = 0;
  int64_t num_elements = 0;
  const uint8_t* data = nullptr;  // inside the mapped file
  int64_t rows() const;  // product of dims[1..]
};

class GgufFile {
 public:
  // Maximum tensor rank ggml supports (GGML_MAX_DIMS).
  static constexpr uint32_t kMaxDims = 4;
  // Alignment when general.alignment is absent (ggml docs/gguf.md: GGUF_DEFAULT_ALIGNMENT).
  static constexpr uint64_t kDefaultAlignment = 32;

  GgufFile() = default;
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  // Maps and parses the file at `path`. NotFound if it cannot be opened, Corruption on a malformed file.
  static Status Open(const std::string& path, std::unique_ptr<GgufFile>* out);
  // Parses an in-memory copy (tests, fuzzing). The bytes are copied.
  static Status OpenBuffer(const uint8_t* bytes, size_t size, std::unique_ptr<GgufFile>* out);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // Lookups. NotFound names the missing key; InvalidArgument names the key and its actual type.
  const GgufValue* Find(std::string_view key) const;
  Status GetString(std::string_view key, std::string* out) const;
  Status GetUint32(std::string_view key, uint32_t* out) const;  // any integer type in range
  Status GetFloat32(std::string_view key, float* out) const;    // any float or integer type
  Status GetBool(std::string_view key, bool* out) const;
  Status GetStringArray(std::string_view key, const std::vector<std::string>** out) const;
  Status GetIntArray(std::string_view key, std::vector<int64_t>* out) const;  // any integer element type
  const GgufTensorInfo* FindTensor(std::string_view name) const;

 private:
  Status Parse();

  std::vector<uint8_t> owned_;        // OpenBuffer copy
  void* map_ = nullptr;               // Open mapping
  size_t map_size_ = 0;
  const uint8_t* bytes_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace minimakv
