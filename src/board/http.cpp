// BoundedHeadServer (board.h): cpp-httplib's server with each request's head (request line and headers)
// bounded in bytes, lines and time. Debian's cpp-httplib 0.11 is a compiled library: its per-line limit
// (CPPHTTPLIB_HEADER_MAX_LENGTH, 8 KiB) cannot be changed and it has no limit on the number of header
// lines, whose total is otherwise bounded only by the read timeout, which restarts at every byte. The
// connection's bytes reach httplib through HeadLimitStream, which fails the read that passes a bound:
// httplib then answers 400, and the connection is closed after it (the rest of the refused head, or a
// request hidden in it, is never read as the connection's next request).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "board.h"

namespace tfm::board {
namespace {

using SteadyClock = std::chrono::steady_clock;

// The connection's socket as httplib's Stream, buffered; while a request's head is read it counts the
// head's bytes and lines and fails past kBoardMaxHeadBytes, kBoardMaxHeadLines or the head's deadline.
class HeadLimitStream : public httplib::Stream {
 public:
  HeadLimitStream(int fd, int timeout_seconds) : fd_(fd), timeout_ms_(timeout_seconds * 1000) {}

  // The next bytes start a request's head.
  void start_request() {
    in_head_ = true;
    refused_ = false;
    head_bytes_ = 0;
    head_lines_ = 0;
    last_four_ = 0;
    deadline_ = SteadyClock::now() + std::chrono::seconds(kBoardHeadSeconds);
  }

  bool wait_readable(int timeout_ms) const {
    if (begin_ < end_) return true;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) > 0;
  }
  bool is_readable() const override { return wait_readable(timeout_ms_); }
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    return ::poll(&p, 1, timeout_ms_) > 0;
  }

  // Whether a read of this request's head passed a bound: the request is refused.
  bool refused() const { return refused_; }

  ssize_t read(char* ptr, size_t size) override {
    if (in_head_ && SteadyClock::now() > deadline_) return refuse();
    if (begin_ == end_) {
      if (!is_readable()) return -1;
      const ssize_t n = ::recv(fd_, buffer_, sizeof buffer_, 0);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<size_t>(n);
    }
    size_t n = std::min(size, end_ - begin_);
    if (in_head_) {
      // Byte by byte through the head, so that the count stops exactly at its blank line.
      for (size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(buffer_[begin_ + i]);
        last_four_ = (last_four_ << 8) | c;
        ++head_bytes_;
        if (c == '\n') ++head_lines_;
        if (head_bytes_ > kBoardMaxHeadBytes || head_lines_ > kBoardMaxHeadLines) return refuse();
        if ((last_four_ & 0xFFFFFFFFu) == 0x0D0A0D0Au || (last_four_ & 0xFFFFu) == 0x0A0Au) {
          in_head_ = false;  // the body (bounded by set_payload_max_length) follows
          n = i + 1;
          break;
        }
      }
    }
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    return ::send(fd_, ptr, size, MSG_NOSIGNAL);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  ssize_t refuse() {
    refused_ = true;
    return -1;
  }

  void address_of(bool remote, std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    auto* a = reinterpret_cast<sockaddr*>(&addr);
    if ((remote ? ::getpeername(fd_, a, &len) : ::getsockname(fd_, a, &len)) != 0) return;
    char text[INET6_ADDRSTRLEN] = {0};
    if (addr.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&addr);
      ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      port = ntohs(v4->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&addr);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      port = ntohs(v6->sin6_port);
    }
    ip = text;
  }

  int fd_;
  int timeout_ms_;
  char buffer_[4096];
  size_t begin_ = 0, end_ = 0;
  bool in_head_ = true, refused_ = false;
  size_t head_bytes_ = 0, head_lines_ = 0;
  uint32_t last_four_ = 0;
  SteadyClock::time_point deadline_;
};

}  // namespace

// Set by close_connection_after while this thread handles a request: process_request runs on the thread
// that serves the connection.
static thread_local bool t_close_after_reply = false;

void close_connection_after(httplib::Response& res) {
  res.set_header("Connection", "close");
  t_close_after_reply = true;
}

// httplib's keep-alive loop (process_server_socket) over a HeadLimitStream: each request of a
// connection gets its own head bounds.
bool BoundedHeadServer::process_and_close_socket(socket_t sock) {
  HeadLimitStream stream(sock, kBoardReadTimeoutSeconds);
  bool ok = true;
  for (int served = 0; served < kBoardKeepAliveRequests && svr_sock_ != INVALID_SOCKET; ++served) {
    // Between requests a connection may sit idle for the keep-alive timeout.
    if (served > 0 && !stream.wait_readable(kBoardKeepAliveSeconds * 1000)) break;
    stream.start_request();
    bool closed = false;
    const bool last = served + 1 == kBoardKeepAliveRequests;
    t_close_after_reply = false;
    ok = process_request(stream, last, closed, nullptr);
    if (!ok || closed || t_close_after_reply || stream.refused()) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace tfm::board
