// SPDX-License-Identifier: Apache-2.0
// The HTTP server's TLS (a certificate the test makes) and signed requests (HMAC-SHA256 of
// method, target, timestamp, nonce and body; a window; each signature accepted once).

#include <doctest/doctest.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "http_client.hpp"
#include "http_signing.hpp"
#include "stores.hpp"
#include "support.hpp"
#include "tls_support.hpp"

using namespace durable::test::http_client;
namespace tls = durable::test::tls;
using durable::test::TempDir;

namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef";  // 32 bytes
constexpr std::string_view kNonce = "n0nce-0000000001";

HttpOptions over_tls(const tls::Certificate& certificate) {
  HttpOptions options = ephemeral();
  options.tls_cert_file = certificate.cert_file;
  options.tls_key_file = certificate.key_file;
  return options;
}

HttpOptions signing() {
  HttpOptions options = ephemeral();
  options.signing_secret = kSecret;
  return options;
}

std::string signed_post(std::string_view target, std::string_view body, std::int64_t t,
                        std::string_view nonce, const std::string& secret = kSecret,
                        std::string_view signed_target = {}, std::string_view signed_body = {},
                        std::string_view signed_method = "POST") {
  const std::string header =
      tls::signature_header(secret, signed_method, signed_target.empty() ? target : signed_target,
                            t, nonce, signed_body.empty() ? body : signed_body);
  return request_text("POST", target, body, "Authorization: " + header + "\r\n");
}

}  // namespace

TEST_CASE("http server: serves HTTPS with the given certificate, and url() says https") {
  TempDir dir;
  const auto certificate = tls::make_self_signed(dir.path(), "server");
  HttpServer server(over_tls(certificate), echo);
  CHECK(server.url().rfind("https://127.0.0.1:", 0) == 0);
  tls::Client client(server.port(), certificate.cert_file);
  // Several requests on one connection, a body each way.
  for (int i = 0; i < 3; ++i) {
    const auto response =
        client.exchange(http::verb::post, "/v1/x?i=1", "hello " + std::to_string(i));
    REQUIRE(response.result_int() == 200);
    CHECK(json_of(response)["body"] == "hello " + std::to_string(i));
    CHECK(json_of(response)["path"] == "/v1/x");
  }
}

TEST_CASE("http server: a client that does not trust the certificate fails the handshake") {
  TempDir dir;
  const auto certificate = tls::make_self_signed(dir.path(), "server");
  const auto stranger = tls::make_self_signed(dir.path(), "stranger");
  HttpServer server(over_tls(certificate), echo);
  CHECK_THROWS_AS(tls::Client(server.port(), stranger.cert_file), boost::system::system_error);
  // The server goes on serving those who trust it.
  tls::Client client(server.port(), certificate.cert_file);
  CHECK(client.exchange(http::verb::get, "/").result_int() == 200);
}

TEST_CASE("http server: plain HTTP to a TLS port gets 400 in plain text saying to use https") {
  TempDir dir;
  HttpServer server(over_tls(tls::make_self_signed(dir.path(), "server")), echo);
  Connection client(server.port());
  const Response response = client.exchange(get("/v1/runs"));
  CHECK(response.result_int() == 400);
  CHECK(json_of(response)["error"]["message"].get<std::string>().find("https://") !=
        std::string::npos);
  CHECK(client.closed_within(kPromptly));
}

