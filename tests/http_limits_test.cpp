// SPDX-License-Identifier: Apache-2.0
// The HTTP server's limits and checks (issue 11): connections, header and body sizes, checks on
// the header before a body is read, handlers off the io threads, Host, Origin, token, framing.

#include "http_client.hpp"

using durable::ops::HttpOptions;
using durable::ops::HttpRequest;
using durable::ops::HttpResponse;
using durable::ops::HttpServer;
using namespace durable::test::http_client;
using namespace std::chrono_literals;

TEST_CASE("http server: a connection over max_connections gets 503 and the next one is served") {
  HttpOptions options = ephemeral();
  options.max_connections = 2;
  HttpServer server(options, echo);
  std::optional<Connection> first(std::in_place, server.port());
  Connection second(server.port());
  // Answered: both are counted by now.
  REQUIRE(first->exchange(get("/1")).result_int() == 200);
  REQUIRE(second.exchange(get("/2")).result_int() == 200);

  Connection third(server.port());
  const Response refused = third.read_response();
  CHECK(refused.result_int() == 503);
  CHECK(error_code_of(refused) == "too_many_connections");
  CHECK(header_of(refused, "Retry-After") == "1");
  CHECK(third.closed_within(kPromptly));

  // The accept loop goes on: once a connection closes, a new one is served.
  first.reset();
  CHECK(served_at_once(server.port(), 1));
}

