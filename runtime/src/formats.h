//===- formats.h - .npy and .safetensors ----------------------------------===//
//
// The file formats the driver reads and writes: .npy arrays (the --input
// data, --outputs) and .safetensors (--weights, --save). Defined in npy.cpp
// and safetensors.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_FORMATS_H
#define SPILLWAY_RUNTIME_SRC_FORMATS_H

#include "support.h"
#include "tensor.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace spw {

// ---- .npy -----------------------------------------------------------------
struct NpyArray {
  char kind = 0;         // 'f', 'i', 'u', 'b', ... from descr
  int itemsize = 0;      // bytes per element
  bool big_endian = false;
  bool fortran_order = false;
  std::string descr;     // as written in the header, e.g. "<f4"
  std::vector<int64_t> shape;
  std::vector<char> data; // raw bytes, numel * itemsize
  int64_t numel() const;
};
// Parses a whole .npy file image; `what` names it in errors.
NpyArray parse_npy(const std::string &bytes, const std::string &what);
NpyArray read_npy(const std::string &path);
// What the header of a .npy file says, checked against the file's size:
// the data (numel * itemsize bytes, overflow-checked) starts at data_offset
// and ends the file. `head` is the file's start (at least the whole header
// when the file has one: npy_header_bytes tells how much to read).
struct NpyHeader {
  char kind = 0;
  int itemsize = 0;
  bool big_endian = false;
  bool fortran_order = false;
  std::string descr;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t data_offset = 0;
  int64_t data_bytes = 0;
};
// The header's length, from the first 12 bytes (or fewer, a short file)
// with the preamble; -1 when `head` is too short to tell. Errors name `what`.
int64_t npy_header_bytes(const std::string &head, const std::string &what);
NpyHeader parse_npy_header(const std::string &head, int64_t file_size,
                           const std::string &what);
// Serializes a little-endian C-order array (v1.0 header); used by tests.
std::string write_npy(const std::string &descr,
                      const std::vector<int64_t> &shape, const void *data,
                      size_t bytes);

// ---- .safetensors ---------------------------------------------------------
struct NamedTensor {
  std::string name;
  const spw_tensor *tensor;
};
std::string safetensors_bytes(const std::vector<NamedTensor> &tensors);
// A parsed .safetensors header. Tensors keep the header's order.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;          // "F32", "I64", ... (a known safetensors dtype)
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0; // data_offsets, relative to the data section
};
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;
  std::vector<std::pair<std::string, std::string>> metadata;
};
// The safetensors name of a runtime dtype ("F32", "I64", "I32"; "?").
const char *safetensors_dtype(int32_t dtype);
// Bytes per element of a safetensors dtype name; 0 for an unknown one.
int64_t safetensors_dtype_size(const std::string &dtype);
// Parses and validates the JSON header of a .safetensors file whose data
// section (everything after the header) is `data_size` bytes: strict JSON,
// known dtypes, data_offsets that match dtype and shape and tile the data
// section. Errors (spw::Error) start with `what` (e.g. "weights file 'F'").
SafetensorsHeader parse_safetensors_header(const std::string &json,
                                           int64_t data_size,
                                           const std::string &what);

} // namespace spw

#endif // SPILLWAY_RUNTIME_SRC_FORMATS_H
