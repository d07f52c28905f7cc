//===- gloo_shim.cpp - Gloo behind a C ABI (libspillway_gloo.so) ----------===//
//
// gloo_abi.h says why this is a library of its own. Every Gloo exception
// (a peer that closed its connection, a timeout) becomes an error string:
// no C++ object or exception crosses the ABI.
//
//===----------------------------------------------------------------------===//

#include "dist/gloo_abi.h"

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>

namespace {

void put_error(char *err, size_t errlen, const char *what) {
  if (err && errlen)
    std::snprintf(err, errlen, "%s", what);
}

// The runtime's store, as Gloo's rendezvous wants it.
class Store : public gloo::rendezvous::Store {
public:
  explicit Store(const spw_gloo_store &s) : s_(s) {}
  void set(const std::string &key, const std::vector<char> &data) override {
    if (s_.set(s_.self, key.c_str(), data.data(), data.size(), err_,
               sizeof err_))
      throw std::runtime_error(err_);
  }
  std::vector<char> get(const std::string &key) override {
    void *data = nullptr;
    size_t n = 0;
    if (s_.get(s_.self, key.c_str(), &data, &n, err_, sizeof err_))
      throw std::runtime_error(err_);
    std::vector<char> out(static_cast<char *>(data),
                          static_cast<char *>(data) + n);
    std::free(data);
    return out;
  }
  void wait(const std::vector<std::string> &keys) override {
    std::vector<const char *> k;
    for (const std::string &s : keys)
      k.push_back(s.c_str());
    if (s_.wait(s_.self, k.data(), k.size(), err_, sizeof err_))
      throw std::runtime_error(err_);
  }
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &) override {
    wait(keys); // the runtime's store has its own timeout
  }

private:
  spw_gloo_store s_;
  char err_[1024] = {};
};

struct Job {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  uint32_t tag = 0; // one per collective, in the same order on every rank
};

template <class F> int guarded(char *err, size_t errlen, F &&body) {
  try {
    body();
    return 0;
  } catch (const std::exception &e) {
    put_error(err, errlen, e.what());
  } catch (...) {
    put_error(err, errlen, "an unknown exception");
  }
  return 1;
}

void *connect(int rank, int size, const spw_gloo_store *store,
              const char *hostname, const char *iface, int64_t connect_ms,
              int64_t timeout_ms, char *err, size_t errlen) {
  Job *job = nullptr;
  const int rc = guarded(err, errlen, [&] {
    gloo::transport::tcp::attr attr;
    if (iface && *iface)
      attr.iface = iface;
    else
      attr.hostname = hostname ? hostname : "";
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(std::chrono::milliseconds(connect_ms));
    Store s(*store);
    ctx->connectFullMesh(s, dev);
    // Each collective's options take the context's timeout when made.
    ctx->setTimeout(std::chrono::milliseconds(timeout_ms));
    job = new Job{std::move(ctx)};
  });
  return rc ? nullptr : job;
}

void close(void *ctx) { delete static_cast<Job *>(ctx); }

int allreduce_sum(void *ctx, void *x, size_t n, int dtype, char *err,
                  size_t errlen) {
  return guarded(err, errlen, [&] {
    Job &j = *static_cast<Job *>(ctx);
    gloo::AllreduceOptions o(j.ctx);
    o.setTag(j.tag++);
    if (dtype == SPW_GLOO_F32) {
      o.setOutput(static_cast<float *>(x), n);
      o.setReduceFunction(
          static_cast<void (*)(void *, const void *, const void *, size_t)>(
              &gloo::sum<float>));
    } else if (dtype == SPW_GLOO_F64) {
      o.setOutput(static_cast<double *>(x), n);
      o.setReduceFunction(
          static_cast<void (*)(void *, const void *, const void *, size_t)>(
              &gloo::sum<double>));
    } else {
      throw std::runtime_error("allreduce: unknown dtype");
    }
    gloo::allreduce(o);
  });
}

