// SPDX-License-Identifier: Apache-2.0
#pragma once
// A raw-socket HTTP client for the tests of the HTTP server: it writes requests byte for byte
// (malformed ones too) and reads responses with Beast's parser; and the small helpers those
// tests share.

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <durable/errors.hpp>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "http_server.hpp"

namespace durable::test::http_client {

using ops::HttpHandler;
using ops::HttpOptions;
using ops::HttpRequest;
using ops::HttpResponse;
using ops::HttpServer;
using namespace std::chrono_literals;
namespace http = boost::beast::http;
using Response = http::response<http::string_body>;
using SteadyClock = std::chrono::steady_clock;

// A blocking TCP client to 127.0.0.1; a read gives up after 5 s, so a broken server fails the
// test instead of hanging it. Throws std::runtime_error (it is also used off the test thread).
class Connection {
 public:
  explicit Connection(unsigned short port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    timeval timeout{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      ::close(fd_);
      throw std::runtime_error("cannot connect to port " + std::to_string(port));
    }
  }
  ~Connection() { ::close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void send(std::string_view bytes) {
    while (!bytes.empty()) {
      const auto sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (sent <= 0) throw std::runtime_error("send failed");
      bytes.remove_prefix(static_cast<std::size_t>(sent));
    }
  }

  // One whole response. head: it answers a HEAD request, so it has no body whatever it says.
  Response read_response(bool head = false) {
    http::response_parser<http::string_body> parser;
    parser.eager(true);
    parser.skip(head);
    for (;;) {
      if (!pending_.empty()) {
        boost::beast::error_code error;
        const auto used = parser.put(boost::asio::buffer(pending_), error);
        pending_.erase(0, used);
        if (parser.is_done()) return parser.release();
        if (error && error != http::error::need_more) throw std::runtime_error(error.message());
        if (used > 0) continue;
      }
      if (!receive()) throw std::runtime_error("the connection ended before a whole response");
    }
  }

  Response exchange(std::string_view request) {
    send(request);
    return read_response();
  }

  // Reads until the bytes received hold `text` (raw: a chunked body's framing and all); false
  // when the connection ends, or a read waits 5 s, first. A streamed response is read this way.
  bool received_text(std::string_view text) { return received_times(text, 1); }
  // As received_text(), until `text` is there `times` times, apart.
  bool received_times(std::string_view text, std::size_t times) {
    for (;;) {
      std::size_t found = 0;
      for (std::size_t at = pending_.find(text); at != std::string::npos;
           at = pending_.find(text, at + text.size())) {
        ++found;
      }
      if (found >= times) return true;
      if (!receive()) return false;
    }
  }

  // No more bytes from this client: the server sees the end of its stream.
  void shutdown_send() { ::shutdown(fd_, SHUT_WR); }

  // True when the server closes the connection within the time, with nothing more sent.
  // Tests wait kPromptly for a close the server makes on its own account (a refusal, a stop, a
  // response that ends the connection): far short of the 30 s default idle timeout that would
  // close it anyway, and long enough for a loaded machine under a sanitizer.
  bool closed_within(std::chrono::milliseconds time) {
    pollfd ready{fd_, POLLIN, 0};
    if (!pending_.empty() || ::poll(&ready, 1, static_cast<int>(time.count())) != 1) return false;
    char byte;
    const auto received = ::recv(fd_, &byte, 1, 0);
    return received == 0 || (received < 0 && errno == ECONNRESET);
  }

 private:
  bool receive() {
    char chunk[4096];
    const auto received = ::recv(fd_, chunk, sizeof chunk, 0);
    if (received <= 0) return false;
    pending_.append(chunk, static_cast<std::size_t>(received));
    return true;
  }

  int fd_;
  std::string pending_;  // received, not parsed yet
};

inline std::string request_text(std::string_view method, std::string_view target,
                                std::string_view body = "", std::string_view headers = "") {
  std::string text =
      std::string(method) + " " + std::string(target) + " HTTP/1.1\r\nHost: localhost\r\n";
  if (!body.empty()) text += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return text + std::string(headers) + "\r\n" + std::string(body);
}

inline std::string get(std::string_view target, std::string_view headers = "") {
  return request_text("GET", target, "", headers);
}

// Answers with what it was given, as JSON.
inline HttpResponse echo(const HttpRequest& request) {
  const nlohmann::json seen = {{"method", request.method},
                               {"path", request.path},
                               {"query", request.query},
                               {"body", request.body},
                               {"content_type", request.content_type}};
  HttpResponse response;
  response.body = seen.dump();
  return response;
}

// echo, counting its calls: a request the server refused never reached it.
inline HttpHandler counting_echo(std::atomic<int>& calls) {
  return [&calls](const HttpRequest& request) {
    ++calls;
    return echo(request);
  };
}

inline constexpr std::chrono::milliseconds kPromptly{10'000};

inline HttpOptions ephemeral() {
  HttpOptions options;
  options.port = 0;
  return options;
}

inline nlohmann::json json_of(const Response& response) {
  return nlohmann::json::parse(response.body());
}
inline std::string error_code_of(const Response& response) {
  return json_of(response).at("error").at("code").get<std::string>();
}
inline std::string header_of(const Response& response, std::string_view name) {
  return std::string(response[boost::beast::string_view(name.data(), name.size())]);
}

// A handler that holds its request until the test opens the gate: a database call that blocks.
// Declare an Opener after the server, so that the gate opens before the server waits for the
// handler to return, whatever the test's outcome.
class Gate {
 public:
  void pass() {
    std::unique_lock lock(mutex_);
    ++entered_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
  }
  bool wait_entered() {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 5s, [this] { return entered_ > 0; });
  }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int entered_ = 0;
  bool open_ = false;
};

struct Opener {
  Gate& gate;
  ~Opener() { gate.open(); }
};

// True once `count` clients connected together are all served, tried again until a deadline: a
// connection the client saw closed may take a moment more to leave the server's count.
inline bool served_at_once(unsigned short port, int count) {
  for (const auto deadline = SteadyClock::now() + 5s; SteadyClock::now() < deadline;) {
    try {
      std::vector<std::unique_ptr<Connection>> clients;
      for (int i = 0; i < count; ++i) clients.push_back(std::make_unique<Connection>(port));
      bool all = true;
      for (auto& client : clients) all = all && client->exchange(get("/n")).result_int() == 200;
      if (all) return true;
    } catch (const std::runtime_error&) {
    }
  }
  return false;
}

inline std::chrono::milliseconds since(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start);
}

}  // namespace durable::test::http_client
