// SPDX-License-Identifier: Apache-2.0
// The HTTP server over real TCP: a raw-socket client writes requests byte for byte (malformed
// ones too) and reads responses with Beast's parser.

#include "http_client.hpp"

using durable::ops::HttpOptions;
using durable::ops::HttpRequest;
using durable::ops::HttpResponse;
using durable::ops::HttpServer;
using namespace durable::test::http_client;
using namespace std::chrono_literals;

TEST_CASE("http server: answers several requests on one keep-alive connection") {
  HttpServer server(ephemeral(), echo);
  Connection client(server.port());
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
    Connection client(server.port());
    const Response response = client.exchange("GET /old HTTP/1.0\r\n\r\n");
    CHECK(response.result_int() == 200);
    CHECK(response.version() == 10);
    CHECK(json_of(response)["path"] == "/old");
    CHECK(client.closed_within(kPromptly));
  }
  Connection client(server.port());
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
        Connection client(server.port());
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
  Connection client(server.port());
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
  Connection client(server.port());
  const Response thrown = client.exchange(get("/throw"));
  CHECK(thrown.result_int() == 500);
  CHECK(header_of(thrown, "Content-Type") == "application/json");
  CHECK(error_code_of(thrown) == "internal");
  CHECK(json_of(thrown)["error"]["message"] == "the store is gone");
  CHECK(client.exchange(get("/throw-int")).result_int() == 500);
  CHECK(client.exchange(get("/after")).result_int() == 200);
  CHECK(Connection(server.port()).exchange(get("/other")).result_int() == 200);
}

TEST_CASE("http server: malformed HTTP gets 400 bad_request and the connection closes") {
  HttpServer server(ephemeral(), echo);
  for (const char* bytes :
       {"NOT HTTP AT ALL\r\n\r\n", "GET /a HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        "GET /a HTTP/1.1\r\nBad Header\r\n\r\n"}) {
    CAPTURE(bytes);
    Connection client(server.port());
    const Response response = client.exchange(bytes);
    CHECK(response.result_int() == 400);
    CHECK(error_code_of(response) == "bad_request");
    CHECK(client.closed_within(kPromptly));
  }
}

TEST_CASE("http server: a body over max_body gets 413 payload_too_large") {
  HttpOptions options = ephemeral();
  options.max_body = 1024;
  std::atomic<int> calls{0};
  HttpServer server(options, counting_echo(calls));
  Connection client(server.port());
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
  CHECK(client.closed_within(kPromptly));
  CHECK(calls == 1);
}

TEST_CASE("http server: a token is needed on every path but the public ones") {
  HttpOptions options = ephemeral();
  options.token = "s3cret";
  std::atomic<int> calls{0};
  HttpServer server(options, counting_echo(calls));
  Connection client(server.port());
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
  Connection client(server.port());
  const Response response =
      client.exchange(get("/v1/runs/a%20b%2Fc+d?status=done&workflow=sign+up%21&x=1&x=2&flag&&"));
  REQUIRE(response.result_int() == 200);
  const auto seen = json_of(response);
  CHECK(seen["path"] == "/v1/runs/a b/c+d");
  CHECK(seen["query"] ==
        nlohmann::json{{"status", "done"}, {"workflow", "sign up!"}, {"x", "2"}, {"flag", ""}});

  // UTF-8 decodes as it is; bytes that are not UTF-8, and NUL, name nothing durable stores.
  const Response accented = client.exchange(get("/v1/runs/caf%C3%A9?workflow=%E2%82%AC"));
  REQUIRE(accented.result_int() == 200);
  CHECK(json_of(accented)["path"] == "/v1/runs/caf\xc3\xa9");
  CHECK(json_of(accented)["query"] == nlohmann::json{{"workflow", "\xe2\x82\xac"}});
  for (const char* target :
       {"/v1/%zz", "/v1/%4", "/v1/%", "/v1?a=%G1", "http://host/v1", "/v1/runs/%FF",
        "/v1/runs?workflow=caf%E9", "/v1/schedules/a%00b", "/v1/runs/%ED%A0%80"}) {
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
  Connection slow(server.port());
  slow.send("POST /slow HTTP/1.1\r\nHost: local");
  Connection idle(server.port());
  Connection quick(server.port());
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
  Connection after_response(server.port());
  CHECK(after_response.exchange(get("/once")).result_int() == 200);
  Connection silent(server.port());
  Connection partial(server.port());
  partial.send("GET /never-finished HTTP/1.1\r\n");
  const auto start = SteadyClock::now();
  CHECK(after_response.closed_within(5s));
  CHECK(silent.closed_within(5s));
  CHECK(partial.closed_within(5s));
  CHECK(since(start) >= 150ms);
}

TEST_CASE("http server: answers Expect: 100-continue before the body is sent") {
  HttpServer server(ephemeral(), echo);
  Connection client(server.port());
  client.send(
      "POST /e HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  CHECK(client.read_response().result_int() == 100);
  client.send("hello");
  CHECK(json_of(client.read_response())["body"] == "hello");
}

TEST_CASE("http server: the destructor closes idle and busy connections promptly") {
  std::optional<HttpServer> server(std::in_place, ephemeral(), echo);
  Connection idle(server->port());
  CHECK(idle.exchange(get("/once")).result_int() == 200);
  Connection partial(server->port());
  partial.send("POST /p HTTP/1.1\r\nContent-Length: 100\r\n\r\nab");
  const unsigned short port = server->port();
  const auto start = SteadyClock::now();
  server.reset();
  CHECK(since(start) < 10s);  // not the 30 s idle timeout: the destructor closed them
  CHECK(idle.closed_within(kPromptly));
  CHECK(partial.closed_within(kPromptly));
  CHECK_THROWS_AS(Connection{port}, std::runtime_error);
}

TEST_CASE("http server: stop() is idempotent and callable from any thread") {
  HttpServer server(ephemeral(), echo);
  Connection idle(server.port());
  std::thread([&] { server.stop(); }).join();
  server.stop();
  CHECK(idle.closed_within(kPromptly));
  CHECK_THROWS_AS(Connection{server.port()}, std::runtime_error);
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