// Gloo's collectives have no reduce-scatter of uneven parts: each rank
// sends every other rank its part of x at once (a full mesh's pairs, one
// slot per call) and sums what it receives with its own part in rank
// order, so every rank's result is the same left-to-right sum.
int reduce_scatter_sum(void *ctx, const float *x, float *out,
                       const size_t *counts, char *err, size_t errlen) {
  return guarded(err, errlen, [&] {
    Job &j = *static_cast<Job *>(ctx);
    const int n = j.ctx->size, me = j.ctx->rank;
    std::vector<size_t> first(size_t(n) + 1, 0);
    for (int r = 0; r < n; ++r)
      first[size_t(r) + 1] = first[size_t(r)] + counts[r];
    const size_t mine = counts[me];
    // A slot of its own: the prefix no collective of Gloo's uses.
    constexpr uint8_t kPrefix = 0x5a;
    const gloo::Slot slot = gloo::Slot::build(kPrefix, j.tag++);
    auto send = j.ctx->createUnboundBuffer(const_cast<float *>(x),
                                           first[size_t(n)] * sizeof(float));
    std::vector<float> got(mine * size_t(n));
    auto recv =
        j.ctx->createUnboundBuffer(got.data(), got.size() * sizeof(float));
    int sends = 0, recvs = 0;
    for (int r = 0; r < n; ++r) {
      if (r == me)
        continue;
      if (counts[r]) {
        send->send(r, slot, first[size_t(r)] * sizeof(float),
                   counts[r] * sizeof(float));
        ++sends;
      }
      if (mine) {
        recv->recv(r, slot, size_t(r) * mine * sizeof(float),
                   mine * sizeof(float));
        ++recvs;
      }
    }
    const auto timeout = j.ctx->getTimeout();
    for (int k = 0; k < sends; ++k)
      if (!send->waitSend(timeout))
        throw std::runtime_error("reduce-scatter: a send was aborted");
    for (int k = 0; k < recvs; ++k)
      if (!recv->waitRecv(timeout))
        throw std::runtime_error("reduce-scatter: a receive was aborted");
    const float *own = x + first[size_t(me)];
    for (size_t e = 0; e < mine; ++e) {
      float s = me == 0 ? own[e] : got[e];
      for (int r = 1; r < n; ++r)
        s += r == me ? own[e] : got[size_t(r) * mine + e];
      out[e] = s;
    }
  });
}

int allgatherv(void *ctx, const void *in, void *out, const size_t *counts,
               char *err, size_t errlen) {
  return guarded(err, errlen, [&] {
    Job &j = *static_cast<Job *>(ctx);
    gloo::AllgathervOptions o(j.ctx);
    o.setTag(j.tag++);
    const int n = j.ctx->size;
    std::vector<size_t> c(counts, counts + n);
    o.setInput(const_cast<char *>(static_cast<const char *>(in)),
               c[size_t(j.ctx->rank)]);
    o.setOutput(static_cast<char *>(out), c);
    gloo::allgatherv(o);
  });
}

int gather(void *ctx, const void *in, void *out, size_t bytes, int root,
           char *err, size_t errlen) {
  return guarded(err, errlen, [&] {
    Job &j = *static_cast<Job *>(ctx);
    gloo::GatherOptions o(j.ctx);
    o.setTag(j.tag++);
    o.setRoot(root);
    o.setInput(const_cast<char *>(static_cast<const char *>(in)), bytes);
    if (j.ctx->rank == root)
      o.setOutput(static_cast<char *>(out), bytes * size_t(j.ctx->size));
    gloo::gather(o);
  });
}

int broadcast(void *ctx, void *x, size_t n, int root, char *err,
              size_t errlen) {
  return guarded(err, errlen, [&] {
    Job &j = *static_cast<Job *>(ctx);
    gloo::BroadcastOptions o(j.ctx);
    o.setTag(j.tag++);
    o.setRoot(root);
    o.setOutput(static_cast<char *>(x), n);
    gloo::broadcast(o);
  });
}

int barrier(void *ctx, char *err, size_t errlen) {
  return guarded(err, errlen, [&] {
    Job &j = *static_cast<Job *>(ctx);
    gloo::BarrierOptions o(j.ctx);
    o.setTag(j.tag++);
    gloo::barrier(o);
  });
}

const spw_gloo_api kApi = {
    SPW_GLOO_ABI_VERSION, connect, close,     allreduce_sum, reduce_scatter_sum,
    allgatherv,           gather,  broadcast, barrier};

} // namespace

extern "C" __attribute__((visibility("default"))) const spw_gloo_api *
spw_gloo_api_get(void) {
  return &kApi;
}
