// SPDX-License-Identifier: Apache-2.0
// Published values over the operators' ways in: GET /v1/runs/{id}/published[/{key}] (a wait that
// parks without a handler thread) and `durable published RUN KEY`.

#include <doctest/doctest.h>

#include "admin.hpp"
#include "api.hpp"
#include "http_client.hpp"
#include "stores.hpp"
#include "cli_support.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;
namespace client = durable::test::http_client;

namespace {

// Waits for the event "go", then publishes its "n" under "answer".
Workflow http_answer_workflow() {
  return Workflow("answer", [](Step& step, const json&) -> json {
    const std::optional<json> go = step.wait_for_event("go", "go", {.timeout = 1h});
    step.publish("answer", go.value_or(json()).value("n", 0));
    return "answered";
  });
}

client::Response get_published(unsigned short port, const std::string& target,
                               const std::string& headers = "Authorization: Bearer t0ken\r\n") {
  client::Connection connection(port);
  return connection.exchange(client::get(target, headers));
}

using test::run_cli;

}  // namespace

TEST_CASE(
    "http api: GET /v1/runs/{id}/published/{key} answers the value, waits for it without a "
    "handler thread, and refuses bad input (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));
  runtime.add(http_answer_workflow());
  const std::string id = runtime.start("answer");
  runtime.run_until_idle();
  ops::Admin admin(db);
  ops::HttpOptions options = client::ephemeral();
  options.token = "t0ken";
  options.handler_threads = 1;  // a parked wait must not hold it
  ops::HttpServer server(options, ops::api_handler(admin));
  const unsigned short port = server.port();
  const std::string path = "/v1/runs/" + id + "/published/";

  CHECK(get_published(port, path + "answer", "").result_int() ==
        401);  // the same auth as every route
  client::Response none = get_published(port, path + "answer");
  CHECK(none.result_int() == 200);
  CHECK(client::json_of(none) == json{{"published", false}});
  CHECK(get_published(port, "/v1/runs/nosuchrun/published/answer").result_int() == 404);
  CHECK(get_published(port, "/v1/runs/nosuchrun/published").result_int() == 404);
  for (const char* bad : {"abc", "-1", "60001", "1.5", ""}) {
    CHECK(get_published(port, path + "answer?wait_ms=" + bad).result_int() == 400);
  }
  CHECK(get_published(port, path).result_int() == 400);  // an empty key
  CHECK(get_published(port, path + "a%0Ab").result_int() == 400);
  CHECK(get_published(port, path + "a%2Fb").result_int() == 400);
  CHECK(get_published(port, path + std::string(201, 'k')).result_int() == 400);

  // A wait that times out answers "not published", at its end.
  auto began = std::chrono::steady_clock::now();
  CHECK(client::json_of(get_published(port, path + "never?wait_ms=300")) ==
        json{{"published", false}});
  CHECK(std::chrono::steady_clock::now() - began >= 290ms);

  // A wait parks; meanwhile the one handler thread answers others; the publish wakes it.
  client::Connection waiting(port);
  began = std::chrono::steady_clock::now();
  waiting.send(client::get(path + "answer?wait_ms=60000", "Authorization: Bearer t0ken\r\n"));
  CHECK(get_published(port, "/v1/stats").result_int() == 200);
  CHECK(client::json_of(get_published(port, path + "answer")) == json{{"published", false}});
  runtime.send_event("go", {{"n", 7}});
  runtime.run_until_idle();
  const client::Response woken = waiting.read_response();
  CHECK(woken.result_int() == 200);
  CHECK(client::json_of(woken) == json{{"published", true}, {"value", 7}});
  CHECK(std::chrono::steady_clock::now() - began < 20s);

  const json listed = client::json_of(get_published(port, "/v1/runs/" + id + "/published"));
  REQUIRE(listed.at("published").size() == 1);
  CHECK(listed["published"][0]["key"] == "answer");
  CHECK(listed["published"][0]["value"] == 7);
  CHECK(listed["published"][0]["version"] == 1);
  CHECK(listed["published"][0]["updated_at"].is_string());
}

TEST_CASE("cli: durable published prints a run's value, or says it has none (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));
  runtime.add(http_answer_workflow());
  const std::string id = runtime.start("answer");
  runtime.run_until_idle();
  runtime.send_event("go", {{"n", 42}});
  runtime.run_until_idle();
  REQUIRE(runtime.get(id).status == Status::completed);

  auto [code, out] = run_cli(db, "published " + id + " answer");
  CHECK(code == 0);
  CHECK(out == "42\n");
  std::tie(code, out) = run_cli(db, "--json published " + id + " answer");
  CHECK(code == 0);
  CHECK(json::parse(out) == json{{"published", true}, {"value", 42}});
  std::tie(code, out) = run_cli(db, "published " + id + " missing --wait 100");
  CHECK(code == 1);
  CHECK(test::has(out, "has published no value under 'missing'"));
  std::tie(code, out) = run_cli(db, "published nosuchrun answer");
  CHECK(code == 3);
  CHECK(test::has(out, "no run with id 'nosuchrun'"));
  std::tie(code, out) = run_cli(db, "published " + id + " 'a/b'");
  CHECK(code == 2);
  CHECK(test::has(out, "contains '/'"));
  std::tie(code, out) = run_cli(db, "published " + id + " answer --wait soon");
  CHECK(code == 2);
  CHECK(test::has(out, "--wait must be a whole number of milliseconds"));
  std::tie(code, out) = run_cli(db, "published " + id);
  CHECK(code == 2);
}
