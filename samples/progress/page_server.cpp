// SPDX-License-Identifier: Apache-2.0
// Plain POSIX sockets and a thread per connection: a sample's page has a reader or two. Every
// wait is a poll() of 200 ms at most, so that the destructor's stop is seen soon.

#include "page_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace progress {

namespace {

constexpr int kPollMs = 200;
constexpr std::size_t kMaxHead = 16 * 1024;

// Closes the descriptor however the function holding it leaves.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// True once `fd` has something to read (or was closed by its peer); false when stopping.
bool readable(int fd, const std::atomic<bool>& stopping) {
  pollfd p{fd, POLLIN, 0};
  while (!stopping) {
    const int n = ::poll(&p, 1, kPollMs);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
  return false;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

sockaddr_in loopback(unsigned short port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

bool starts_with_nocase(std::string_view line, std::string_view prefix) {
  return line.size() >= prefix.size() &&
         std::equal(prefix.begin(), prefix.end(), line.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

// The request with "Connection: close" in place of its own Connection header: the API then ends
// the connection after its answer, so that each request of the browser comes here anew and a
// request for / is never relayed.
std::string closing(const std::string& request) {
  const std::size_t end = request.find("\r\n\r\n");
  std::string out;
  std::size_t at = 0;
  while (at < end) {
    const std::size_t eol = request.find("\r\n", at);
    const std::string_view line(request.data() + at, eol - at);
    if (!starts_with_nocase(line, "connection:")) out.append(line).append("\r\n");
    at = eol + 2;
  }
  return out + "Connection: close\r\n" + request.substr(end + 2);
}

}  // namespace

PageServer::PageServer(std::string page, unsigned short port, unsigned short api_port)
    : page_(std::move(page)), api_port_(api_port) {
  listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
  const int on = 1;
  ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in address = loopback(port);
  socklen_t size = sizeof address;
  if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
      ::listen(listener_, 64) != 0 ||
      ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    const std::string why = std::strerror(errno);
    if (listener_ >= 0) ::close(listener_);
    throw std::runtime_error("cannot listen on 127.0.0.1:" + std::to_string(port) + ": " + why);
  }
  port_ = ntohs(address.sin_port);
  acceptor_ = std::thread([this] { accept_connections(); });
}

PageServer::~PageServer() {
  stopping_ = true;
  acceptor_.join();
  for (Connection& connection : connections_) connection.thread.join();
  ::close(listener_);
}

void PageServer::accept_connections() {
  while (readable(listener_, stopping_)) {
    const int client = ::accept(listener_, nullptr, nullptr);
    if (client < 0) continue;
    std::erase_if(connections_, [](Connection& c) {
      if (!*c.done) return false;
      c.thread.join();
      return true;
    });
    auto done = std::make_shared<std::atomic<bool>>(false);
    connections_.push_back({std::thread([this, client, done] {
                              serve_connection(client);
                              *done = true;
                            }),
                            done});
  }
}

void PageServer::serve_connection(int client) {
  Fd guard{client};
  std::string head;
  char buffer[4096];
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() > kMaxHead || !readable(client, stopping_)) return;
    const ssize_t n = ::recv(client, buffer, sizeof buffer, 0);
    if (n <= 0) return;
    head.append(buffer, static_cast<std::size_t>(n));
  }
  if (head.starts_with("GET / ") || head.starts_with("GET /index.html ")) {
    write_all(client,
              "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
              "Cache-Control: no-store\r\nConnection: close\r\nContent-Length: " +
                  std::to_string(page_.size()) + "\r\n\r\n" + page_);
    return;
  }
  relay(client, std::move(head));
}

// Copies bytes both ways until either side closes: a Server-Sent Events answer too, as it comes.
void PageServer::relay(int client, std::string head) {
  Fd api{::socket(AF_INET, SOCK_STREAM, 0)};
  const sockaddr_in address = loopback(api_port_);
  if (api.fd < 0 ||
      ::connect(api.fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    write_all(client, "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    return;
  }
  if (!write_all(api.fd, closing(head))) return;
  pollfd both[2] = {{client, POLLIN, 0}, {api.fd, POLLIN, 0}};
  char buffer[16 * 1024];
  while (!stopping_) {
    const int n = ::poll(both, 2, kPollMs);
    if (n < 0 && errno != EINTR) return;
    for (int from = 0; n > 0 && from < 2; ++from) {
      if (both[from].revents == 0) continue;
      const ssize_t got = ::recv(both[from].fd, buffer, sizeof buffer, 0);
      if (got <= 0 || !write_all(both[1 - from].fd, {buffer, static_cast<std::size_t>(got)})) {
        return;
      }
    }
  }
}

}  // namespace progress
