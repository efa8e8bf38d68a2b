// SPDX-License-Identifier: Apache-2.0
// The proxy of pg_proxy.hpp: one poll() loop over the listening socket, a wake-up pipe, and both
// sockets of every connection. Bytes are forwarded a whole message at a time, so that a drop
// after a statement's answer can hold back exactly that answer.

#include "pg_proxy.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

namespace durable::test {

namespace {

// The codes of the untyped messages a connection may open with (protocol.html).
constexpr std::uint32_t kSslRequest = 80877103;
constexpr std::uint32_t kGssEncRequest = 80877104;
constexpr std::uint32_t kCancelRequest = 80877102;

std::uint32_t be32(const std::string& bytes, std::size_t at) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  }
  return value;
}

// The NUL-terminated string of a message body at `at`, and where the next field starts.
std::string cstring(const std::string& message, std::size_t& at) {
  const std::size_t end = message.find('\0', at);
  if (end == std::string::npos) return {};
  std::string text = message.substr(at, end - at);
  at = end + 1;
  return text;
}

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("PgProxy: " + what + ": " + std::strerror(errno));
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

sockaddr_in loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// The SQL a statement's messages run: a query's text, a Parse's, or the text a Bind's prepared
// statement was parsed from.
std::string statement_text(const std::string& batch,
                           const std::map<std::string, std::string>& prepared) {
  for (std::size_t at = 0; at + 5 <= batch.size(); at += 1 + be32(batch, at + 1)) {
    std::size_t field = at + 5;
    if (batch[at] == 'Q') return cstring(batch, field);
    if (batch[at] == 'P') {
      cstring(batch, field);
      return cstring(batch, field);
    }
    if (batch[at] == 'B') {
      cstring(batch, field);  // the portal
      const auto found = prepared.find(cstring(batch, field));
      if (found != prepared.end()) return found->second;
    }
  }
  return {};
}

}  // namespace

struct PgProxy::Link {
  int client = -1;
  int server = -1;
  std::string from_client, to_server, from_server, to_client;
  std::string batch;            // an extended-protocol exchange, held until its Sync
  bool started = false;         // past the StartupMessage: typed messages from the client
  int single_byte_answers = 0;  // to SSLRequest and GSSENCRequest, still to come
  bool opaque = false;          // encrypted: passed through unread
  bool doomed = false;          // its statement went on; it is dropped at the answer's end
  bool server_gone = false;     // closed once what the server sent has reached the client
  bool closed = false;
  std::map<std::string, std::string> prepared;  // statement name -> SQL text
};

PgProxy::PgProxy(int server_port) : server_port_(server_port) {
  listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener_ < 0) fail("socket");
  sockaddr_in address = loopback(0);
  if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) fail("bind");
  if (::listen(listener_, 64) != 0) fail("listen");
  socklen_t length = sizeof address;
  if (::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    fail("getsockname");
  }
  port_ = ntohs(address.sin_port);
  if (::pipe2(wake_, O_CLOEXEC) != 0) fail("pipe");
  set_nonblocking(listener_);
  thread_ = std::thread([this] { loop(); });
}

PgProxy::~PgProxy() {
  const char stop = 'x';
  while (::write(wake_[1], &stop, 1) < 0 && errno == EINTR) {
  }
  thread_.join();
  ::close(wake_[0]);
  ::close(wake_[1]);
  ::close(listener_);
}

int PgProxy::port_of(const std::string& uri) {
  const std::size_t host = uri.find('@') + 1;
  return std::stoi(uri.substr(uri.find(':', host) + 1));
}

std::string PgProxy::route(const std::string& uri) const {
  const std::size_t start = uri.find("://") + 3;
  const std::size_t end = uri.find_first_of("/?", start);
  const std::string authority = uri.substr(start, end - start);
  const std::size_t at = authority.rfind('@');
  const std::string user = at == std::string::npos ? "" : authority.substr(0, at + 1);
  return uri.substr(0, start) + user + "127.0.0.1:" + std::to_string(port_) +
         (end == std::string::npos ? "" : uri.substr(end));
}

void PgProxy::arm(Fault fault, std::int64_t nth, std::string text, std::function<void()> action) {
  std::lock_guard lock(mutex_);
  fault_ = fault;
  nth_ = nth;
  text_ = std::move(text);
  action_ = std::move(action);
  struck_statement_.clear();
  struck_ = false;
  statements_ = 0;
}

void PgProxy::reset() { arm(Fault::none, 0, {}, {}); }

void PgProxy::drop_at(std::int64_t nth, When when) {
  arm(when == When::before ? Fault::drop_before : Fault::drop_after, nth, {}, {});
}

void PgProxy::drop_at(const std::string& text, When when) {
  arm(when == When::before ? Fault::drop_before : Fault::drop_after, 0, text, {});
}

void PgProxy::pause_at(std::int64_t nth, std::function<void()> action) {
  arm(Fault::pause, nth, {}, std::move(action));
}

std::string PgProxy::struck_statement() const {
  std::lock_guard lock(mutex_);
  return struck_statement_;
}

