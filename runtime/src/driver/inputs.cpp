//===- inputs.cpp - checking and reading the --input arrays ---------------===//

#include "driver/driver.h"

#include "dist/dist.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace spw::driver {

namespace {

std::string numpy_dtype(const NpyHeader &a) {
  const char *kind = a.kind == 'f'   ? "float"
                     : a.kind == 'i' ? "int"
                     : a.kind == 'u' ? "uint"
                     : a.kind == 'b' ? "bool"
                     : a.kind == 'c' ? "complex"
                                     : nullptr;
  if (a.kind == 'b' && a.itemsize == 1)
    return "bool ('" + a.descr + "')";
  if (!kind)
    return "'" + a.descr + "'";
  return format("%s%d ('%s')", kind, a.itemsize * 8, a.descr.c_str());
}

std::string tuple_str(const std::vector<int64_t> &v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i)
    s += std::to_string(v[i]) + (v.size() == 1 ? "," : i + 1 < v.size() ? ", " : "");
  return s + ")";
}

} // namespace

InputPlan check_input(InputInfo &in, const std::string &file) {
  spw_tensor &view = *in.view;
  const std::string what = format("input '%s' (%s)", in.name.c_str(),
                                  file.c_str());
  InputPlan plan;
  plan.in = &in;
  plan.file = file;
  NpyHeader &a = plan.h;
  try {
    int64_t size = 0;
    plan.fd = FdCloser(open_regular(file, ".npy file", &size));
    // The preamble, then the whole header: a bounded read (npy.cpp caps
    // the header's length), whatever the file's size.
    std::string head(size_t(std::min<int64_t>(size, 12)), '\0');
    if (!read_at(plan.fd.fd, head.data(), head.size(), 0))
      fail("cannot read .npy file '%s': %s", file.c_str(),
           errno ? std::strerror(errno) : "unexpected end of file");
    const int64_t want =
        std::min<int64_t>(npy_header_bytes(head, file), size);
    if (want > int64_t(head.size())) {
      head.resize(size_t(want));
      if (!read_at(plan.fd.fd, head.data(), head.size(), 0))
        fail("cannot read .npy file '%s': %s", file.c_str(),
             errno ? std::strerror(errno) : "unexpected end of file");
    }
    a = parse_npy_header(head, size, file);
  } catch (const Error &e) {
    fail("input '%s': %s", in.name.c_str(), e.what());
  }
  if (a.fortran_order)
    fail("%s: the array is in Fortran order; expected C order: save "
         "np.ascontiguousarray(arr)",
         what.c_str());
  const char *want = view.dtype == SPW_F32    ? "float32"
                     : view.dtype == SPW_I64  ? "int64 (or int32)"
                     : view.dtype == SPW_BOOL ? "bool"
                                              : "int32 (or int64)";
  const char *hint = view.dtype == SPW_F32    ? "arr.astype(np.float32)"
                     : view.dtype == SPW_I64  ? "arr.astype(np.int64)"
                     : view.dtype == SPW_BOOL ? "arr.astype(np.bool_)"
                                              : "arr.astype(np.int32)";
  if (a.big_endian && a.itemsize > 1)
    fail("%s: the array is big-endian ('%s'), expected little-endian %s: "
         "save arr.astype('<%c%d')",
         what.c_str(), a.descr.c_str(), want, a.kind, a.itemsize);
  const bool ok_dtype =
      view.dtype == SPW_F32    ? a.kind == 'f' && a.itemsize == 4
      : view.dtype == SPW_BOOL ? a.kind == 'b' && a.itemsize == 1
                               : a.kind == 'i' && (a.itemsize == 8 ||
                                                   a.itemsize == 4);
  if (!ok_dtype)
    fail("%s: dtype is %s, expected %s: convert with %s", what.c_str(),
         numpy_dtype(a).c_str(), want, hint);
  std::vector<int64_t> ishape(view.dims, view.dims + view.rank);
  // Data parallel: a step's rows for every rank, rank r's at r x the
  // input's batch (dim 0: every input is a batch input, as for
  // sched-microbatch).
  std::string per_rank;
  if (dist::active() && view.rank >= 1) {
    plan.ranks = dist::size();
    plan.rank = dist::rank();
    per_rank = format(" (%lld ranks x the model's batch of %lld rows per "
                      "step: rank r reads rows r*%lld .. (r+1)*%lld - 1 of "
                      "each step)",
                      (long long)plan.ranks, (long long)ishape[0],
                      (long long)ishape[0], (long long)ishape[0]);
    ishape[0] *= plan.ranks;
  }
  int64_t batches = 0;
  if (a.shape == ishape)
    batches = 1;
  else if (a.shape.size() == ishape.size() + 1 &&
           std::equal(ishape.begin(), ishape.end(), a.shape.begin() + 1))
    batches = a.shape[0];
  else
    fail("%s: shape is %s, expected %s (one batch) or (B, %s) for B "
         "batches%s",
         what.c_str(), tuple_str(a.shape).c_str(), tuple_str(ishape).c_str(),
         tuple_str(ishape).substr(1, tuple_str(ishape).size() - 2).c_str(),
         per_rank.c_str());
  if (batches == 0)
    fail("%s: shape is %s: no batches", what.c_str(),
         tuple_str(a.shape).c_str());
  plan.batches = batches;
  // The file holds batches * numel elements (checked against its size), so
  // the buffer is at most twice the file: no overflow, but say so anyway.
  if (__builtin_mul_overflow(view.bytes(), batches, &plan.bytes))
    fail("%s: %lld batches of %s do not fit in memory", what.c_str(),
         (long long)batches, view.shape().c_str());
  return plan;
}