TEST_CASE("http server: over TLS, errors the server answers itself still reach the client") {
  TempDir dir;
  const auto certificate = tls::make_self_signed(dir.path(), "server");
  HttpOptions options = over_tls(certificate);
  options.max_body = 16;
  options.token = "t0ken";
  std::atomic<int> calls{0};
  HttpServer server(options, counting_echo(calls));
  SUBCASE("a body over the limit: 413") {
    tls::Client client(server.port(), certificate.cert_file);
    const auto response =
        client.exchange(http::verb::post, "/big", std::string(64, 'b'), "Bearer t0ken");
    CHECK(response.result_int() == 413);
  }
  SUBCASE("no token: 401") {
    tls::Client client(server.port(), certificate.cert_file);
    CHECK(client.exchange(http::verb::get, "/v1/runs").result_int() == 401);
  }
  SUBCASE("the page's own origin is https://, not http://") {
    tls::Client client(server.port(), certificate.cert_file);
    CHECK(client.exchange(http::verb::get, "/v1/runs", "", "Bearer t0ken", "https://127.0.0.1")
              .result_int() == 200);
    CHECK(client.exchange(http::verb::get, "/v1/runs", "", "Bearer t0ken", "http://127.0.0.1")
              .result_int() == 403);
  }
  SUBCASE("over max_connections: 503 after the handshake") {
    options.max_connections = 1;
    HttpServer small(options, echo);
    tls::Client first(small.port(), certificate.cert_file);
    CHECK(first.exchange(http::verb::get, "/").result_int() == 200);
    tls::Client second(small.port(), certificate.cert_file);
    const auto refused = second.exchange(http::verb::get, "/");
    CHECK(refused.result_int() == 503);
    CHECK(error_code_of(refused) == "too_many_connections");
  }
}

TEST_CASE("http server: a TLS certificate or key that cannot be used is an Error naming it") {
  TempDir dir;
  const auto certificate = tls::make_self_signed(dir.path(), "server");
  const auto other = tls::make_self_signed(dir.path(), "other");
  const std::string garbage = (dir.path() / "garbage.pem").string();
  std::ofstream(garbage) << "not a PEM file\n";
  struct Case {
    std::string cert, key, expected;
  };
  for (const Case& bad : {
           Case{certificate.cert_file, "", "both a certificate file and a key file"},
           Case{"", certificate.key_file, "both a certificate file and a key file"},
           Case{(dir.path() / "missing.crt").string(), certificate.key_file, "missing.crt"},
           Case{garbage, certificate.key_file, "garbage.pem"},
           Case{certificate.cert_file, garbage, "garbage.pem"},
           Case{certificate.cert_file, other.key_file, "not the key of the certificate"},
       }) {
    HttpOptions options = ephemeral();
    options.tls_cert_file = bad.cert;
    options.tls_key_file = bad.key;
    CAPTURE(bad.expected);
    CHECK_THROWS_WITH_AS(HttpServer(options, echo), doctest::Contains(bad.expected.c_str()),
                         durable::Error);
  }
}

TEST_CASE("http server: a signed request is served without a token") {
  std::atomic<int> calls{0};
  HttpServer server(signing(), counting_echo(calls));
  Connection client(server.port());
  const auto response =
      client.exchange(signed_post("/v1/runs?x=1", R"({"a":1})", tls::unix_now(), kNonce));
  REQUIRE(response.result_int() == 200);
  CHECK(json_of(response)["body"] == R"({"a":1})");
  // A GET with no body is signed over an empty body.
  const std::string header =
      tls::signature_header(kSecret, "GET", "/v1/runs", tls::unix_now(), "another-nonce-0001", "");
  CHECK(client.exchange(get("/v1/runs", "Authorization: " + header + "\r\n")).result_int() == 200);
  CHECK(calls == 2);
}

