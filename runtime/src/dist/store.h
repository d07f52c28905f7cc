//===- store.h - the rendezvous store of torchrun-style launching ---------===//
//
// A job that torchrun (or any launcher setting RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT) started finds its ranks through a key-value
// store at MASTER_ADDR:MASTER_PORT: the one torch.distributed's TCPStore
// serves. Under torchrun its agent already serves it there
// (TORCHELASTIC_USE_AGENT_STORE=True) and every rank is a client; with a
// launcher that serves none, rank 0 serves it (Server). Both speak TCPStore's
// wire protocol (torch/csrc/distributed/c10d/TCPStoreBackend.hpp), so each
// interoperates with torch's: a query is one byte, then its arguments,
// strings and byte strings as a little-endian uint64 length and the bytes.
// Gloo's rendezvous (gloo.h) and NCCL's unique id (through Gloo's
// broadcast) use it; nothing else does.
//
//===----------------------------------------------------------------------===//
#ifndef SPILLWAY_RUNTIME_SRC_DIST_STORE_H
#define SPILLWAY_RUNTIME_SRC_DIST_STORE_H

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace spw::dist {

// TCPStore's queries (TCPStoreBackend.hpp's QueryType: the values are the
// protocol) this client sends and the server answers.
enum class StoreQuery : uint8_t {
  Validate = 0, // uint32 magic; no answer
  Set = 1,      // key, value; no answer
  Get = 3,      // key -> value (the key exists: a Wait comes first)
  Add = 4,      // key, int64 delta -> int64 sum (a value of decimal text)
  Check = 5,    // uint64 n, n keys -> uint8 0 (all set) or 1
  Wait = 6,     // uint64 n, n keys -> uint8 0 once all are set
  Ping = 13,    // uint32 -> the same uint32
};
constexpr uint32_t kStoreMagic = 0x3C85F7CE;

// Serves the store on `port` of every interface, on a thread, until
// destroyed. Throws spw::Error (naming the port) when it cannot listen.
class StoreServer {
public:
  explicit StoreServer(int port);
  ~StoreServer();
  StoreServer(const StoreServer &) = delete;
  StoreServer &operator=(const StoreServer &) = delete;

private:
  void serve();
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1}; // a pipe: the destructor stops serve()
  std::thread thread_;
};

// One connection to the store. Every key gets `prefix` in front (the job's
// keys stay apart from a launcher's and from an earlier attempt's). Throws
// spw::Error naming the store's address when the store does not answer
// within `timeout`.
class StoreClient {
public:
  StoreClient(const std::string &host, int port, const std::string &prefix,
              std::chrono::milliseconds timeout);
  ~StoreClient();
  StoreClient(const StoreClient &) = delete;
  StoreClient &operator=(const StoreClient &) = delete;

  void set(const std::string &key, const std::vector<char> &value);
  // Waits for the key (at most the timeout), then reads it.
  std::vector<char> get(const std::string &key);
  void wait(const std::vector<std::string> &keys);
  int64_t add(const std::string &key, int64_t delta);
  const std::string &where() const { return where_; } // "HOST:PORT"

private:
  void send_all(const std::vector<char> &bytes);
  void recv_all(void *data, size_t n, const char *what);
  int fd_ = -1;
  std::string prefix_, where_;
  std::chrono::milliseconds timeout_;
};

} // namespace spw::dist

#endif // SPILLWAY_RUNTIME_SRC_DIST_STORE_H
