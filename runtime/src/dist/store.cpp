//===- store.cpp - the rendezvous store of torchrun-style launching -------===//
//
// See store.h. The server keeps every key in memory and answers a Wait when
// its keys are all set: the queries a rendezvous needs, in TCPStore's bytes.
//
//===----------------------------------------------------------------------===//

#include "dist/store.h"

#include "support.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace spw::dist {
namespace {

void put_u64(std::vector<char> &out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8); // little-endian hosts only (x86-64, aarch64)
  out.insert(out.end(), b, b + 8);
}

void put_bytes(std::vector<char> &out, const char *data, size_t n) {
  put_u64(out, n);
  out.insert(out.end(), data, data + n);
}

void put_string(std::vector<char> &out, const std::string &s) {
  put_bytes(out, s.data(), s.size());
}

// A query's bytes so far: its type.
std::vector<char> query(StoreQuery q) {
  std::vector<char> v;
  v.reserve(64);
  v.push_back(char(q));
  return v;
}

// Reads the fields of one query from a connection's buffered bytes; each
// read returns false while the query's bytes have not all arrived.
struct Reader {
  const std::vector<char> &in;
  size_t at = 0;
  bool u8(uint8_t &v) {
    if (in.size() - at < 1)
      return false;
    v = uint8_t(in[at++]);
    return true;
  }
  template <class T> bool pod(T &v) {
    if (in.size() - at < sizeof v)
      return false;
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return true;
  }
  bool bytes(std::string &v) {
    uint64_t n = 0;
    if (!pod(n) || in.size() - at < n)
      return false;
    v.assign(in.data() + at, size_t(n));
    at += size_t(n);
    return true;
  }
};

constexpr char kHandshake[] = "its handshake";

// A query larger than this is not TCPStore's (a stray connection): closed.
constexpr uint64_t kMaxQueryBytes = uint64_t(1) << 30;

bool send_all_fd(int fd, const char *p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    p += k;
    n -= size_t(k);
  }
  return true;
}

// connect(2) within `ms` milliseconds; false with the reason in `why`.
bool connect_within(int fd, const sockaddr *a, socklen_t len, int ms,
                    std::string &why) {
  const int flags = ::fcntl(fd, F_GETFL);
  (void)::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  bool ok = ::connect(fd, a, len) == 0;
  if (!ok && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    const int r = ::poll(&p, 1, ms);
    int err = 0;
    socklen_t n = sizeof err;
    if (r == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n) == 0) {
      ok = err == 0;
      if (!ok)
        errno = err;
    } else if (r == 0) {
      errno = ETIMEDOUT;
    }
  }
  if (!ok) {
    why = std::strerror(errno);
    return false;
  }
  (void)::fcntl(fd, F_SETFL, flags);
  return true;
}

} // namespace

// ---- the server
// ---------------------------------------------------------------