TEST_CASE("http server: idle and half-sent connections close after idle_timeout and free a slot") {
  HttpOptions options = ephemeral();
  options.idle_timeout = 200ms;
  options.max_connections = 3;
  HttpServer server(options, echo);
  Connection keep_alive(server.port());
  REQUIRE(keep_alive.exchange(get("/once")).result_int() == 200);
  Connection half_body(server.port());
  half_body.send("POST /p HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\nab");
  Connection half_closed(server.port());
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
  HttpServer server(options, counting_echo(calls));
  const std::string expect = "Content-Length: 5\r\nExpect: 100-continue\r\n";
  SUBCASE("no token: 401") {
    Connection client(server.port());
    client.send("POST /v1/runs HTTP/1.1\r\nHost: localhost\r\n" + expect + "\r\n");
    const Response response = client.read_response();
    CHECK(response.result_int() == 401);
    CHECK(error_code_of(response) == "unauthorized");
    CHECK(
        client.closed_within(kPromptly));  // the body that was not read cannot start a next request
  }
  SUBCASE("no token on the public page: a POST or a GET with a body is 401 too") {
    for (const char* method : {"POST", "GET"}) {
      CAPTURE(method);
      Connection client(server.port());
      client.send(std::string(method) + " / HTTP/1.1\r\nHost: localhost\r\n" + expect + "\r\n");
      CHECK(client.read_response().result_int() == 401);
      CHECK(client.closed_within(kPromptly));
    }
  }
  SUBCASE("another site: 403") {
    Connection client(server.port());
    client.send("POST /v1/runs HTTP/1.1\r\nHost: localhost\r\nOrigin: http://evil.example\r\n" +
                expect + "Authorization: Bearer s3cret\r\n\r\n");
    CHECK(client.read_response().result_int() == 403);
    CHECK(client.closed_within(kPromptly));
  }
  SUBCASE("with the token: 100, then the answer") {
    Connection client(server.port());
    client.send("POST /v1/runs HTTP/1.1\r\nHost: localhost\r\n" + expect +
                "Authorization: Bearer s3cret\r\n\r\n");
    REQUIRE(client.read_response().result_int() == 100);
    client.send("hello");
    CHECK(json_of(client.read_response())["body"] == "hello");
    CHECK(calls == 1);
  }
  SUBCASE("a body sent anyway is discarded, not handled") {
    Connection client(server.port());
    client.send(request_text("POST", "/v1/runs", std::string(64 * 1024, 'x')));
    CHECK(client.read_response().result_int() == 401);
    CHECK(client.closed_within(kPromptly));
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
  Connection holding(server.port());
  holding.send(request_text("POST", "/hold", std::string(600, 'h')));
  REQUIRE(gate.wait_entered());  // its 600 bytes are held until the handler returns

  Connection over(server.port());
  const Response refused = over.exchange(request_text("POST", "/over", std::string(600, 'o')));
  CHECK(refused.result_int() == 503);
  CHECK(error_code_of(refused) == "too_many_bodies");
  CHECK(header_of(refused, "Retry-After") == "1");
  CHECK(over.closed_within(kPromptly));
  Connection fits(server.port());
  CHECK(fits.exchange(request_text("POST", "/fits", std::string(300, 'f'))).result_int() == 200);
  CHECK(fits.exchange(get("/no-body")).result_int() == 200);

  gate.open();
  CHECK(json_of(holding.read_response())["path"] == "/hold");
  CHECK(Connection(server.port())
            .exchange(request_text("POST", "/over", std::string(600, 'o')))
            .result_int() == 200);
}

TEST_CASE("http server: a header over max_header gets 431 header_too_large") {
  HttpOptions options = ephemeral();
  options.max_header = 1024;
  HttpServer server(options, echo);
  Connection client(server.port());
  const Response response = client.exchange(get("/h", "X-Big: " + std::string(2000, 'a') + "\r\n"));
  CHECK(response.result_int() == 431);
  CHECK(error_code_of(response) == "header_too_large");
  CHECK(client.closed_within(kPromptly));
  CHECK(Connection(server.port()).exchange(get("/small")).result_int() == 200);
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
  Connection blocked(server.port());
  blocked.send(get("/blocked"));
  REQUIRE(gate.wait_entered());
  Connection other(server.port());
  for (int i = 0; i < 3; ++i) CHECK(other.exchange(get("/other")).result_int() == 200);
  CHECK_FALSE(blocked_returned);  // answered while the first is still blocked
  gate.open();
  CHECK(json_of(blocked.read_response())["path"] == "/blocked");
}

TEST_CASE("http server: a static page is answered while every handler thread is blocked") {
  HttpOptions options = ephemeral();
  options.handler_threads = 1;
  options.token = "s3cret";
  HttpResponse page;
  page.content_type = "text/html; charset=utf-8";
  page.body = "<p>the dashboard</p>";
  options.static_responses = {{"/", page}};
  Gate gate;
  std::atomic<int> calls{0};
  HttpServer server(options, [&](const HttpRequest& request) {
    ++calls;
    gate.pass();
    return echo(request);
  });
  Opener opener{gate};
  Connection blocked(server.port());
  blocked.send(get("/v1/runs", "Authorization: Bearer s3cret\r\n"));
  REQUIRE(gate.wait_entered());  // the one handler thread is taken
  Connection browser(server.port());
  const Response answer = browser.exchange(get("/"));
  CHECK(answer.result_int() == 200);
  CHECK(answer.body() == "<p>the dashboard</p>");
  CHECK(header_of(answer, "X-Frame-Options") == "DENY");
  // Static for a bodiless GET only: a POST goes through the token check, as any request.
  CHECK(browser.exchange(request_text("POST", "/", "x")).result_int() == 401);
  CHECK(calls == 1);
  gate.open();
  CHECK(blocked.read_response().result_int() == 200);
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
  Connection blocked(port);
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
    Connection stopper(port);
    stopper.send(get("/stop"));
    const auto deadline = SteadyClock::now() + 5s;
    while (!stopped_inside && SteadyClock::now() < deadline) std::this_thread::yield();
    REQUIRE(stopped_inside);
    gate.open();  // the io threads have stopped: the blocked call's response is dropped
    server.reset();
    CHECK(finished);
    CHECK(blocked.closed_within(kPromptly));
  }
  CHECK_THROWS_AS(Connection{port}, std::runtime_error);
}

TEST_CASE("http server: a Host that is not exactly a loopback name and a port is refused") {
  HttpServer server(ephemeral(), echo);
  const std::string port = std::to_string(server.port());
  const auto status_with_host = [&](const std::string& host) {
    Connection client(server.port());
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
    Connection client(server.port());
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
  Connection client(server.port());
  std::vector<Response> responses;
  responses.push_back(client.exchange(get("/")));         // public: 200
  responses.push_back(client.exchange(get("/v1/runs")));  // 401
  responses.push_back(client.exchange(get("/v1/runs", "Authorization: Bearer t\r\n")));  // 200
  responses.push_back(Connection(server.port()).read_response());                        // 503
  responses.push_back(client.exchange("NOT HTTP\r\n\r\n"));                              // 400
  for (const Response& response : responses) {
    CAPTURE(response.result_int());
    CHECK(header_of(response, "X-Frame-Options") == "DENY");
    CHECK(header_of(response, "Content-Security-Policy") == "frame-ancestors 'none'");
    CHECK(header_of(response, "X-Content-Type-Options") == "nosniff");
  }
  CHECK(responses[3].result_int() == 503);
}
