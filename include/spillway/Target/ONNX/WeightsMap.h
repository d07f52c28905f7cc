//===- WeightsMap.h - the weights file: raw blob or weights map -*- C++ -*-===//
//
// `train.param` offsets index a *logical* weights blob; the module attribute
// `train.weights` names a file that gives its bytes. That file is either raw
// (the blob itself) or a weights map, which says where the blob's bytes lie
// instead of holding them, so that the compiler never reads a model's
// external data:
//
//   bytes 0..7    magic "SPWWMAP1"
//   bytes 8..15   u64 little-endian N, the length of the JSON header
//   bytes 16..    N bytes of JSON, then the inline data region
//   {"format": "spillway-weights-map", "version": 1, "size": LOGICAL_BYTES,
//    "sources": [{"path": ABSOLUTE_REAL_PATH, "bytes": FILE_SIZE,
//                 "mtime_ns": MTIME, "sample": "16 hex digits"}, ...],
//    "segments": [[LOGICAL_OFFSET, LENGTH, SOURCE, SOURCE_OFFSET], ...]}
//
// SOURCE indexes "sources", or is -1 for the map file itself (SOURCE_OFFSET
// is then an offset in the map file). Segments are sorted, do not overlap and
// lie inside [0, size); bytes no segment covers (alignment padding) are
// zeros. "sample" is XXH3-64 (llvm::xxh3_64bits, seed 0) of the file's first
// a bytes followed by its last a bytes, a = min(size, 64 KiB): with the size
// and mtime, a check that costs the same at any file size.
//
// The executable reads maps (runtime/src/driver/weights.cpp); this is the
// compiler's side: the importer writes them, spillwayc copies or
// materializes them.
//
//===----------------------------------------------------------------------===//

#ifndef SPILLWAY_TARGET_ONNX_WEIGHTSMAP_H
#define SPILLWAY_TARGET_ONNX_WEIGHTSMAP_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace spillway::weights {

inline constexpr llvm::StringLiteral kMapMagic = "SPWWMAP1";

/// A file the logical blob's bytes are read from, as it was at compile time.
struct Source {
  std::string path; // absolute, symbolic links resolved
  uint64_t bytes = 0;
  int64_t mtimeNs = 0;
  uint64_t sample = 0;
};

/// Bytes [offset, offset + length) of the logical blob. `source` >= 0: they
/// are bytes [sourceOffset, ...) of sources[source]; -1: they are `data`
/// (in memory while a map is written; in the map file once read back).
struct Segment {
  int64_t offset = 0, length = 0;
  int64_t source = -1;
  int64_t sourceOffset = 0;
  llvm::StringRef data;
};

/// A weights map's header.
struct Map {
  uint64_t size = 0;
  std::vector<Source> sources;
  std::vector<Segment> segments;
};

/// Stats `path` (size, modification time) and samples it; false with the
/// message in `error` when it cannot be read.
bool describeSource(llvm::StringRef path, Source &out, std::string &error);

/// "" when `path` is still as `recorded` says; else what changed.
std::string sourceChange(const Source &recorded);

/// Writes a weights map of a `size`-byte blob to `path`; the inline
/// segments' bytes go to its data region. `segments` sorted by offset.
bool writeMap(llvm::StringRef path, uint64_t size,
              llvm::ArrayRef<Source> sources,
              llvm::ArrayRef<Segment> segments, std::string &error);

/// Writes the `size`-byte logical blob itself to `path`, streamed: padding as
/// zeros, the others read from their sources in bounded chunks (a source
/// shorter than the map says is an error). Inline segments come from memory,
/// or, with `mapPath` (a map read back by readMap), from that file.
bool writeRaw(llvm::StringRef path, uint64_t size,
              llvm::ArrayRef<Source> sources,
              llvm::ArrayRef<Segment> segments, std::string &error,
              llvm::StringRef mapPath = {});

/// Whether `path` starts with the map magic (false for a file that cannot be
/// read or is shorter than 8 bytes).
bool hasMapMagic(llvm::StringRef path);

/// Reads and checks the header of the weights map `path`: the layout rules
/// above, and that every segment lies inside its source (the map file for
/// the inline ones). Nullopt with the message in `error` when it is not a
/// well-formed map.
std::optional<Map> readMap(llvm::StringRef path, std::string &error);

} // namespace spillway::weights

#endif // SPILLWAY_TARGET_ONNX_WEIGHTSMAP_H
