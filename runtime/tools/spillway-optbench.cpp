//===- spillway-optbench.cpp - CPU optimizer throughput vs memory ---------===//
//
// Times the runtime's CPU optimizer kernels (spw::adamw_kernel and
// spw::foam_kernel, optimizer.cpp: what the CPU device and an offload
// plan's CPU optimizer run) over n float32 elements, and the memory
// bandwidth of the same access pattern: a plain loop that reads w, m, v, g
// and writes w, m, v with trivial arithmetic, on the same threads and
// chunks. AdamW moves 28 bytes per element per step (4 arrays read, 3
// written), so that loop's bytes per second are the limit AdamW can reach.
// Prints one JSON object on stdout; progress goes to stderr.
//
// What is timed: each kernel call alone (the arrays are allocated and
// first-touched, in the chunks the kernels use, before any timing), after
// one untimed warm-up call; the median of --repeat calls is reported.
//
//===----------------------------------------------------------------------===//
#include "context.h"

#if __has_include("cpu/parallel.h")
#include "cpu/parallel.h"
#define SPW_OPTBENCH_POOL 1
#else
#define SPW_OPTBENCH_POOL 0
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

const char *kUsage = R"(usage: spillway-optbench [options]

Times the runtime's CPU AdamW and FOAM kernels over N float32 elements and
the memory bandwidth of AdamW's access pattern (read w, m, v, g; write w,
m, v: 28 bytes per element) measured by a plain loop on the same threads.
Prints one JSON object on stdout:
  {"elements":...,"threads":...,"bandwidth":{"gbps":...},
   "adamw":{"elements_per_s":...,"gbps_at_28_bytes":...,
            "fraction_of_bandwidth":...},
   "foam":{"level":2,"elements_per_s":...,"bytes_per_element":...}}

  --elements N      elements per array (default 64M = 64 x 2^20; K, M, G
                    are binary: 1M = 1048576)
  --repeat R        timed calls per kernel, after one warm-up (default 5);
                    the median is reported
  --threads T       kernel threads (default: the CPUs this process may run
                    on); a runtime without a kernel pool runs one
  --foam-level L    FOAM's fold: blocks of 2^L elements (default 2)
  --foam-cols C     FOAM's weight is [N / C, C] (default 4096)
  --only LIST       a subset of bandwidth,adamw,foam (default all three)
  -h, --help        this text
)";

[[noreturn]] void usage_error(const std::string &msg) {
  std::fprintf(stderr, "spillway-optbench: %s\n(see --help)\n", msg.c_str());
  std::exit(2);
}

int64_t parse_count(const std::string &flag, const std::string &s) {
  char *end = nullptr;
  errno = 0;
  const double x = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || errno || !(x > 0))
    usage_error("invalid value '" + s + "' for " + flag);
  std::string unit(end);
  double mul = 1;
  if (unit == "K" || unit == "Ki")
    mul = 1024.0;
  else if (unit == "M" || unit == "Mi")
    mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "Gi")
    mul = 1024.0 * 1024 * 1024;
  else if (!unit.empty())
    usage_error("invalid unit '" + unit + "' in " + flag + " " + s +
                " (K, M, G)");
  const double v = x * mul;
  if (v != std::floor(v) || v > 1e12)
    usage_error("invalid value '" + s + "' for " + flag +
                " (a whole number of elements)");
  return int64_t(v);
}

// The chunks of [0, n): the kernel pool's, where the runtime has one.
constexpr int64_t kGrain = int64_t(1) << 16;
template <class F> void for_chunks(int64_t n, F &&f) {
#if SPW_OPTBENCH_POOL
  spw::cpu::parallel_for(n, kGrain, f);
#else
  f(int64_t(0), n);
#endif
}

// The bandwidth loop: reads w, m, v, g and writes w, m, v, with arithmetic
// far cheaper than the memory traffic (values stay bounded).
__attribute__((target_clones("avx512f", "avx2", "default"))) void
stream_elements(float *__restrict w, float *__restrict m, float *__restrict v,
                const float *__restrict g, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float mi = m[i] * 0.5f + g[i];
    const float vi = v[i] * 0.5f + g[i];
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] - (mi + vi) * 1e-6f;
  }
}

