// AMX tile primitives shared by the AMX attention kernels (kernels/cpu/cpu_kernels_amx.cpp) and the AMX peak
// measurement of tools/machine_floors.cpp: the LDTILECFG operand and the tile instructions as inline asm.
// ref: Intel SDM vol. 1 ch. 18 (AMX, tile configuration), vol. 2 (LDTILECFG, TILELOADD, TILESTORED, TDPBF16PS,
// TDPBSSD, TDPBUSD).
//
// Why our own asm instead of GCC 12's <amxtileintrin.h> intrinsics: _tile_loadconfig declares only a
// pointer-sized memory operand, so the compiler may drop the stores that fill the rest of the 64-byte
// configuration (seen here: only the palette byte was stored before the ldtilecfg, which then faulted); and
// _tile_loadd does not declare that it reads memory, so the stores that fill a scratch tile may be moved past
// the load. Every wrapper below that touches memory has a "memory" clobber. The assembler accepts the AMX
// mnemonics whatever the compile flags; callers run them only after AmxUsable() (cpu_kernels.h).
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cstddef>
#include <cstdint>

namespace minimakv::cpu::amx {

inline constexpr int kTileRegisters = 8;  // tmm0 .. tmm7
inline constexpr int kTileRows = 16;      // the most rows a tile has (palette 1)
inline constexpr int kTileRowBytes = 64;  // the most bytes per tile row (palette 1)
inline constexpr uint8_t kPalette = 1;    // the only palette with tiles (palette 0 = release)

// LDTILECFG operand (SDM vol. 1, 18.2): palette, start row, reserved, bytes per row of tiles 0..15 (only 0..7
// exist in palette 1), rows of tiles 0..15.
struct alignas(64) TileConfig {
  uint8_t palette_id = kPalette;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// Tiles 0 .. tiles-1 at the full shape (16 rows x 64 bytes), the others unconfigured.
inline TileConfig FullShapeTiles(int tiles) {
  TileConfig config;
  for (int t = 0; t < tiles && t < kTileRegisters; ++t) {
    config.bytes_per_row[t] = kTileRowBytes;
    config.rows[t] = kTileRows;
  }
  return config;
}

inline void LoadTileConfig(const TileConfig& config) { asm volatile("ldtilecfg %0" : : "m"(config) : "memory"); }

template <int kTile>
inline void TileLoad(const void* base, size_t stride_bytes) {
  asm volatile("tileloadd (%0,%1,1), %%tmm%c2" : : "r"(base), "r"(stride_bytes), "i"(kTile) : "memory");
}

template <int kTile>
inline void TileStore(void* base, size_t stride_bytes) {
  asm volatile("tilestored %%tmm%c2, (%0,%1,1)" : : "r"(base), "r"(stride_bytes), "i"(kTile) : "memory");
}

template <int kTile>
inline void TileZero() {
  asm volatile("tilezero %%tmm%c0" : : "i"(kTile));
}

// C += A * B (TDPBF16PS): C [rows x 16] fp32, A [rows x 32] bf16, B [16 x 32] bf16 in VNNI pairs.
template <int kC, int kA, int kB>
inline void TileDot() {
  asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(kC), "i"(kA), "i"(kB));
}

// C += A * B (TDPBSSD, AMX-INT8): C [rows x 16] int32, A [rows x 64] int8, B [16 x 64] int8 in VNNI quads (row k,
// dword n holds elements 4k .. 4k + 3 of column n): C[m][n] += sum_k sum_i A[m][4k + i] * B[k][4n + i], exact
// while the sums fit int32.
template <int kC, int kA, int kB>
inline void TileDotInt8() {
  asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(kC), "i"(kA), "i"(kB));
}

// C += A * B (TDPBUSD, AMX-INT8): as TileDotInt8 with A unsigned and B signed int8: C[m][n] += sum_k sum_i
// uint8(A[m][4k + i]) * int8(B[k][4n + i]).
template <int kC, int kA, int kB>
inline void TileDotU8S8() {
  asm volatile("tdpbusd %%tmm%c2, %%tmm%c1, %%tmm%c0" : : "i"(kC), "i"(kA), "i"(kB));
}

// The product of the score pass's element type: TileDotInt8 for int8 tiles, else TileDot (bf16).
template <bool kInt8, int kC, int kA, int kB>
inline void TileProduct() {
  if constexpr (kInt8) {
    TileDotInt8<kC, kA, kB>();
  } else {
    TileDot<kC, kA, kB>();
  }
}

inline void TileRelease() { asm volatile("tilerelease" : : : "memory"); }

}  // namespace minimakv::cpu::amx

#endif