StoreServer::StoreServer(int port) {
  // Dual-stack where there is IPv6, else IPv4: clients reach it by
  // whichever address MASTER_ADDR names.
  listen_fd_ = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1, zero = 0;
  if (listen_fd_ >= 0) {
    (void)::setsockopt(listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero,
                       sizeof zero);
    (void)::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(uint16_t(port));
    if (::bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
      ::close(listen_fd_);
      listen_fd_ = -1;
    }
  }
  if (listen_fd_ < 0) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0)
      fail("the rendezvous store: socket: %s", std::strerror(errno));
    (void)::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port));
    if (::bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
      const int e = errno;
      ::close(listen_fd_);
      fail("rank 0 cannot serve the rendezvous store on MASTER_PORT=%d: %s "
           "(another job or program uses the port? choose a free one)",
           port, std::strerror(e));
    }
  }
  // (listen can find the port taken too: another process bound it at the
  // same moment.)
  if (::listen(listen_fd_, 1024) != 0) {
    const int e = errno;
    ::close(listen_fd_);
    fail("rank 0 cannot serve the rendezvous store on MASTER_PORT=%d: %s "
         "(another job or program uses the port? choose a free one)",
         port, std::strerror(e));
  }
  if (::pipe2(wake_, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(listen_fd_);
    fail("the rendezvous store on port %d: %s", port, std::strerror(e));
  }
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  (void)!::write(wake_[1], "x", 1);
  if (thread_.joinable())
    thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void StoreServer::serve() {
  struct Conn {
    int fd;
    std::vector<char> in;
    std::vector<std::string> waiting; // an unanswered Wait's keys
    std::vector<char> out;            // answers not sent yet
    size_t out_at = 0;                // of which this many were
    bool dead = false;                // closed below
  };
  std::vector<Conn> conns;
  std::map<std::string, std::string> data;
  auto all_set = [&](const std::vector<std::string> &keys) {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string &k) { return data.count(k); });
  };
  // Sends what c's answers hold without blocking; the rest waits for the
  // socket (POLLOUT). A client that asks more while over kMaxPending of
  // its answers wait does not read them: dropped, rather than stall the
  // store (one large answer alone is sent however large).
  constexpr size_t kMaxPending = size_t(16) << 20;
  auto flush = [&](Conn &c) {
    while (c.out_at < c.out.size()) {
      const ssize_t k =
          ::send(c.fd, c.out.data() + c.out_at, c.out.size() - c.out_at,
                 MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && errno == EINTR)
        continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        break;
      if (k <= 0) {
        c.dead = true;
        return;
      }
      c.out_at += size_t(k);
    }
    if (c.out_at == c.out.size()) {
      c.out.clear();
      c.out_at = 0;
    }
  };
  auto answer = [&](Conn &c, const char *p, size_t n) {
    if (c.out.size() - c.out_at > kMaxPending) {
      c.dead = true;
      return;
    }
    c.out.insert(c.out.end(), p, p + n);
    flush(c);
  };
  auto release_waiters = [&] {
    for (Conn &c : conns)
      if (!c.dead && !c.waiting.empty() && all_set(c.waiting)) {
        c.waiting.clear();
        const char stop = 0; // WaitResponseType::STOP_WAITING
        answer(c, &stop, 1);
      }
  };
  // One query from c's bytes: 1 handled, 0 incomplete, -1 not TCPStore's.
  auto handle = [&](Conn &c) -> int {
    Reader r{c.in};
    uint8_t q = 0;
    if (!r.u8(q))
      return 0;
    std::vector<char> reply;
    bool stored = false; // a key was set: waiters may be done
    switch (StoreQuery(q)) {
    case StoreQuery::Validate: {
      uint32_t magic = 0;
      if (!r.pod(magic))
        return 0;
      if (magic != kStoreMagic)
        return -1;
      break;
    }
    case StoreQuery::Ping: {
      uint32_t v = 0;
      if (!r.pod(v))
        return 0;
      reply.assign(reinterpret_cast<char *>(&v),
                   reinterpret_cast<char *>(&v) + 4);
      break;
    }
    case StoreQuery::Set: {
      std::string k, v;
      if (!r.bytes(k) || !r.bytes(v))
        return 0;
      data[k] = std::move(v);
      stored = true;
      break;
    }
    case StoreQuery::Get: {
      std::string k;
      if (!r.bytes(k))
        return 0;
      const auto it = data.find(k);
      const std::string v = it == data.end() ? std::string() : it->second;
      put_bytes(reply, v.data(), v.size());
      break;
    }
    case StoreQuery::Add: {
      std::string k;
      int64_t delta = 0;
      if (!r.bytes(k) || !r.pod(delta))
        return 0;
      const auto it = data.find(k);
      const int64_t sum =
          (it == data.end() ? 0
                            : std::strtoll(it->second.c_str(), nullptr, 10)) +
          delta;
      data[k] = std::to_string(sum);
      stored = true;
      reply.assign(reinterpret_cast<const char *>(&sum),
                   reinterpret_cast<const char *>(&sum) + 8);
      break;
    }
    case StoreQuery::Check:
    case StoreQuery::Wait: {
      uint64_t n = 0;
      if (!r.pod(n))
        return 0;
      if (n > kMaxQueryBytes / 8)
        return -1;
      // Each key takes 8 bytes at least: the keys are not all here yet
      // (and a count no bytes follow allocates nothing).
      if (n > (c.in.size() - r.at) / 8)
        return 0;
      std::vector<std::string> keys(static_cast<size_t>(n));
      for (std::string &k : keys)
        if (!r.bytes(k))
          return 0;
      if (StoreQuery(q) == StoreQuery::Check) {
        reply.push_back(all_set(keys) ? 0 : 1);
      } else if (all_set(keys)) {
        reply.push_back(0);
      } else {
        c.waiting = std::move(keys);
      }
      break;
    }
    default:
      return -1;
    }
    c.in.erase(c.in.begin(), c.in.begin() + long(r.at));
    if (!reply.empty())
      answer(c, reply.data(), reply.size());
    if (stored)
      release_waiters();
    return 1;
  };
  for (;;) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    for (const Conn &c : conns)
      fds.push_back({c.fd, short(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
    if (::poll(fds.data(), nfds_t(fds.size()), -1) < 0) {
      if (errno == EINTR)
        continue;
      return;
    }
    if (fds[0].revents)
      break;
    // The connections polled (one accepted below is polled next time).
    const size_t polled = conns.size();
    if (fds[1].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0)
        conns.push_back(Conn{fd, {}, {}, {}, 0, false});
    }
    for (size_t i = 0; i < polled; ++i) {
      Conn &c = conns[i];
      const short ev = fds[i + 2].revents;
      if (!ev || c.dead)
        continue;
      if (ev & POLLOUT)
        flush(c);
      if (!(ev & (POLLIN | POLLHUP | POLLERR)))
        continue;
      char buf[65536];
      const ssize_t k = ::recv(c.fd, buf, sizeof buf, 0);
      if (k <= 0) {
        if (k == 0 || (errno != EINTR && errno != EAGAIN))
          c.dead = true;
        continue;
      }
      // A connection whose bytes cannot be handled (not TCPStore's, or
      // more than memory holds) is closed; the store serves on.
      try {
        c.in.insert(c.in.end(), buf, buf + k);
        int rc = 1;
        while (!c.dead && !c.in.empty() && (rc = handle(c)) == 1) {
        }
        if (rc < 0 || c.in.size() > kMaxQueryBytes)
          c.dead = true;
      } catch (const std::exception &) {
        c.dead = true;
      }
    }
    for (size_t i = conns.size(); i-- > 0;)
      if (conns[i].dead) {
        ::close(conns[i].fd);
        conns.erase(conns.begin() + long(i));
      }
  }
  for (const Conn &c : conns)
    ::close(c.fd);
}