TEST_CASE("http server: a signed request is refused when anything signed differs") {
  std::atomic<int> calls{0};
  HttpServer server(signing(), counting_echo(calls));
  const std::int64_t now = tls::unix_now();
  struct Case {
    std::string name, request, expected;
  };
  const std::string mismatch = "does not match the request";
  for (const Case& bad : {
           Case{"another secret", signed_post("/v1/runs", "{}", now, kNonce, std::string(32, 'x')),
                mismatch},
           Case{"the body changed",
                signed_post("/v1/runs", "{\"a\":2}", now, kNonce, kSecret, {}, "{\"a\":1}"),
                mismatch},
           Case{"the query changed",
                signed_post("/v1/runs?status=failed", "{}", now, kNonce, kSecret,
                            "/v1/runs?status=done"),
                mismatch},
           Case{"the method changed",
                signed_post("/v1/runs", "{}", now, kNonce, kSecret, {}, {}, "PUT"), mismatch},
           Case{"signed 301 s ago", signed_post("/v1/runs", "{}", now - 301, kNonce),
                "behind this server's clock"},
           // Well past the 300 s window: the cases before it may take seconds under a sanitizer,
           // and a request signed 301 s ahead of a clock read then was within it by the time it
           // was checked.
           Case{"signed 330 s ahead", signed_post("/v1/runs", "{}", now + 330, kNonce),
                "ahead of this server's clock"},
       }) {
    CAPTURE(bad.name);
    // A stale one is refused on its header, with its body unread: that closes the connection.
    Connection client(server.port());
    const auto response = client.exchange(bad.request);
    CHECK(response.result_int() == 401);
    CHECK(json_of(response)["error"]["message"].get<std::string>().find(bad.expected) !=
          std::string::npos);
    CHECK(header_of(response, "WWW-Authenticate") == "Durable-Signature");
  }
  CHECK(calls == 0);
  // Within the window, either way, it passes.
  Connection client(server.port());
  CHECK(client.exchange(signed_post("/v1/runs", "{}", now - 290, "nonce-in-the-past-1"))
            .result_int() == 200);
  CHECK(client.exchange(signed_post("/v1/runs", "{}", now + 290, "nonce-in-the-future"))
            .result_int() == 200);
}

TEST_CASE("http server: a signed request sent twice is refused the second time") {
  std::atomic<int> calls{0};
  HttpServer server(signing(), counting_echo(calls));
  Connection client(server.port());
  const std::string request = signed_post("/v1/events", R"({"n":1})", tls::unix_now(), kNonce);
  CHECK(client.exchange(request).result_int() == 200);
  const auto replayed = client.exchange(request);
  CHECK(replayed.result_int() == 401);
  CHECK(json_of(replayed)["error"]["message"].get<std::string>().find("a replay") !=
        std::string::npos);
  // On another connection too, refused on its header before its body is sent; and the same
  // request with a new nonce is a new request.
  Connection other(server.port());
  const std::string header_only = request.substr(0, request.find("\r\n\r\n") + 2);
  other.send(header_only + "Expect: 100-continue\r\n\r\n");
  CHECK(other.read_response().result_int() == 401);  // not 100 Continue
  Connection third(server.port());
  CHECK(third.exchange(signed_post("/v1/events", R"({"n":1})", tls::unix_now(), "n0nce-0000000002"))
            .result_int() == 200);
  CHECK(calls == 2);
}

TEST_CASE("http server: a signed request whose body arrives after its window closes is refused") {
  // Its header passes at the window's edge; by the time its body is read the window has closed,
  // and so has the guard's memory of the signatures of that second: the window is checked again.
  std::atomic<int> calls{0};
  HttpServer server(signing(), counting_echo(calls));
  Connection client(server.port());
  const std::string request = signed_post("/e", "hello", tls::unix_now() - 299, kNonce);
  const std::size_t body_at = request.find("\r\n\r\n") + 4;
  client.send(request.substr(0, body_at));
  std::this_thread::sleep_for(2500ms);
  client.send(request.substr(body_at));
  const Response response = client.read_response();
  CHECK(response.result_int() == 401);
  CHECK(json_of(response)["error"]["message"].get<std::string>().find("behind") !=
        std::string::npos);
  CHECK(calls == 0);
}

