// The HTTP server over real TCP: a raw-socket client writes requests byte for byte (malformed
// ones too) and reads responses with Beast's parser.

#include "http_server.hpp"

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

using namespace durable::ops;
using namespace std::chrono_literals;

namespace {

namespace http = boost::beast::http;
using Response = http::response<http::string_body>;
using SteadyClock = std::chrono::steady_clock;

// A blocking TCP client to 127.0.0.1; a read gives up after 5 s, so a broken server fails the
// test instead of hanging it. Throws std::runtime_error (it is also used off the test thread).
class Client {
 public:
  explicit Client(unsigned short port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
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
  ~Client() { ::close(fd_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

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

  // No more bytes from this client: the server sees the end of its stream.
  void shutdown_send() { ::shutdown(fd_, SHUT_WR); }

  // True when the server closes the connection within the time, with nothing more sent.
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

std::string request_text(std::string_view method, std::string_view target,
                         std::string_view body = "", std::string_view headers = "") {
  std::string text =
      std::string(method) + " " + std::string(target) + " HTTP/1.1\r\nHost: localhost\r\n";
  if (!body.empty()) text += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return text + std::string(headers) + "\r\n" + std::string(body);
}

std::string get(std::string_view target, std::string_view headers = "") {
  return request_text("GET", target, "", headers);
}

// Answers with what it was given, as JSON.
HttpResponse echo(const HttpRequest& request) {
  const nlohmann::json seen = {{"method", request.method},
                               {"path", request.path},
                               {"query", request.query},
                               {"body", request.body},
                               {"content_type", request.content_type}};
  HttpResponse response;
  response.body = seen.dump();
  return response;
}

HttpOptions ephemeral() {
  HttpOptions options;
  options.port = 0;
  return options;
}

nlohmann::json json_of(const Response& response) { return nlohmann::json::parse(response.body()); }
std::string error_code_of(const Response& response) {
  return json_of(response).at("error").at("code").get<std::string>();
}
std::string header_of(const Response& response, std::string_view name) {
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
bool served_at_once(unsigned short port, int count) {
  for (const auto deadline = SteadyClock::now() + 5s; SteadyClock::now() < deadline;) {
    try {
      std::vector<std::unique_ptr<Client>> clients;
      for (int i = 0; i < count; ++i) clients.push_back(std::make_unique<Client>(port));
      bool all = true;
      for (auto& client : clients) all = all && client->exchange(get("/n")).result_int() == 200;
      if (all) return true;
    } catch (const std::runtime_error&) {
    }
  }
  return false;
}

std::chrono::milliseconds since(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start);
}

}  // namespace

TEST_CASE("http server: answers several requests on one keep-alive connection") {
  HttpServer server(ephemeral(), echo);
  Client client(server.port());
  for (int i = 0; i < 3; ++i) {
    const Response response = client.exchange(get("/n/" + std::to_string(i)));
    CHECK(response.result_int() == 200);
    CHECK(response.version() == 11);
    CHECK(response.keep_alive());
    CHECK(json_of(response)["path"] == "/n/" + std::to_string(i));
    CHECK(header_of(response, "Content-Length") == std::to_string(response.body().size()));
  }
  // Pipelined: both requests sent before either response is read.
  client.send(get("/first") + get("/second"));
  CHECK(json_of(client.read_response())["path"] == "/first");
  CHECK(json_of(client.read_response())["path"] == "/second");
}

TEST_CASE("http server: HTTP/1.0 closes after the response unless keep-alive is asked") {
  HttpServer server(ephemeral(), echo);
  {
    Client client(server.port());
    const Response response = client.exchange("GET /old HTTP/1.0\r\n\r\n");
    CHECK(response.result_int() == 200);
    CHECK(response.version() == 10);
    CHECK(json_of(response)["path"] == "/old");
    CHECK(client.closed_within(1s));
  }
  Client client(server.port());
  const std::string keep_alive = "GET /kept HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
  CHECK(client.exchange(keep_alive).keep_alive());
  CHECK(json_of(client.exchange(keep_alive))["path"] == "/kept");
}

TEST_CASE("http server: answers concurrent clients") {
  HttpServer server(ephemeral(), echo);
  constexpr int kClients = 8;
  constexpr int kRequests = 50;
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      try {
        Client client(server.port());
        for (int r = 0; r < kRequests; ++r) {
          const std::string path = "/c" + std::to_string(c) + "/r" + std::to_string(r);
          const Response response = client.exchange(request_text("POST", path, "body " + path));
          if (response.result_int() == 200 && json_of(response)["body"] == "body " + path) {
            ++answered;
          }
        }
      } catch (const std::exception&) {
      }
    });
  }
  for (auto& client : clients) client.join();
  CHECK(answered == kClients * kRequests);
}

TEST_CASE("http server: sends the handler's response as given") {
  HttpServer server(ephemeral(), [](const HttpRequest& request) {
    if (request.path == "/bad-status") return HttpResponse{42, "text/plain", "x", {}};
    if (request.path == "/bad-header")
      return HttpResponse{200, "text/plain", "x", {{"X-A", "1\r\nX-B: 2"}}};
    return HttpResponse{201,
                        "text/plain; charset=utf-8",
                        "made",
                        {{"X-Run", "abc"}, {"Cache-Control", "no-store"}}};
  });
  Client client(server.port());
  const Response response = client.exchange(get("/made"));
  CHECK(response.result_int() == 201);
  CHECK(header_of(response, "Content-Type") == "text/plain; charset=utf-8");
  CHECK(header_of(response, "X-Run") == "abc");
  CHECK(header_of(response, "Cache-Control") == "no-store");
  CHECK(header_of(response, "Content-Length") == "4");
  CHECK(response.body() == "made");

  // HEAD: the length of the body, and no body (else the next response would be misread).
  client.send(request_text("HEAD", "/made"));
  const Response head = client.read_response(true);
  CHECK(header_of(head, "Content-Length") == "4");
  CHECK(client.exchange(get("/made")).body() == "made");

  SUBCASE("a response that cannot be sent is a 500") {
    for (const char* path : {"/bad-status", "/bad-header"}) {
      const Response bad = client.exchange(get(path));
      CHECK(bad.result_int() == 500);
      CHECK(error_code_of(bad) == "internal");
      CHECK(header_of(bad, "X-B").empty());
    }
  }
}

TEST_CASE("http server: a handler that throws gets a 500 JSON error and the server goes on") {
  HttpServer server(ephemeral(), [](const HttpRequest& request) {
    if (request.path == "/throw") throw std::runtime_error("the store is gone");
    if (request.path == "/throw-int") throw 42;
    return echo(request);
  });
  Client client(server.port());
  const Response thrown = client.exchange(get("/throw"));
  CHECK(thrown.result_int() == 500);
  CHECK(header_of(thrown, "Content-Type") == "application/json");
  CHECK(error_code_of(thrown) == "internal");
  CHECK(json_of(thrown)["error"]["message"] == "the store is gone");
  CHECK(client.exchange(get("/throw-int")).result_int() == 500);
  CHECK(client.exchange(get("/after")).result_int() == 200);
  CHECK(Client(server.port()).exchange(get("/other")).result_int() == 200);
}

TEST_CASE("http server: malformed HTTP gets 400 bad_request and the connection closes") {
  HttpServer server(ephemeral(), echo);
  for (const char* bytes :
       {"NOT HTTP AT ALL\r\n\r\n", "GET /a HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        "GET /a HTTP/1.1\r\nBad Header\r\n\r\n"}) {
    CAPTURE(bytes);
    Client client(server.port());
    const Response response = client.exchange(bytes);
    CHECK(response.result_int() == 400);
    CHECK(error_code_of(response) == "bad_request");
    CHECK(client.closed_within(1s));
  }
}

TEST_CASE("http server: a body over max_body gets 413 payload_too_large") {
  HttpOptions options = ephemeral();
  options.max_body = 1024;
  std::atomic<int> calls{0};
  HttpServer server(options, [&](const HttpRequest& request) {
    ++calls;
    return echo(request);
  });
  Client client(server.port());
  CHECK(client.exchange(request_text("POST", "/at-limit", std::string(1024, 'a'))).result_int() ==
        200);
  REQUIRE(calls == 1);

  SUBCASE("announced by Content-Length, refused before the body is sent") {
    const Response response =
        client.exchange("POST /big HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1025\r\n\r\n");
    CHECK(response.result_int() == 413);
    CHECK(error_code_of(response) == "payload_too_large");
  }
  SUBCASE("announced by Content-Length, sent in full before the answer is read") {
    // The answer must survive the body it did not read: closing at once would reset the
    // connection under the client while it still sends.
    const std::string body(4 << 20, 'c');
    client.send(request_text("POST", "/big", body));
    const Response response = client.read_response();
    CHECK(response.result_int() == 413);
    CHECK(error_code_of(response) == "payload_too_large");
  }
  SUBCASE("a chunked body that grows past the limit") {
    client.send("POST /big HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 4; ++i) client.send("200\r\n" + std::string(512, 'b') + "\r\n");
    client.send("0\r\n\r\n");
    const Response response = client.read_response();
    CHECK(response.result_int() == 413);
    CHECK(error_code_of(response) == "payload_too_large");
  }
  CHECK(client.closed_within(2s));
  CHECK(calls == 1);
}

TEST_CASE("http server: a token is needed on every path but the public ones") {
  HttpOptions options = ephemeral();
  options.token = "s3cret";
  std::atomic<int> calls{0};
  HttpServer server(options, [&](const HttpRequest& request) {
    ++calls;
    return echo(request);
  });
  Client client(server.port());
  for (const char* authorization :
       {"", "Authorization: Bearer wrong\r\n", "Authorization: Bearer s3cre\r\n",
        "Authorization: Bearer s3cretX\r\n", "Authorization: Basic s3cret\r\n"}) {
    CAPTURE(authorization);
    const Response response = client.exchange(get("/v1/runs", authorization));
    CHECK(response.result_int() == 401);
    CHECK(error_code_of(response) == "unauthorized");
    CHECK(header_of(response, "WWW-Authenticate") == "Bearer");
  }
  CHECK(calls == 0);
  CHECK(client.exchange(get("/v1/runs", "Authorization: Bearer s3cret\r\n")).result_int() == 200);
  CHECK(client.exchange(get("/v1/runs", "Authorization: bearer s3cret\r\n")).result_int() == 200);
  CHECK(client.exchange(get("/")).result_int() == 200);
  CHECK(client.exchange(get("/?tab=runs")).result_int() == 200);
  CHECK(calls == 4);
}

TEST_CASE("http server: decodes the path and the query") {
  HttpServer server(ephemeral(), echo);
  Client client(server.port());
  const Response response =
      client.exchange(get("/v1/runs/a%20b%2Fc+d?status=done&workflow=sign+up%21&x=1&x=2&flag&&"));
  REQUIRE(response.result_int() == 200);
  const auto seen = json_of(response);
  CHECK(seen["path"] == "/v1/runs/a b/c+d");
  CHECK(seen["query"] ==
        nlohmann::json{{"status", "done"}, {"workflow", "sign up!"}, {"x", "2"}, {"flag", ""}});

  for (const char* target : {"/v1/%zz", "/v1/%4", "/v1/%", "/v1?a=%G1", "http://host/v1"}) {
    CAPTURE(target);
    const Response bad = client.exchange(get(target));
    CHECK(bad.result_int() == 400);
    CHECK(error_code_of(bad) == "bad_request");
  }
  CHECK(client.exchange(get("/still-here")).result_int() == 200);
}

TEST_CASE("http server: a slow client does not hold up others") {
  HttpOptions options = ephemeral();
  options.threads = 1;
  HttpServer server(options, echo);
  Client slow(server.port());
  slow.send("POST /slow HTTP/1.1\r\nHost: local");
  Client idle(server.port());
  Client quick(server.port());
  for (int i = 0; i < 5; ++i) CHECK(quick.exchange(get("/quick")).result_int() == 200);
  slow.send("host\r\nContent-Length: 4\r\n\r\nab");
  CHECK(quick.exchange(get("/quick")).result_int() == 200);
  slow.send("cd");
  CHECK(json_of(slow.read_response())["body"] == "abcd");
}

TEST_CASE("http server: a connection without a complete request closes after the idle timeout") {
  HttpOptions options = ephemeral();
  options.idle_timeout = 200ms;
  HttpServer server(options, echo);
  Client after_response(server.port());
  CHECK(after_response.exchange(get("/once")).result_int() == 200);
  Client silent(server.port());
  Client partial(server.port());
  partial.send("GET /never-finished HTTP/1.1\r\n");
  const auto start = SteadyClock::now();
  CHECK(after_response.closed_within(2s));
  CHECK(silent.closed_within(2s));
  CHECK(partial.closed_within(2s));
  CHECK(since(start) >= 150ms);
}

TEST_CASE("http server: answers Expect: 100-continue before the body is sent") {
  HttpServer server(ephemeral(), echo);
  Client client(server.port());
  client.send(
      "POST /e HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  CHECK(client.read_response().result_int() == 100);
  client.send("hello");
  CHECK(json_of(client.read_response())["body"] == "hello");
}

TEST_CASE("http server: the destructor closes idle and busy connections promptly") {
  std::optional<HttpServer> server(std::in_place, ephemeral(), echo);
  Client idle(server->port());
  CHECK(idle.exchange(get("/once")).result_int() == 200);
  Client partial(server->port());
  partial.send("POST /p HTTP/1.1\r\nContent-Length: 100\r\n\r\nab");
  const unsigned short port = server->port();
  const auto start = SteadyClock::now();
  server.reset();
  CHECK(since(start) < 1s);
  CHECK(idle.closed_within(1s));
  CHECK(partial.closed_within(1s));
  CHECK_THROWS_AS(Client{port}, std::runtime_error);
}

TEST_CASE("http server: stop() is idempotent and callable from any thread") {
  HttpServer server(ephemeral(), echo);
  Client idle(server.port());
  std::thread([&] { server.stop(); }).join();
  server.stop();
  CHECK(idle.closed_within(1s));
  CHECK_THROWS_AS(Client{server.port()}, std::runtime_error);
}

TEST_CASE("http server: port 0 gives an ephemeral port that url() names") {
  HttpServer first(ephemeral(), echo);
  HttpServer second(ephemeral(), echo);
  CHECK(first.port() != 0);
  CHECK(first.port() != second.port());
  CHECK(first.url() == "http://127.0.0.1:" + std::to_string(first.port()));
}

TEST_CASE("http server: a port in use is an Error naming the address and port") {
  HttpServer first(ephemeral(), echo);
  HttpOptions options = ephemeral();
  options.port = first.port();
  const std::string where = "127.0.0.1:" + std::to_string(first.port());
  CHECK_THROWS_WITH_AS(HttpServer(options, echo), doctest::Contains(where.c_str()), durable::Error);
}

TEST_CASE("http server: a non-loopback address needs a token") {
  HttpOptions options = ephemeral();
  for (const char* address : {"0.0.0.0", "::"}) {
    options.address = address;
    CHECK_THROWS_WITH_AS(HttpServer(options, echo), doctest::Contains("without a token"),
                         durable::Error);
  }
  options.address = "0.0.0.0";
  options.token = "t";
  CHECK(HttpServer(options, echo).url().rfind("http://0.0.0.0:", 0) == 0);

  options.token.clear();
  options.address = "127.0.0.2";
  CHECK_NOTHROW(HttpServer(options, echo));
  options.address = "localhost";
  CHECK(HttpServer(options, echo).url().rfind("http://127.0.0.1:", 0) == 0);
}

TEST_CASE("http server: an address that does not parse is an Error") {
  HttpOptions options = ephemeral();
  for (const char* address : {"not-an-ip", "999.1.1.1", ""}) {
    options.address = address;
    CHECK_THROWS_WITH_AS(HttpServer(options, echo), doctest::Contains("not an IP address"),
                         durable::Error);
  }
}

TEST_CASE("http server: a connection over max_connections gets 503 and the next one is served") {
  HttpOptions options = ephemeral();
  options.max_connections = 2;
  HttpServer server(options, echo);
  std::optional<Client> first(std::in_place, server.port());
  Client second(server.port());
  // Answered: both are counted by now.
  REQUIRE(first->exchange(get("/1")).result_int() == 200);
  REQUIRE(second.exchange(get("/2")).result_int() == 200);

  Client third(server.port());
  const Response refused = third.read_response();
  CHECK(refused.result_int() == 503);
  CHECK(error_code_of(refused) == "too_many_connections");
  CHECK(header_of(refused, "Retry-After") == "1");
  CHECK(third.closed_within(2s));

  // The accept loop goes on: once a connection closes, a new one is served.
  first.reset();
  CHECK(served_at_once(server.port(), 1));
}

TEST_CASE("http server: idle and half-sent connections close after idle_timeout and free a slot") {
  HttpOptions options = ephemeral();
  options.idle_timeout = 200ms;
  options.max_connections = 3;
  HttpServer server(options, echo);
  Client keep_alive(server.port());
  REQUIRE(keep_alive.exchange(get("/once")).result_int() == 200);
  Client half_body(server.port());
  half_body.send("POST /p HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\nab");
  Client half_closed(server.port());
  half_closed.send("GET /never-finished HTTP/1.1\r\nHost: loc");
  half_closed.shutdown_send();
  CHECK(keep_alive.closed_within(5s));
  CHECK(half_body.closed_within(5s));
  CHECK(half_closed.closed_within(5s));
  // All three slots are free again.
  CHECK(served_at_once(server.port(), 3));
}

TEST_CASE("http server: a request refused on its header gets no 100 Continue and no body read") {
  HttpOptions options = ephemeral();
  options.token = "s3cret";
  std::atomic<int> calls{0};
  HttpServer server(options, [&](const HttpRequest& request) {
    ++calls;
    return echo(request);
  });
  const std::string expect = "Content-Length: 5\r\nExpect: 100-continue\r\n";
  SUBCASE("no token: 401") {
    Client client(server.port());
    client.send("POST /v1/runs HTTP/1.1\r\nHost: localhost\r\n" + expect + "\r\n");
    const Response response = client.read_response();
    CHECK(response.result_int() == 401);
    CHECK(error_code_of(response) == "unauthorized");
    CHECK(client.closed_within(2s));  // the body that was not read cannot start a next request
  }
  SUBCASE("another site: 403") {
    Client client(server.port());
    client.send("POST /v1/runs HTTP/1.1\r\nHost: localhost\r\nOrigin: http://evil.example\r\n" +
                expect + "Authorization: Bearer s3cret\r\n\r\n");
    CHECK(client.read_response().result_int() == 403);
    CHECK(client.closed_within(2s));
  }
  SUBCASE("with the token: 100, then the answer") {
    Client client(server.port());
    client.send("POST /v1/runs HTTP/1.1\r\nHost: localhost\r\n" + expect +
                "Authorization: Bearer s3cret\r\n\r\n");
    REQUIRE(client.read_response().result_int() == 100);
    client.send("hello");
    CHECK(json_of(client.read_response())["body"] == "hello");
    CHECK(calls == 1);
  }
  SUBCASE("a body sent anyway is discarded, not handled") {
    Client client(server.port());
    client.send(request_text("POST", "/v1/runs", std::string(64 * 1024, 'x')));
    CHECK(client.read_response().result_int() == 401);
    CHECK(client.closed_within(2s));
  }
  CHECK(calls <= 1);
}

TEST_CASE("http server: bodies over max_body_bytes_in_flight get 503 before they are read") {
  HttpOptions options = ephemeral();
  options.max_body_bytes_in_flight = 1000;
  Gate gate;
  HttpServer server(options, [&](const HttpRequest& request) {
    if (request.path == "/hold") gate.pass();
    return echo(request);
  });
  Opener opener{gate};
  Client holding(server.port());
  holding.send(request_text("POST", "/hold", std::string(600, 'h')));
  REQUIRE(gate.wait_entered());  // its 600 bytes are held until the handler returns

  Client over(server.port());
  const Response refused = over.exchange(request_text("POST", "/over", std::string(600, 'o')));
  CHECK(refused.result_int() == 503);
  CHECK(error_code_of(refused) == "too_many_bodies");
  CHECK(header_of(refused, "Retry-After") == "1");
  CHECK(over.closed_within(2s));
  Client fits(server.port());
  CHECK(fits.exchange(request_text("POST", "/fits", std::string(300, 'f'))).result_int() == 200);
  CHECK(fits.exchange(get("/no-body")).result_int() == 200);

  gate.open();
  CHECK(json_of(holding.read_response())["path"] == "/hold");
  CHECK(Client(server.port())
            .exchange(request_text("POST", "/over", std::string(600, 'o')))
            .result_int() == 200);
}

TEST_CASE("http server: a header over max_header gets 431 header_too_large") {
  HttpOptions options = ephemeral();
  options.max_header = 1024;
  HttpServer server(options, echo);
  Client client(server.port());
  const Response response = client.exchange(get("/h", "X-Big: " + std::string(2000, 'a') + "\r\n"));
  CHECK(response.result_int() == 431);
  CHECK(error_code_of(response) == "header_too_large");
  CHECK(client.closed_within(2s));
  CHECK(Client(server.port()).exchange(get("/small")).result_int() == 200);
}

TEST_CASE("http server: a handler blocked on one request does not hold up the others") {
  HttpOptions options = ephemeral();
  options.threads = 1;
  Gate gate;
  std::atomic<bool> blocked_returned{false};
  HttpServer server(options, [&](const HttpRequest& request) {
    if (request.path == "/blocked") {
      gate.pass();
      blocked_returned = true;
    }
    return echo(request);
  });
  Opener opener{gate};
  Client blocked(server.port());
  blocked.send(get("/blocked"));
  REQUIRE(gate.wait_entered());
  Client other(server.port());
  for (int i = 0; i < 3; ++i) CHECK(other.exchange(get("/other")).result_int() == 200);
  CHECK_FALSE(blocked_returned);  // answered while the first is still blocked
  gate.open();
  CHECK(json_of(blocked.read_response())["path"] == "/blocked");
}

TEST_CASE("http server: stop() returns after the handler calls running have returned") {
  HttpOptions options = ephemeral();
  options.handler_threads = 2;
  Gate gate;
  std::atomic<bool> finished{false};
  std::atomic<bool> stopped_inside{false};
  std::optional<HttpServer> server;
  server.emplace(options, [&](const HttpRequest& request) {
    if (request.path == "/stop") {
      server->stop();  // from inside: no handler call starts after this
      stopped_inside = true;
    }
    if (request.path == "/blocked") {
      gate.pass();
      finished = true;
    }
    return echo(request);
  });
  const unsigned short port = server->port();
  Opener opener{gate};
  Client blocked(port);
  blocked.send(get("/blocked"));
  REQUIRE(gate.wait_entered());
  SUBCASE("from another thread") {
    std::atomic<bool> stop_called{false};
    bool finished_when_stopped = false;
    std::thread stopping([&] {
      stop_called = true;
      server->stop();
      finished_when_stopped = finished;
    });
    while (!stop_called) std::this_thread::yield();
    gate.open();
    stopping.join();
    CHECK(finished_when_stopped);
  }
  SUBCASE("from inside the handler, then the destructor") {
    Client stopper(port);
    stopper.send(get("/stop"));
    const auto deadline = SteadyClock::now() + 5s;
    while (!stopped_inside && SteadyClock::now() < deadline) std::this_thread::yield();
    REQUIRE(stopped_inside);
    gate.open();  // the io threads have stopped: the blocked call's response is dropped
    server.reset();
    CHECK(finished);
    CHECK(blocked.closed_within(2s));
  }
  CHECK_THROWS_AS(Client{port}, std::runtime_error);
}

TEST_CASE("http server: a Host that is not exactly a loopback name and a port is refused") {
  HttpServer server(ephemeral(), echo);
  const std::string port = std::to_string(server.port());
  const auto status_with_host = [&](const std::string& host) {
    Client client(server.port());
    return client.exchange("GET /h HTTP/1.1\r\nHost: " + host + "\r\n\r\n").result_int();
  };
  for (const std::string& host : std::vector<std::string>{
           "127.0.0.1:" + port + " evil", "127.0.0.1:" + port + "x",
           "localhost:", "localhost:99999", "localhost:-1", "localhost.evil.example",
           "127.0.0.1.nip.io", "[::1", "[::1]x", "[::1]:80:80", "evil.example", "127.0.0.1 evil"}) {
    CAPTURE(host);
    CHECK(status_with_host(host) == 403);
  }
  for (const std::string& host :
       std::vector<std::string>{"localhost", "LocalHost:" + port, "127.0.0.1:" + port,
                                "127.9.8.7:1", "[::1]", "[::1]:" + port}) {
    CAPTURE(host);
    CHECK(status_with_host(host) == 200);
  }
}

TEST_CASE("http server: an Origin with another scheme than http is refused") {
  HttpServer server(ephemeral(), echo);
  const std::string self = "127.0.0.1:" + std::to_string(server.port());
  const auto status_with_origin = [&](const std::string& origin) {
    Client client(server.port());
    return client
        .exchange("GET /o HTTP/1.1\r\nHost: " + self + "\r\nOrigin: " + origin + "\r\n\r\n")
        .result_int();
  };
  for (const std::string& origin :
       std::vector<std::string>{"https://" + self, "ws://" + self, "null", self, "//" + self,
                                "http://" + self + "/", "http://localhost"}) {
    CAPTURE(origin);
    CHECK(status_with_origin(origin) == 403);
  }
  CHECK(status_with_origin("http://" + self) == 200);
  CHECK(status_with_origin("HTTP://" + self) == 200);
}

TEST_CASE("http server: a token with a space, a control character or no visible one is refused") {
  HttpOptions options = ephemeral();
  for (const std::string& token :
       std::vector<std::string>{" ", "  ", "two words", "tab\t", "line\n", std::string("\x01"),
                                std::string("caf\xc3\xa9"), std::string(" padded ")}) {
    CAPTURE(token);
    options.token = token;
    CHECK_THROWS_WITH_AS(HttpServer(options, echo), doctest::Contains("visible ASCII"),
                         durable::Error);
  }
  options.token = "A-z0.9_~+/=!";
  CHECK_NOTHROW(HttpServer(options, echo));
}

TEST_CASE("http server: every response forbids framing and content sniffing") {
  HttpOptions options = ephemeral();
  options.token = "t";
  options.max_connections = 1;
  HttpServer server(options, echo);
  Client client(server.port());
  std::vector<Response> responses;
  responses.push_back(client.exchange(get("/")));         // public: 200
  responses.push_back(client.exchange(get("/v1/runs")));  // 401
  responses.push_back(client.exchange(get("/v1/runs", "Authorization: Bearer t\r\n")));  // 200
  responses.push_back(Client(server.port()).read_response());                            // 503
  responses.push_back(client.exchange("NOT HTTP\r\n\r\n"));                              // 400
  for (const Response& response : responses) {
    CAPTURE(response.result_int());
    CHECK(header_of(response, "X-Frame-Options") == "DENY");
    CHECK(header_of(response, "Content-Security-Policy") == "frame-ancestors 'none'");
    CHECK(header_of(response, "X-Content-Type-Options") == "nosniff");
  }
  CHECK(responses[3].result_int() == 503);
}