// ---- a client
// -----------------------------------------------------------------

StoreClient::StoreClient(const std::string &host, int port,
                         const std::string &prefix,
                         std::chrono::milliseconds timeout)
    : prefix_(prefix), where_(host + ":" + std::to_string(port)),
      timeout_(timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last = "no address";
  // The server may not listen yet (rank 0 starts it): retried until the
  // deadline.
  while (fd_ < 0) {
    addrinfo *res = nullptr;
    const int rc =
        ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0) {
      last = ::gai_strerror(rc);
    } else {
      for (addrinfo *a = res; a && fd_ < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC,
                                a->ai_protocol);
        if (fd < 0)
          continue;
        // Not blocking: an address that drops packets would hold connect
        // for minutes, past the deadline.
        const int left = int(std::max<int64_t>(
            1, std::chrono::duration_cast<std::chrono::milliseconds>(
                   deadline - std::chrono::steady_clock::now())
                   .count()));
        if (connect_within(fd, a->ai_addr, a->ai_addrlen, left, last))
          fd_ = fd;
        else
          ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    if (fd_ >= 0)
      break;
    if (std::chrono::steady_clock::now() > deadline)
      fail("the rendezvous store at MASTER_ADDR:MASTER_PORT (%s) did not "
           "answer within %lld s (%s): start every rank of the job (rank 0 "
           "serves the store unless the launcher does), and check the "
           "address and that the port is open",
           where_.c_str(), (long long)(timeout.count() / 1000), last.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const int one = 1;
  (void)::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{};
  tv.tv_sec = long(timeout.count() / 1000);
  tv.tv_usec = long(timeout.count() % 1000) * 1000;
  (void)::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // TCPStore's handshake: the magic, then a ping the server echoes. (A
  // failure throws from the constructor: the socket is closed first.)
  try {
    std::vector<char> q = query(StoreQuery::Validate);
    const uint32_t magic = kStoreMagic, ping = uint32_t(::getpid());
    q.insert(q.end(), reinterpret_cast<const char *>(&magic),
             reinterpret_cast<const char *>(&magic) + 4);
    q.push_back(char(StoreQuery::Ping));
    q.insert(q.end(), reinterpret_cast<const char *>(&ping),
             reinterpret_cast<const char *>(&ping) + 4);
    send_all(q);
    uint32_t echo = 0;
    recv_all(&echo, 4, kHandshake);
    if (echo != ping)
      fail("the rendezvous store at %s answered the handshake with %u, not "
           "%u: MASTER_PORT is not a torch.distributed TCPStore",
           where_.c_str(), echo, ping);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

StoreClient::~StoreClient() {
  if (fd_ >= 0)
    ::close(fd_);
}

void StoreClient::send_all(const std::vector<char> &bytes) {
  if (!send_all_fd(fd_, bytes.data(), bytes.size()))
    fail("the rendezvous store at %s: the connection closed (%s): its "
         "server (rank 0, or the launcher) ended",
         where_.c_str(), std::strerror(errno));
}

void StoreClient::recv_all(void *data, size_t n, const char *what) {
  char *p = static_cast<char *>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd_, p, n, 0);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      fail("the rendezvous store at %s: no answer to %s within %lld s: %s",
           where_.c_str(), what, (long long)(timeout_.count() / 1000),
           std::strcmp(what, kHandshake) == 0
               ? "what listens at MASTER_ADDR:MASTER_PORT is not a "
                 "torch.distributed TCPStore (another program's port? "
                 "choose a free MASTER_PORT)"
               : "a rank of the job did not start or did not reach the "
                 "rendezvous (each rank needs the same WORLD_SIZE, and "
                 "every RANK from 0 to WORLD_SIZE - 1 once)");
    if (k <= 0)
      fail("the rendezvous store at %s closed the connection while this "
           "rank waited for %s: its server (rank 0, or the launcher) ended",
           where_.c_str(), what);
    p += k;
    n -= size_t(k);
  }
}

void StoreClient::set(const std::string &key, const std::vector<char> &value) {
  std::vector<char> q = query(StoreQuery::Set);
  put_string(q, prefix_ + key);
  put_bytes(q, value.data(), value.size());
  send_all(q);
}

void StoreClient::wait(const std::vector<std::string> &keys) {
  std::vector<char> q = query(StoreQuery::Wait);
  put_u64(q, keys.size());
  for (const std::string &k : keys)
    put_string(q, prefix_ + k);
  send_all(q);
  uint8_t answer = 1;
  recv_all(&answer, 1,
           format("key '%s'%s", keys.empty() ? "" : keys[0].c_str(),
                  keys.size() > 1 ? " and others" : "")
               .c_str());
  if (answer != 0)
    fail("the rendezvous store at %s answered a wait with %u", where_.c_str(),
         unsigned(answer));
}

std::vector<char> StoreClient::get(const std::string &key) {
  wait({key});
  std::vector<char> q = query(StoreQuery::Get);
  put_string(q, prefix_ + key);
  send_all(q);
  uint64_t n = 0;
  recv_all(&n, 8, "a value");
  if (n > kMaxQueryBytes)
    fail("the rendezvous store at %s sent a value of %llu bytes for '%s'",
         where_.c_str(), (unsigned long long)n, key.c_str());
  std::vector<char> v(static_cast<size_t>(n));
  recv_all(v.data(), v.size(), "a value");
  return v;
}

int64_t StoreClient::add(const std::string &key, int64_t delta) {
  std::vector<char> q = query(StoreQuery::Add);
  put_string(q, prefix_ + key);
  q.insert(q.end(), reinterpret_cast<const char *>(&delta),
           reinterpret_cast<const char *>(&delta) + 8);
  send_all(q);
  int64_t sum = 0;
  recv_all(&sum, 8, "an add");
  return sum;
}

} // namespace spw::dist