TEST_CASE("http server: a malformed signature header gets 401 saying what is wrong") {
  std::atomic<int> calls{0};
  HttpServer server(signing(), counting_echo(calls));
  Connection client(server.port());
  const std::string t = std::to_string(tls::unix_now());
  const std::string sig = std::string(64, 'a');
  struct Case {
    std::string header, expected;
  };
  for (const Case& bad : {
           Case{"Durable-Signature t=" + t + ", nonce=" + std::string(kNonce), "needs all of"},
           Case{"Durable-Signature t=" + t + ", nonce=short, sig=" + sig, "nonce"},
           Case{"Durable-Signature t=" + t + ", nonce=" + std::string(kNonce) + "!, sig=" + sig,
                "nonce"},
           Case{"Durable-Signature t=soon, nonce=" + std::string(kNonce) + ", sig=" + sig,
                "t is not a number"},
           Case{"Durable-Signature t=-5, nonce=" + std::string(kNonce) + ", sig=" + sig,
                "t is not a number"},
           Case{"Durable-Signature t=0" + t + ", nonce=" + std::string(kNonce) + ", sig=" + sig,
                "without leading zeros"},
           Case{"Durable-Signature t=" + t + ", nonce=" + std::string(kNonce) + ", sig=abc",
                "64 hex digits"},
           Case{"Durable-Signature t=" + t + ", nonce=" + std::string(kNonce) +
                    ", sig=" + std::string(64, 'g'),
                "64 hex digits"},
           Case{"Durable-Signature t=" + t + ", t=" + t + ", nonce=" + std::string(kNonce) +
                    ", sig=" + sig,
                "each once"},
           Case{"Durable-Signature t=" + t + ", nonce=" + std::string(kNonce) + ", sig=" + sig +
                    ", extra=1",
                "each once"},
           Case{"Bearer whatever", "Durable-Signature"},
       }) {
    CAPTURE(bad.header);
    const auto response = client.exchange(get("/v1/runs", "Authorization: " + bad.header + "\r\n"));
    CHECK(response.result_int() == 401);
    CHECK(json_of(response)["error"]["message"].get<std::string>().find(bad.expected) !=
          std::string::npos);
  }
  CHECK(calls == 0);
}

TEST_CASE("http server: a stale signature is refused before the body is read") {
  HttpServer server(signing(), echo);
  Connection client(server.port());
  const std::string header =
      tls::signature_header(kSecret, "POST", "/e", tls::unix_now() - 3600, kNonce, "hello");
  client.send(
      "POST /e HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: "
      "100-continue\r\nAuthorization: " +
      header + "\r\n\r\n");
  CHECK(client.read_response().result_int() == 401);  // not 100 Continue
  CHECK(client.closed_within(kPromptly));
}

TEST_CASE("http server: token and signature together, and a signature the server cannot take") {
  HttpOptions both = signing();
  both.token = "t0ken";
  HttpServer server(both, echo);
  Connection client(server.port());
  CHECK(client.exchange(get("/v1/runs", "Authorization: Bearer t0ken\r\n")).result_int() == 200);
  CHECK(client.exchange(signed_post("/v1/runs", "{}", tls::unix_now(), kNonce)).result_int() ==
        200);
  const auto refused = client.exchange(get("/v1/runs"));
  CHECK(refused.result_int() == 401);
  std::vector<std::string> challenges;
  for (const auto& field : refused) {
    if (field.name() == http::field::www_authenticate) challenges.emplace_back(field.value());
  }
  CHECK(challenges == std::vector<std::string>{"Bearer", "Durable-Signature"});

  HttpOptions token_only = ephemeral();
  token_only.token = "t0ken";
  HttpServer no_secret(token_only, echo);
  Connection other(no_secret.port());
  const auto response = other.exchange(signed_post("/v1/runs", "{}", tls::unix_now(), kNonce));
  CHECK(response.result_int() == 401);
  CHECK(json_of(response)["error"]["message"].get<std::string>().find("takes no signed") !=
        std::string::npos);
}

TEST_CASE("http server: past max_signatures in the window, signed requests get 503") {
  HttpOptions options = signing();
  options.max_signatures = 2;
  HttpServer server(options, echo);
  Connection client(server.port());
  const std::int64_t now = tls::unix_now();
  CHECK(client.exchange(signed_post("/a", "{}", now, "nonce-number-0001")).result_int() == 200);
  CHECK(client.exchange(signed_post("/a", "{}", now, "nonce-number-0002")).result_int() == 200);
  const auto full = client.exchange(signed_post("/a", "{}", now, "nonce-number-0003"));
  CHECK(full.result_int() == 503);
  CHECK(error_code_of(full) == "too_many_signatures");
  CHECK(header_of(full, "Retry-After") == "1");
}