struct Buffer {
  std::unique_ptr<float, decltype(&std::free)> p{nullptr, &std::free};
  explicit Buffer(int64_t n) {
    const size_t bytes = (size_t(n) * sizeof(float) + 63) / 64 * 64;
    p.reset(static_cast<float *>(std::aligned_alloc(64, std::max<size_t>(bytes, 64))));
    if (!p)
      throw std::bad_alloc();
  }
  float *get() const { return p.get(); }
};

// First touch in the kernels' chunks (the pages land where they are used).
void fill(float *a, int64_t n, float base, float scale) {
  for_chunks(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      a[i] = base + scale * float((i * 2654435761u) % 1000) / 1000.0f;
  });
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

struct Timing {
  std::vector<double> s;
  double median() const {
    std::vector<double> c = s;
    std::sort(c.begin(), c.end());
    const size_t k = c.size();
    return k % 2 ? c[k / 2] : 0.5 * (c[k / 2 - 1] + c[k / 2]);
  }
  double min() const { return *std::min_element(s.begin(), s.end()); }
  std::string json() const {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%.6g", i ? "," : "", s[i]);
      out += b;
    }
    return out + "]";
  }
};

template <class F> Timing time_calls(int repeat, F &&call) {
  call(0); // warm-up: not timed
  Timing t;
  for (int r = 1; r <= repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    call(r);
    t.s.push_back(seconds_since(t0));
  }
  return t;
}

} // namespace

int main(int argc, char **argv) {
  int64_t n = int64_t(64) << 20;
  int repeat = 5, threads = 0, level = 2;
  int64_t cols = 4096;
  bool do_bw = true, do_adamw = true, do_foam = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc)
      usage_error(a.rfind("--", 0) == 0 ? a + " needs a value"
                                        : "unknown argument '" + a + "'");
    const std::string v = argv[++i];
    if (a == "--elements")
      n = parse_count(a, v);
    else if (a == "--repeat")
      repeat = int(std::min<int64_t>(parse_count(a, v), 1000));
    else if (a == "--threads")
      threads = int(std::min<int64_t>(parse_count(a, v), 1024));
    else if (a == "--foam-level") {
      level = std::atoi(v.c_str());
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos ||
          level > 16)
        usage_error("invalid value '" + v + "' for --foam-level (0..16)");
    } else if (a == "--foam-cols")
      cols = parse_count(a, v);
    else if (a == "--only") {
      do_bw = do_adamw = do_foam = false;
      size_t at = 0;
      while (at <= v.size()) {
        const size_t comma = std::min(v.find(',', at), v.size());
        const std::string w = v.substr(at, comma - at);
        if (w == "bandwidth")
          do_bw = true;
        else if (w == "adamw")
          do_adamw = true;
        else if (w == "foam")
          do_foam = true;
        else
          usage_error("unknown kernel '" + w + "' in --only (bandwidth, adamw, foam)");
        at = comma + 1;
      }
    } else
      usage_error("unknown argument '" + a + "'");
  }

#if SPW_OPTBENCH_POOL
  spw::cpu::configure_kernels(spw::cpu::KernelSet::Fast, threads);
  const int used = spw::cpu::threads();
  const char *pool = "the runtime's kernel pool (cpu::parallel_for)";
#else
  if (threads > 1)
    std::fprintf(stderr, "spillway-optbench: this runtime has no kernel pool "
                         "(cpu/parallel.h): its kernels run on one thread, so "
                         "does the bandwidth loop\n");
  const int used = 1;
  const char *pool = "none: this runtime's kernels are single-threaded";