// Reads a checked input's data into its new buffer, converting int32 and
// int64 in chunks; float inputs holding NaN or an infinity are refused.
void read_input(InputPlan &plan, bool require_finite) {
  InputInfo &in = *plan.in;
  spw_tensor &view = *in.view;
  const NpyHeader &a = plan.h;
  const std::string what = format("input '%s' (%s)", in.name.c_str(),
                                  plan.file.c_str());
  const int64_t n = view.numel * plan.batches;
  Buffer buf = alloc_buffer(plan.bytes);
  auto read_failed_at = [&](int64_t offset) {
    fail("%s: cannot read the data at offset %lld: %s", what.c_str(),
         (long long)offset,
         errno ? std::strerror(errno) : "unexpected end of file");
  };
  const int64_t src_size = a.itemsize, dst_size = dtype_size(view.dtype);
  // Batch k of this process is batch k's rank-th part of the file.
  const int64_t per = view.numel;
  auto file_index = [&](int64_t at) { // this buffer's element -> the file's
    return per == 0 ? at
                    : ((at / per) * plan.ranks + plan.rank) * per + at % per;
  };
  if (src_size == dst_size && plan.ranks == 1) {
    if (!read_at(plan.fd.fd, buf.get(), size_t(plan.bytes), a.data_offset))
      read_failed_at(a.data_offset);
  } else if (src_size == dst_size) {
    for (int64_t k = 0; k < plan.batches; ++k) {
      const int64_t off = a.data_offset + file_index(k * per) * src_size;
      if (!read_at(plan.fd.fd,
                   static_cast<char *>(buf.get()) + k * per * dst_size,
                   size_t(per * dst_size), off))
        read_failed_at(off);
    }
  } else {
    constexpr int64_t kChunk = 1 << 16; // elements per read
    std::vector<char> chunk(size_t(kChunk * src_size));
    // Pieces that never cross a batch, so each is contiguous in the file.
    for (int64_t at = 0; at < n;) {
      const int64_t m = std::min(kChunk, per == 0 ? n - at : per - at % per);
      const int64_t off = a.data_offset + file_index(at) * src_size;
      if (!read_at(plan.fd.fd, chunk.data(), size_t(m * src_size), off))
        read_failed_at(off);
      if (view.dtype == SPW_I64) { // int32 file
        auto *d = static_cast<int64_t *>(buf.get()) + at;
        for (int64_t i = 0; i < m; ++i) {
          int32_t v;
          std::memcpy(&v, chunk.data() + i * 4, 4);
          d[i] = v;
        }
      } else { // int64 file into an int32 input
        auto *d = static_cast<int32_t *>(buf.get()) + at;
        for (int64_t i = 0; i < m; ++i) {
          int64_t v;
          std::memcpy(&v, chunk.data() + i * 8, 8);
          if (v < INT32_MIN || v > INT32_MAX)
            fail("%s: value %lld at flat index %lld does not fit the "
                 "input's int32",
                 what.c_str(), (long long)v, (long long)file_index(at + i));
          d[i] = int32_t(v);
        }
      }
      at += m;
    }
  }
  plan.fd = FdCloser();
  if (view.dtype == SPW_F32 && require_finite) {
    const float *x = static_cast<const float *>(buf.get());
    const int64_t bad = first_non_finite(x, n);
    if (bad >= 0) {
      const int64_t row = std::max<int64_t>(per, 1);
      fail("%s: batch %lld holds %s at flat index %lld of the batch (flat "
           "index %lld of the file); the model trains on finite numbers: "
           "clean the data (e.g. np.nan_to_num, or drop the batch)",
           what.c_str(), (long long)(bad / row), non_finite_name(x[bad]),
           (long long)(bad % row), (long long)file_index(bad));
    }
  }
  in.batches = std::move(buf);
  in.num_batches = plan.batches;
  view.owned.reset();
  view.data = in.batches.get();
}

void select_batch(spw_ctx *ctx, int64_t step0) {
  for (InputInfo &in : ctx->inputs) {
    const int64_t at = (step0 % in.num_batches) * in.view->bytes();
    in.view->data = static_cast<char *>(in.batches.get()) + at;
    if (in.dev_view)
      in.dev_view->data = static_cast<char *>(in.dev_batches) + at;
  }
}

} // namespace spw::driver
