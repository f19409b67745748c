// GgufTestWriter: builds small GGUF v3 files in memory for tests (ref: ggml docs/gguf.md layout). Tests use
// it to make tiny models and tokenizers, and as the valid starting point of the corruption tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

namespace minimakv::testing {

// A temp-file path unique to this process: ctest -j runs tests as parallel processes, and one process
// rewriting a file that another has mmapped gets the reader SIGBUS (seen in CI under ASan).
inline std::string UniqueTempPath(const std::string& stem) {
  return ::testing::TempDir() + "/" + stem + "." + std::to_string(::getpid()) + ".gguf";
}

class GgufTestWriter {
 public:
  explicit GgufTestWriter(uint32_t alignment = 32) : alignment_(alignment) {}

  void AddU8(const std::string& k, uint8_t v) { Key(k, 0); Put(v); }
  void AddI8(const std::string& k, int8_t v) { Key(k, 1); Put(v); }
  void AddU16(const std::string& k, uint16_t v) { Key(k, 2); Put(v); }
  void AddI16(const std::string& k, int16_t v) { Key(k, 3); Put(v); }
  void AddU32(const std::string& k, uint32_t v) { Key(k, 4); Put(v); }
  void AddI32(const std::string& k, int32_t v) { Key(k, 5); Put(v); }
  void AddF32(const std::string& k, float v) { Key(k, 6); Put(v); }
  void AddBool(const std::string& k, bool v) { Key(k, 7); Put(uint8_t(v ? 1 : 0)); }
  void AddString(const std::string& k, const std::string& v) { Key(k, 8); Str(&kv_, v); }
  void AddU64(const std::string& k, uint64_t v) { Key(k, 10); Put(v); }
  void AddI64(const std::string& k, int64_t v) { Key(k, 11); Put(v); }
  void AddF64(const std::string& k, double v) { Key(k, 12); Put(v); }
  void AddStringArray(const std::string& k, const std::vector<std::string>& v) {
    Key(k, 9);
    Put(uint32_t(8));
    Put(uint64_t(v.size()));
    for (const auto& s : v) Str(&kv_, s);
  }
  void AddI32Array(const std::string& k, const std::vector<int32_t>& v) {
    Key(k, 9);
    Put(uint32_t(5));
    Put(uint64_t(v.size()));
    for (int32_t x : v) Put(x);
  }
  void AddF32Array(const std::string& k, const std::vector<float>& v) {
    Key(k, 9);
    Put(uint32_t(6));
    Put(uint64_t(v.size()));
    for (float x : v) Put(x);
  }
  // dims in ggml order (dims[0] = row length); `bytes` already encoded in `type_id`.
  void AddTensor(const std::string& name, const std::vector<int64_t>& dims, uint32_t type_id,
                 const std::vector<uint8_t>& bytes) {
    Str(&infos_, name);
    Append(&infos_, uint32_t(dims.size()));
    for (int64_t d : dims) Append(&infos_, uint64_t(d));
    Append(&infos_, type_id);
    while (data_.size() % alignment_ != 0) data_.push_back(0);
    Append(&infos_, uint64_t(data_.size()));
    data_.insert(data_.end(), bytes.begin(), bytes.end());
    ++num_tensors_;
  }
  void AddF32Tensor(const std::string& name, const std::vector<int64_t>& dims, const std::vector<float>& values) {
    std::vector<uint8_t> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    AddTensor(name, dims, 0, bytes);
  }

  std::vector<uint8_t> Build() const {
    std::vector<uint8_t> out;
    Append(&out, uint32_t(0x46554747u));
    Append(&out, uint32_t(3));
    Append(&out, uint64_t(num_tensors_));
    Append(&out, uint64_t(num_kv_));
    out.insert(out.end(), kv_.begin(), kv_.end());
    out.insert(out.end(), infos_.begin(), infos_.end());
    if (num_tensors_ > 0) {
      while (out.size() % alignment_ != 0) out.push_back(0);
      out.insert(out.end(), data_.begin(), data_.end());
    }
    return out;
  }
  bool WriteFile(const std::string& path) const {
    const std::vector<uint8_t> bytes = Build();
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return bool(f);
  }

 private:
  template <typename T>
  static void Append(std::vector<uint8_t>* out, T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out->insert(out->end(), b, b + sizeof(T));
  }
  static void Str(std::vector<uint8_t>* out, const std::string& s) {
    Append(out, uint64_t(s.size()));
    out->insert(out->end(), s.begin(), s.end());
  }
  template <typename T>
  void Put(T v) { Append(&kv_, v); }
  void Key(const std::string& k, uint32_t type) {
    Str(&kv_, k);
    Put(type);
    ++num_kv_;
  }

  uint32_t alignment_;
  uint64_t num_kv_ = 0;
  uint64_t num_tensors_ = 0;
  std::vector<uint8_t> kv_, infos_, data_;
};

}  // namespace minimakv::testing
