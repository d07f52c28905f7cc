// The rendezvous store of torchrun-style launching (dist/store.h): rank 0's
// server and the ranks' clients, in TCPStore's bytes.

#include "dist/store.h"

#include "support.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <chrono>
#include <cstring>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace {

using namespace std::chrono_literals;
using spw::dist::StoreClient;
using spw::dist::StoreServer;

sockaddr_in loopback(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  return a;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = loopback(0);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::vector<char> bytes(const std::string &s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<char> &v) { return {v.begin(), v.end()}; }

// A plain TCP connection to the store at `port` (-1: it failed), its
// receive buffer `rcvbuf` bytes when not 0: the tests' hand-made clients.
int connect_raw(int port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf)
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  const sockaddr_in a = loopback(port);
  if (::connect(fd, reinterpret_cast<const sockaddr *>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// TCPStore's handshake: the validate query and its magic.
std::string validate() {
  std::string q(1, char(spw::dist::StoreQuery::Validate));
  const uint32_t magic = spw::dist::kStoreMagic;
  q.append(reinterpret_cast<const char *>(&magic), 4);
  return q;
}

TEST(Store, SetGetAddAcrossClients) {
  const int port = free_port();
  StoreServer server(port);
  StoreClient a("127.0.0.1", port, "job/", 5s),
      b("127.0.0.1", port, "job/", 5s);
  a.set("k", bytes("value"));
  EXPECT_EQ(text(b.get("k")), "value");
  a.set("k", bytes("")); // overwritten, empty
  EXPECT_EQ(text(b.get("k")), "");
  EXPECT_EQ(a.add("n", 3), 3);
  EXPECT_EQ(b.add("n", -5), -2);
  EXPECT_EQ(text(a.get("n")), "-2"); // decimal text, as TCPStore keeps it
  // A prefix keeps jobs apart: another prefix does not see the key.
  StoreClient other("127.0.0.1", port, "other/", 1s);
  EXPECT_THROW(other.get("k"), spw::Error);
}

TEST(Store, WaitBlocksUntilAnotherClientSets) {
  const int port = free_port();
  StoreServer server(port);
  StoreClient a("127.0.0.1", port, "", 10s);
  std::thread later([&] {
    StoreClient b("127.0.0.1", port, "", 10s);
    std::this_thread::sleep_for(200ms);
    b.set("x", bytes("1"));
    b.set("y", bytes("2"));
  });
  const auto t0 = std::chrono::steady_clock::now();
  a.wait({"x", "y"});
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
  EXPECT_EQ(text(a.get("y")), "2");
  later.join();
}

TEST(Store, ClientWaitsForTheServerToStart) {
  const int port = free_port();
  std::unique_ptr<StoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<StoreServer>(port);
  });
  StoreClient a("127.0.0.1", port, "", 10s); // retries until it listens
  a.set("up", bytes("yes"));
  EXPECT_EQ(text(a.get("up")), "yes");
  starter.join();
}

// An answer larger than the socket's buffers goes in pieces as the client
// reads (Gloo's rendezvous stores (ranks - 1) x 136 bytes per rank: 1.3 MB
// for 10000 ranks); and a count of keys with no keys behind it allocates
// nothing and stalls nothing.
TEST(Store, LargeAnswersAndStrayCounts) {
  const int port = free_port();
  StoreServer server(port);
  const int fd = connect_raw(port);
  ASSERT_GE(fd, 0);
  std::string q = validate();
  q += char(spw::dist::StoreQuery::Wait);
  const uint64_t many = uint64_t(1) << 26; // 64 Mi keys announced, none sent
  q.append(reinterpret_cast<const char *>(&many), 8);
  ASSERT_EQ(::send(fd, q.data(), q.size(), 0), ssize_t(q.size()));
  StoreClient w("127.0.0.1", port, "", 10s), r("127.0.0.1", port, "", 10s);
  std::string big(size_t(24) << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i)
    big[i] = char(i * 2654435761u >> 24);
  w.set("big", bytes(big));
  EXPECT_EQ(text(r.get("big")), big);
  ::close(fd);
}

// A query split over many TCP segments (here a byte at a time) is one
// query: the server buffers until it is whole.
TEST(Store, ServerReassemblesQueriesByteByByte) {
  const int port = free_port();
  StoreServer server(port);
  const int fd = connect_raw(port);
  ASSERT_GE(fd, 0);
  std::string q = validate();
  auto u64 = [&](uint64_t v) { q.append(reinterpret_cast<char *>(&v), 8); };
  q += char(spw::dist::StoreQuery::Set);
  u64(3);
  q += "key";
  u64(2);
  q += "ok";
  q += char(spw::dist::StoreQuery::Get);
  u64(3);
  q += "key";
  for (char c : q) {
    ASSERT_EQ(::send(fd, &c, 1, 0), 1);
    std::this_thread::sleep_for(1ms);
  }
  char reply[10] = {};
  size_t got = 0;
  while (got < sizeof reply) {
    const ssize_t k = ::recv(fd, reply + got, sizeof reply - got, 0);
    ASSERT_GT(k, 0);
    got += size_t(k);
  }
  uint64_t n = 0;
  std::memcpy(&n, reply, 8);
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(std::string(reply + 8, 2), "ok");
  ::close(fd);
}

// A client that sends queries and never reads the answers (here pings,
// until its buffers and the server's fill) is dropped: the store goes on
// serving the ranks.
TEST(Store, AClientThatDoesNotReadIsDropped) {
  const int port = free_port();
  StoreServer server(port);
  // A small receive buffer: the answers fill it soon.
  const int fd = connect_raw(port, 4096);
  ASSERT_GE(fd, 0);
  const std::string q = validate();
  std::string pings;
  for (int i = 0; i < 4096; ++i) {
    pings += char(spw::dist::StoreQuery::Ping);
    pings.append(reinterpret_cast<const char *>(&i), 4);
  }
  ASSERT_EQ(::send(fd, q.data(), q.size(), 0), ssize_t(q.size()));
  // Pings from another thread, as fast as the server takes them, until it
  // drops the connection; the ranks' client comes once the flood has run.
  std::thread flood([&] {
    for (int i = 0; i < 100000; ++i)
      if (::send(fd, pings.data(), pings.size(), MSG_NOSIGNAL) <= 0)
        break;
  });
  std::this_thread::sleep_for(1s);
  std::string got;
  try {
    StoreClient c("127.0.0.1", port, "", 3s);
    c.set("k", bytes("still served"));
    got = text(c.get("k"));
  } catch (const spw::Error &e) {
    got = e.what(); // a stalled store: no answer
  }
  ::shutdown(fd, SHUT_RDWR); // ends the flood (and a stalled server's send)
  flood.join();
  ::close(fd);
  EXPECT_EQ(got, "still served");
}

TEST(Store, ErrorsNameTheStoreAndWhatToDo) {
  const int port = free_port();
  // Nothing listens: the client gives up at its timeout.
  try {
    StoreClient a("127.0.0.1", port, "", 300ms);
    FAIL() << "connected to nothing";
  } catch (const spw::Error &e) {
    EXPECT_NE(std::string(e.what()).find("did not answer within"),
              std::string::npos)
        << e.what();
  }
  // A key nobody sets: the wait ends at the timeout, naming the key.
  StoreServer server(port);
  StoreClient a("127.0.0.1", port, "", 1s);
  try {
    a.get("never");
    FAIL() << "got a key nobody set";
  } catch (const spw::Error &e) {
    EXPECT_NE(std::string(e.what()).find("no answer to key 'never'"),
              std::string::npos)
        << e.what();
  }
  // A second server on the port is refused, naming it.
  try {
    StoreServer again(port);
    FAIL() << "two servers on one port";
  } catch (const spw::Error &e) {
    EXPECT_NE(std::string(e.what()).find("Address already in use"),
              std::string::npos)
        << e.what();
  }
}

// A server that is not TCPStore's (it answers the handshake with other
// bytes, or closes): the client says so.
TEST(Store, RefusesAServerThatIsNotAStore) {
  const int port = free_port();
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const sockaddr_in a = loopback(port);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<const sockaddr *>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  std::thread peer([&] {
    const int c = ::accept(lfd, nullptr, nullptr);
    char buf[64];
    (void)!::recv(c, buf, sizeof buf, 0);
    (void)!::send(c, "HTTP", 4, 0);
    ::close(c);
  });
  try {
    StoreClient c("127.0.0.1", port, "", 2s);
    FAIL() << "took an HTTP server for a store";
  } catch (const spw::Error &e) {
    EXPECT_NE(std::string(e.what()).find("is not a torch.distributed TCPStore"),
              std::string::npos)
        << e.what();
  }
  peer.join();
  ::close(lfd);
}

} // namespace