#endif
  const spw::AdamWHparams h; // Spillway's defaults: torch.optim.AdamW's
  std::fprintf(stderr, "spillway-optbench: %lld elements (%.0f MiB per array), %d thread%s\n",
               (long long)n, double(n) * 4 / (1 << 20), used, used == 1 ? "" : "s");

  std::string out = "{\"tool\": \"spillway-optbench\"";
  char b[512];
  std::snprintf(b, sizeof b,
                ", \"elements\": %lld, \"threads\": %d, \"pool\": \"%s\", "
                "\"repeat\": %d, \"grain\": %lld",
                (long long)n, used, pool, repeat, (long long)kGrain);
  out += b;

  double bw_gbps = 0;
  {
    Buffer w(n), m(n), v(n), g(n);
    fill(w.get(), n, 0.1f, 0.01f);
    fill(m.get(), n, 0.0f, 0.0f);
    fill(v.get(), n, 0.0f, 0.0f);
    fill(g.get(), n, -0.01f, 0.02f);
    if (do_bw) {
      std::fprintf(stderr, "spillway-optbench: bandwidth loop\n");
      const Timing t = time_calls(repeat, [&](int) {
        for_chunks(n, [&](int64_t lo, int64_t hi) {
          stream_elements(w.get() + lo, m.get() + lo, v.get() + lo, g.get() + lo, hi - lo);
        });
      });
      const double s = t.median();
      bw_gbps = 28.0 * double(n) / s / 1e9;
      std::snprintf(b, sizeof b,
                    ", \"bandwidth\": {\"bytes_per_element\": 28, \"median_s\": %.6g, "
                    "\"min_s\": %.6g, \"gbps\": %.6g, \"elements_per_s\": %.6g, "
                    "\"seconds\": ",
                    s, t.min(), bw_gbps, double(n) / s);
      out += b + t.json() + "}";
      fill(m.get(), n, 0.0f, 0.0f);
      fill(v.get(), n, 0.0f, 0.0f);
    }
    if (do_adamw) {
      std::fprintf(stderr, "spillway-optbench: adamw_kernel\n");
      const Timing t = time_calls(repeat, [&](int r) {
        spw::adamw_kernel(w.get(), m.get(), v.get(), g.get(), n, r + 1, h);
      });
      const double s = t.median();
      const double gbps = 28.0 * double(n) / s / 1e9;
      std::snprintf(b, sizeof b,
                    ", \"adamw\": {\"median_s\": %.6g, \"min_s\": %.6g, "
                    "\"elements_per_s\": %.6g, \"gbps_at_28_bytes\": %.6g, "
                    "\"fraction_of_bandwidth\": %s, \"seconds\": ",
                    s, t.min(), double(n) / s, gbps,
                    bw_gbps > 0 ? std::to_string(gbps / bw_gbps).c_str() : "null");
      out += b + t.json() + "}";
    }
  }
  if (do_foam) {
    cols = std::min(cols, n);
    const int64_t rows = n / cols, ne = rows * cols;
    const int64_t block = int64_t(1) << level, nb = (cols + block - 1) / block;
    Buffer w(ne), m(rows * nb), v(rows * nb), g(ne);
    fill(w.get(), ne, 0.1f, 0.01f);
    fill(m.get(), rows * nb, 0.0f, 0.0f);
    fill(v.get(), rows * nb, 0.0f, 0.0f);
    fill(g.get(), ne, -0.01f, 0.02f);
    std::fprintf(stderr, "spillway-optbench: foam_kernel [%lld, %lld], level %d\n",
                 (long long)rows, (long long)cols, level);
    const Timing t = time_calls(repeat, [&](int r) {
      spw::foam_kernel(w.get(), m.get(), v.get(), g.get(), rows, cols, level, r + 1, h, 0.25);
    });
    const double s = t.median();
    // w read and written, g read; the folded m and v read and written.
    const double bytes = 12.0 * double(ne) + 16.0 * double(rows * nb);
    const double gbps = bytes / s / 1e9;
    std::snprintf(b, sizeof b,
                  ", \"foam\": {\"level\": %d, \"rows\": %lld, \"cols\": %lld, "
                  "\"elements\": %lld, \"bytes_per_element\": %.6g, \"median_s\": %.6g, "
                  "\"min_s\": %.6g, \"elements_per_s\": %.6g, \"gbps\": %.6g, "
                  "\"fraction_of_bandwidth\": %s, \"seconds\": ",
                  level, (long long)rows, (long long)cols, (long long)ne,
                  bytes / double(ne), s, t.min(), double(ne) / s, gbps,
                  bw_gbps > 0 ? std::to_string(gbps / bw_gbps).c_str() : "null");
    out += b + t.json() + "}";
  }
  std::printf("%s}\n", out.c_str());
  return 0;
}