bool PgProxy::read_into(int fd, std::string& into) {
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      into.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

bool PgProxy::write_from(int fd, std::string& from) {
  while (!from.empty()) {
    const ssize_t n = ::send(fd, from.data(), from.size(), MSG_NOSIGNAL);
    if (n > 0) {
      from.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  return true;
}

void PgProxy::accept_client() {
  for (;;) {
    const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return;  // none left (EAGAIN), or one that gave up meanwhile
    const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address = loopback(server_port_);
    // Blocking, on the loopback: the server accepts at once or refuses at once. A refusal (the
    // server restarting) closes the client's connection, as the server's absence would.
    if (server < 0 ||
        ::connect(server, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      if (server >= 0) ::close(server);
      ::close(client);
      continue;
    }
    const int on = 1;
    ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    set_nonblocking(client);
    set_nonblocking(server);
    auto link = std::make_unique<Link>();
    link->client = client;
    link->server = server;
    links_.push_back(std::move(link));
  }
}

void PgProxy::parse_client(Link& link) {
  std::string& in = link.from_client;
  while (!link.closed) {
    if (link.opaque) {
      link.to_server += in;
      in.clear();
      return;
    }
    if (!link.started) {  // untyped: a length, then a code
      if (in.size() < 8 || in.size() < be32(in, 0)) return;
      const std::uint32_t length = be32(in, 0), code = be32(in, 4);
      link.to_server += in.substr(0, length);
      in.erase(0, length);
      if (code == kSslRequest || code == kGssEncRequest) {
        ++link.single_byte_answers;
      } else if (code != kCancelRequest) {
        link.started = true;  // the StartupMessage
      }
      continue;
    }
    if (in.size() < 5 || in.size() < 1 + be32(in, 1)) return;
    const std::size_t length = 1 + be32(in, 1);
    const char type = in[0];
    std::string message = in.substr(0, length);
    in.erase(0, length);
    if (type == 'P') {  // Parse: a statement's name, then its text
      std::size_t at = 5;
      const std::string name = cstring(message, at);
      link.prepared[name] = cstring(message, at);
    }
    if (std::strchr("PBDEC", type) != nullptr) {  // Parse, Bind, Describe, Execute, Close
      link.batch += message;
    } else if (type == 'Q' || type == 'S') {
      statement(link, std::exchange(link.batch, {}) + message);
    } else {  // Flush, Terminate, a password, COPY data: on at once, uncounted
      link.to_server += std::exchange(link.batch, {}) + message;
    }
  }
}

void PgProxy::statement(Link& link, std::string batch) {
  const std::int64_t n = ++statements_;
  Fault fault = Fault::none;
  std::function<void()> action;
  {
    std::lock_guard lock(mutex_);
    if (fault_ != Fault::none && !struck_) {
      const std::string text = statement_text(batch, link.prepared);
      if (text_.empty() ? n == nth_ : text.find(text_) != std::string::npos) {
        fault = fault_;
        action = action_;
        struck_statement_ = text;
        struck_ = true;
      }
    }
  }
  if (fault == Fault::drop_before) {
    link.closed = true;
    return;
  }
  if (fault == Fault::pause) action();
  link.doomed = fault == Fault::drop_after;
  link.to_server += batch;
}

void PgProxy::parse_server(Link& link) {
  std::string& in = link.from_server;
  while (!link.closed) {
    if (link.opaque) {
      link.to_client += in;
      in.clear();
      return;
    }
    if (link.single_byte_answers > 0) {
      if (in.empty()) return;
      --link.single_byte_answers;
      link.opaque = in[0] == 'S' || in[0] == 'G';  // it will encrypt: nothing more to read
      link.to_client += in[0];
      in.erase(0, 1);
      continue;
    }
    if (in.size() < 5 || in.size() < 1 + be32(in, 1)) return;
    const std::size_t length = 1 + be32(in, 1);
    const char type = in[0];
    if (!link.doomed) {
      link.to_client.append(in, 0, length);
    } else if (type == 'Z') {  // ReadyForQuery: the whole answer came, and goes nowhere
      link.closed = true;
    }
    in.erase(0, length);
  }
}

void PgProxy::loop() {
  for (;;) {
    std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
    for (const auto& link : links_) {
      fds.push_back(
          {link->client, static_cast<short>(POLLIN | (link->to_client.empty() ? 0 : POLLOUT)), 0});
      fds.push_back({link->server,
                     static_cast<short>((link->server_gone ? 0 : POLLIN) |
                                        (link->to_server.empty() ? 0 : POLLOUT)),
                     0});
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;  // cannot happen with valid descriptors; the proxy's clients then see it gone
    }
    if (fds[0].revents != 0) break;
    if (fds[1].revents != 0) accept_client();
    for (std::size_t i = 0; i < links_.size() && 2 + 2 * i < fds.size(); ++i) {
      Link& link = *links_[i];
      const short client = fds[2 + 2 * i].revents, server = fds[3 + 2 * i].revents;
      if (client != 0) {
        if (!read_into(link.client, link.from_client)) link.closed = true;
        parse_client(link);
      }
      if (server != 0 && !link.server_gone) {
        // The server's end (a restart's FATAL message, then the close): what it sent goes on
        // to the client first.
        link.server_gone = !read_into(link.server, link.from_server);
        parse_server(link);
      }
      if (!link.closed && !write_from(link.server, link.to_server)) link.closed = true;
      if (!link.closed && !write_from(link.client, link.to_client)) link.closed = true;
      if (link.server_gone && link.to_client.empty()) link.closed = true;
    }
    std::erase_if(links_, [](const std::unique_ptr<Link>& link) {
      if (!link->closed) return false;
      ::close(link->client);
      ::close(link->server);
      return true;
    });
  }
  for (const auto& link : links_) {
    ::close(link->client);
    ::close(link->server);
  }
  links_.clear();
}

}  // namespace durable::test