TEST_CASE("http server: a signing secret must be long enough, and stands in for a token") {
  HttpOptions options = ephemeral();
  options.signing_secret = std::string(31, 's');
  CHECK_THROWS_WITH_AS(HttpServer(options, echo), doctest::Contains("at least 32"), durable::Error);
  options.signing_secret = kSecret;
  options.address = "0.0.0.0";
  CHECK(HttpServer(options, echo).url().rfind("http://0.0.0.0:", 0) == 0);
}

TEST_CASE(
    "http api: a serving Runtime speaks HTTPS to signed clients as HttpListen says (on each "
    "store)") {
  TempDir dir;
  const auto certificate = tls::make_self_signed(dir.path(), "server");
  durable::RuntimeOptions options = durable::test::quiet(durable::test::database(dir, "tls.db"));
  options.http = {.address = "127.0.0.1",
                  .port = 0,
                  .signing_secret = kSecret,
                  .tls_cert_file = certificate.cert_file,
                  .tls_key_file = certificate.key_file};
  durable::Runtime runtime(options);
  runtime.add(durable::Workflow("hello", [](durable::Step& step, const durable::json&) {
    return step.run("a", [] { return 1; });
  }));
  std::thread serving([&] { runtime.serve(); });
  const auto listening_by = SteadyClock::now() + 60s;
  while (runtime.http_url().empty() && SteadyClock::now() < listening_by) {
    std::this_thread::sleep_for(5ms);
  }
  const std::string url = runtime.http_url();
  CHECK(url.rfind("https://127.0.0.1:", 0) == 0);
  const auto port = static_cast<unsigned short>(std::stoi(url.substr(url.rfind(':') + 1)));
  {
    tls::Client client(port, certificate.cert_file);
    CHECK(client.exchange(http::verb::get, "/v1/runs").result_int() == 401);
    const std::string body = R"({"workflow":"hello"})";
    const auto started = client.exchange(
        http::verb::post, "/v1/runs", body,
        tls::signature_header(kSecret, "POST", "/v1/runs", tls::unix_now(), kNonce, body));
    REQUIRE(started.result_int() == 201);
    const std::string id = json_of(started).at("id");
    const auto deadline = SteadyClock::now() + 60s;
    while (runtime.get(id).status != durable::Status::completed && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    CHECK(runtime.get(id).status == durable::Status::completed);
  }
  runtime.stop();
  serving.join();
}

TEST_CASE("signed requests: HMAC-SHA256 and the replay window's memory") {
  using namespace durable::ops::detail;
  // RFC 4231, test case 2.
  CHECK(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // The example in docs/security.md, as `openssl dgst -sha256 -hmac` prints it.
  CHECK(
      to_hex(hmac_sha256(kSecret, signed_text("POST", "/v1/events", 1764249600, "4f1c2a9d8e7b6a5f",
                                              R"({"name":"paid","data":{"order":42}})"))) ==
      "7c66a8c6da584af0f259c27aa1130cd35b06a88d6ca31ab40e45d9878ecf0e55");

  ReplayGuard guard(2);
  const std::string a(32, 'a'), b(32, 'b'), c(32, 'c');
  CHECK(guard.accept(a, 100, 10) == ReplayGuard::Outcome::accepted);
  CHECK(guard.accept(a, 100, 20) == ReplayGuard::Outcome::replayed);
  CHECK(guard.accept(b, 200, 20) == ReplayGuard::Outcome::accepted);
  CHECK(guard.accept(c, 300, 50) == ReplayGuard::Outcome::full);
  // Past its expiry a signature is forgotten: the server checks the timestamp against the same
  // time, so by then it would refuse the request as stale anyway.
  CHECK(guard.accept(c, 300, 101) == ReplayGuard::Outcome::accepted);
  CHECK(guard.accept(a, 400, 101) == ReplayGuard::Outcome::full);
  CHECK(guard.accept(a, 400, 201) == ReplayGuard::Outcome::accepted);
}
