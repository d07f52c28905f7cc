// bench/blas.sh's timing loop: cblas_sgemm (row-major, no transposes) at
// the GPT benchmark's GEMM shapes, through whichever BLAS it is linked
// with, three ways: the library on 1 thread, the library on T threads, and
// T threads of our own each calling the library on 1 thread for a slab of
// C's rows (what runtime/src/cpu/blas.cpp does). One JSON line per shape.
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

extern "C" void openblas_set_num_threads(int) __attribute__((weak));
extern "C" void bli_thread_set_num_threads(long) __attribute__((weak));

static void set_threads(int t) {
  if (openblas_set_num_threads)
    openblas_set_num_threads(t);
  if (bli_thread_set_num_threads)
    bli_thread_set_num_threads(t);
}

static double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int main(int argc, char **argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 2;
  const char *lib = argc > 2 ? argv[2] : "?";
  const int shapes[][3] = {{1024, 1024, 1024}, {1024, 1536, 384},
                           {1024, 384, 1536},  {384, 1536, 1024},
                           {1024, 8192, 384},  {1024, 384, 8192},
                           {384, 8192, 1024},  {1024, 384, 384}};
  for (const auto &s : shapes) {
    const int M = s[0], N = s[1], K = s[2];
    std::vector<float> A(size_t(M) * K), B(size_t(K) * N), C(size_t(M) * N);
    for (float &x : A)
      x = float(std::rand()) / float(RAND_MAX);
    for (float &x : B)
      x = float(std::rand()) / float(RAND_MAX);
    double rate[3];
    for (int mode = 0; mode < 3; ++mode) {
      set_threads(mode == 1 ? T : 1);
      auto gemm = [&](int m0, int m1) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m1 - m0, N, K,
                    1.0f, A.data() + size_t(m0) * K, K, B.data(), N, 0.0f,
                    C.data() + size_t(m0) * N, N);
      };
      auto run = [&] {
        if (mode < 2)
          return gemm(0, M);
        std::vector<std::thread> ts;
        for (int t = 1; t < T; ++t)
          ts.emplace_back(gemm, M * t / T, M * (t + 1) / T);
        gemm(0, M / T);
        for (auto &t : ts)
          t.join();
      };
      run();
      int it = 0;
      const double t0 = now();
      while (now() - t0 < 0.5 || it < 3) {
        run();
        ++it;
      }
      rate[mode] = 2.0 * M * N * K * it / (now() - t0) / 1e9;
    }
    std::printf("{\"blas\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, "
                "\"gflops_1_thread\": %.1f, \"gflops_library_threads\": %.1f, "
                "\"gflops_own_threads\": %.1f, \"threads\": %d}\n",
                lib, M, N, K, rate[0], rate[1], rate[2], T);
  }
}
