// SPDX-License-Identifier: Apache-2.0
// The operations surface: the Admin queries and actions, the HTTP API on them, the metrics, and
// the durable command with its exit codes.

#include <SQLiteCpp/SQLiteCpp.h>
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <future>
#include <thread>
#include <vector>

#include "admin.hpp"
#include "api.hpp"
#include "durations.hpp"
#include "http_server.hpp"
#include "prometheus_text.hpp"
#include "scratch_mount.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::has;
using test::quiet;
using test::shell;

namespace {

void add_workflows(Runtime& runtime) {
  runtime.add(Workflow("signup", [](Step& step, const json& input) -> json {
    const std::string email = input.value("email", "");
    step.run("create", [] { return 1; });
    return step.run("welcome", [email] { return "sent to " + email; });
  }));
  runtime.add(Workflow("checkout", [](Step& step, const json&) -> json {
    step.run("reserve", [] { return 2; });
    return step.run("charge", []() -> int { throw std::runtime_error("card declined (code 51)"); },
                    {.retry = test::quick_retries(3)});
  }));
  runtime.add(Workflow("approval", [](Step& step, const json&) -> json {
    return step.wait_for_event("answer", "approved").value_or("none");
  }));
}

// A database with a completed, a failed and a waiting run.
struct Fixture {
  test::TempDir dir;
  std::string db = test::database(dir, "ops.db");
  std::string completed, failed, waiting;

  Fixture() {
    Runtime runtime(quiet(db));
    add_workflows(runtime);
    completed = runtime.start("signup", {{"email", "ada@example.com"}});
    failed = runtime.start("checkout", {{"order", "o-1"}});
    waiting = runtime.start("approval");
    REQUIRE(runtime.wait(completed, 5s).status == Status::completed);
    REQUIRE(runtime.wait(failed, 5s).status == Status::failed);
    runtime.run_until_idle();
    REQUIRE(runtime.get(waiting).status == Status::waiting);
  }
};

// One HTTP/1.0 request to 127.0.0.1:port; returns the status code and the body.
std::pair<int, std::string> http(unsigned short port, const std::string& method,
                                 const std::string& target, const std::string& body = "",
                                 const std::string& headers = "") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string host = headers.find("Host:") == std::string::npos ? "Host: localhost\r\n" : "";
  const std::string request = method + " " + target + " HTTP/1.0\r\n" + host + headers +
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  for (std::size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  std::string response;
  std::array<char, 8192> buffer{};
  for (ssize_t n; (n = ::recv(fd, buffer.data(), buffer.size(), 0)) > 0;) {
    response.append(buffer.data(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  const std::size_t space = response.find(' ');
  const std::size_t split = response.find("\r\n\r\n");
  REQUIRE(space != std::string::npos);
  REQUIRE(split != std::string::npos);
  return {std::stoi(response.substr(space + 1, 3)), response.substr(split + 4)};
}

json body_of(const std::pair<int, std::string>& answer) { return json::parse(answer.second); }

// Runs the durable command; returns its exit code and what it printed on stdout.
std::pair<int, std::string> durable_cli(const std::string& args) {
  return test::run_shell(std::string(DURABLE_CLI) + " " + args + " 2>/dev/null");
}

}  // namespace

TEST_CASE("ops: runs are listed newest first with counts by status, filtered (on each store)") {
  Fixture f;
  ops::Admin admin(f.db);
  const json all = admin.list({});
  CHECK(all.at("total") == 3);
  CHECK(all.at("counts").at("completed") == 1);
  CHECK(all.at("counts").at("failed") == 1);
  CHECK(all.at("counts").at("waiting") == 1);
  CHECK(all.at("counts").at("pending") == 0);
  REQUIRE(all.at("runs").size() == 3);
  CHECK(all.at("runs")[0].at("id") == f.waiting);
  CHECK(all.at("runs")[0].at("known") == true);

  const json failed = admin.list({.status = Status::failed});
  REQUIRE(failed.at("runs").size() == 1);
  CHECK(failed.at("runs")[0].at("id") == f.failed);
  CHECK(failed.at("runs")[0].at("error").at("step_id") == "charge");
  const json signups = admin.list({.workflow = "signup"});
  CHECK(signups.at("total") == 1);
  CHECK(signups.at("runs")[0].at("id") == f.completed);
}

TEST_CASE(
    "ops: show gives the history, the step timeline and, for a failed run, a runbook (on each "
    "store)") {
  Fixture f;
  ops::Admin admin(f.db);
  const json done = admin.show(f.completed);
  CHECK(done.at("status") == "completed");
  CHECK(done.at("output") == "sent to ada@example.com");
  CHECK(done.at("input").at("email") == "ada@example.com");
  CHECK(done.at("runbook").is_null());
  REQUIRE(done.at("steps").size() == 2);
  CHECK(done.at("steps")[0].at("id") == "create");
  CHECK(done.at("steps")[0].contains("duration_ms"));
  CHECK(done.at("history").front().at("reason") == "started");
  CHECK(done.at("history").back().at("status") == "completed");

  const json failed = admin.show(f.failed);
  const json& charge = failed.at("steps")[1];
  CHECK(charge.at("status") == "failed");
  CHECK(charge.at("attempts") == 3);
  CHECK(charge.at("error").at("message") == "card declined (code 51)");
  const json& book = failed.at("runbook");
  CHECK(book.at("failed_step") == "charge");
  CHECK(book.at("attempts") == 3);
  CHECK(book.at("similar_failures") == 0);
  CHECK(book.at("summary").get<std::string>().find("failed for good after 3 attempts") !=
        std::string::npos);
  CHECK(book.at("retry_command").get<std::string>().ends_with(" retry " + f.failed));
  CHECK(book.at("retry_http") == "POST /v1/runs/" + f.failed + "/retry");
  CHECK(book.at("checks").size() >= 2);
  CHECK_THROWS_AS(admin.show("no-such-run"), NotFound);
}

TEST_CASE(
    "ops: the runbook counts other runs failed at the same step with the same error (on each "
    "store)") {
  Fixture f;
  {
    Runtime runtime(quiet(f.db));
    add_workflows(runtime);
    for (int i = 0; i < 2; ++i) runtime.wait(runtime.start("checkout"), 5s);
  }
  ops::Admin admin(f.db);
  const json book = admin.show(f.failed).at("runbook");
  CHECK(book.at("similar_failures") == 2);
  CHECK(book.at("checks").dump().find("2 other runs of 'checkout' failed at this step") !=
        std::string::npos);
}

TEST_CASE(
    "ops: a run of a workflow no worker has is queued and flagged, then run by one (on each "
    "store)") {
  Fixture f;
  ops::Admin admin(f.db);
  ops::StartRequest start{.workflow = "invoice", .input = {{"n", 2}}};
  CHECK_THROWS_AS(admin.start(start), UnknownWorkflow);      // the HTTP API refuses it
  start.queue_unknown = true;                                // the command queues it
  const json queued = admin.start(start);
  CHECK(queued.at("created") == true);
  CHECK(queued.at("known") == false);
  const std::string id = queued.at("id");
  const json shown = admin.show(id);
  CHECK(shown.at("status") == "pending");
  CHECK(shown.at("known") == false);
  CHECK(shown.at("history")[0].at("reason").get<std::string>().find("no worker has registered") !=
        std::string::npos);

  Runtime worker(quiet(f.db));
  worker.add(Workflow("invoice", [](Step& step, const json& input) -> json {
    return step.run("total", [input] { return input.at("n").get<int>() * 10; });
  }));
  CHECK(worker.wait(id, 5s).output == 20);
  CHECK(admin.show(id).at("known") == true);
}

TEST_CASE("ops: start honours idempotency keys, and bad input is a BadRequest (on each store)") {
  Fixture f;
  ops::Admin admin(f.db);
  const ops::StartRequest start{
      .workflow = "signup", .input = {{"email", "x@y"}}, .idempotency_key = "order-7"};
  const json first = admin.start(start);
  const json second = admin.start(start);
  CHECK(first.at("created") == true);
  CHECK(second.at("created") == false);
  CHECK(second.at("id") == first.at("id"));
  CHECK_THROWS_AS(admin.start({.workflow = ""}), ops::BadRequest);
  CHECK_THROWS_AS(admin.start({.workflow = "signup", .input = std::string(5u << 20, 'x')}),
                  ops::BadRequest);
}

TEST_CASE("ops: retry, cancel and send act on the runs, and refusals say why (on each store)") {
  Fixture f;
  ops::Admin admin(f.db);
  CHECK(admin.retry(f.failed).at("status") == "pending");
  CHECK_THROWS_AS(admin.retry(f.completed), ops::Conflict);
  CHECK_THROWS_AS(admin.retry("nope"), NotFound);
  CHECK_THROWS_AS(admin.cancel(f.completed), ops::Conflict);
  CHECK_THROWS_AS(admin.cancel("nope"), NotFound);

  const json sent = admin.send_event("approved", {{"by", "ada"}});
  CHECK(sent.at("woken") == 1);
  CHECK_THROWS_AS(admin.send_event("", json::object()), ops::BadRequest);
  {
    Runtime worker(quiet(f.db));
    add_workflows(worker);
    CHECK(worker.wait(f.waiting, 5s).output == json{{"by", "ada"}});
  }
  const std::string id = admin.start({.workflow = "approval"}).at("id");
  CHECK(admin.cancel(id).at("status") == "cancelled");
}

TEST_CASE("ops: stats and metrics read the database (on each store)") {
  Fixture f;
  ops::Admin admin(f.db);
  admin.start({.workflow = "signup", .input = {{"email", "q@q"}}});  // due, not claimed
  const json stats = admin.stats();
  CHECK(stats.at("counts").at("pending") == 1);
  CHECK(stats.at("pending_depth") == 1);
  CHECK(stats.at("oldest_pending_age_seconds").is_number());
  CHECK(stats.at("failed_runs") == 1);
  CHECK(stats.at("failed_steps") == 1);
  CHECK(stats.at("retries") == 2);  // charge: 3 attempts, the first two retried
  CHECK(stats.at("steps") == 4);    // create, welcome, reserve, charge
  CHECK(stats.at("workflows") == json{"approval", "checkout", "signup"});

  const auto metrics = test::prometheus::parse(admin.metrics());
  CHECK(metrics.sum("durable_runs", {{"status", "failed"}}) == 1);
  CHECK(metrics.sum("durable_runs", {{"status", "pending"}}) == 1);
  CHECK(metrics.sum("durable_steps") == 4);
  CHECK(metrics.sum("durable_step_retries") == 2);
  CHECK(metrics.value("durable_step_retries", {{"workflow", "checkout"}}) == 2);
  CHECK(metrics.sum("durable_steps_failed") == 1);
  CHECK(metrics.value("durable_pending_depth") == 1);
  CHECK(metrics.types.at("durable_step_duration_seconds") == "histogram");
  CHECK(metrics.sum("durable_step_duration_seconds_bucket", {{"le", "+Inf"}}) == 4);
  CHECK(metrics.sum("durable_step_duration_seconds_count") == 4);
}

TEST_CASE(
    "ops: a running run shows who holds it until when, and is orphaned once that lapsed (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "held.db");
  Runtime runtime(quiet(db));
  std::atomic<bool> entered{false}, release{false};
  runtime.add(Workflow("hold", [&](Step& step, const json&) -> json {
    return step.run("wait", [&] {
      entered = true;
      while (!release) std::this_thread::sleep_for(5ms);
      return 1;
    });
  }));
  const std::string id = runtime.start("hold");
  CHECK(runtime.get(id).worker.empty());  // pending: nobody holds it
  CHECK_FALSE(runtime.get(id).lease_until);
  std::thread driver([&] { runtime.run_until_idle(); });
  struct Release {  // lets the body end, whatever a failed check left
    std::atomic<bool>& release;
    std::thread& driver;
    ~Release() {
      release = true;
      if (driver.joinable()) driver.join();
    }
  } let_go{release, driver};
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!entered && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  REQUIRE(entered);

  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string holder = std::string(host) + ":" + std::to_string(::getpid());
  const RunInfo held = runtime.get(id);
  CHECK(held.status == Status::running);
  CHECK(held.worker == holder);
  REQUIRE(held.lease_until);
  CHECK(*held.lease_until > Clock::now());
  CHECK(*held.lease_until <= Clock::now() + RuntimeOptions{}.lease);
  REQUIRE(runtime.list({}).size() == 1);
  CHECK(runtime.list({})[0].worker == holder);

  // The Admin's clock is the one that tells a lapsed lease and a stale heartbeat.
  detail::ManualClockEnv clock(Clock::now());
  ops::Admin admin(db, {}, &clock);
  json run = admin.show(id);
  CHECK(run.at("worker") == holder);
  CHECK(run.at("lease_until") == detail::utc_text(detail::to_ms(*runtime.get(id).lease_until)));
  CHECK(run.at("orphaned") == false);
  CHECK(admin.stats().at("workers") == 1);
  {
    ops::HttpServer server({.port = 0}, ops::api_handler(admin));
    const json listed = body_of(http(server.port(), "GET", "/v1/runs")).at("runs").at(0);
    CHECK(listed.at("worker") == holder);
    CHECK(listed.at("lease_until").is_string());
    CHECK(listed.at("orphaned") == false);
    CHECK(body_of(http(server.port(), "GET", "/v1/runs/" + id)).at("worker") == holder);
  }
  const std::string cli = "--db '" + db + "' ";
  CHECK(has(durable_cli(cli + "runs").second, holder));
  const std::string shown = durable_cli(cli + "show " + id).second;
  CHECK(has(shown, "held by"));
  CHECK(has(shown, holder));
  CHECK(has(shown, "lease until"));
  CHECK_FALSE(has(shown, "orphaned"));

  // Two leases on, as if the process had hung or died: the lease lapsed, the heartbeat is stale.
  clock.advance(2 * RuntimeOptions{}.lease + std::chrono::seconds(1));
  CHECK(admin.show(id).at("orphaned") == true);
  CHECK(admin.list({}).at("runs").at(0).at("orphaned") == true);
  CHECK(admin.stats().at("workers") == 0);
  CHECK(test::prometheus::parse(admin.metrics()).value("durable_workers") == 0);
  clock.set(Clock::now());
  CHECK(test::prometheus::parse(admin.metrics()).value("durable_workers") == 1);

  release = true;
  driver.join();
  const RunInfo done = runtime.get(id);
  CHECK(done.status == Status::completed);
  CHECK(done.worker.empty());
  CHECK_FALSE(done.lease_until);
  run = admin.show(id);
  CHECK_FALSE(run.contains("worker"));
  CHECK_FALSE(run.contains("lease_until"));
  CHECK(run.at("orphaned") == false);
}

TEST_CASE("ops: schedules are listed and removed (on each store)") {
  Fixture f;
  {
    Runtime runtime(quiet(f.db));
    add_workflows(runtime);
    runtime.schedule("signup", {{"email", "daily@x"}}, {.id = "daily", .every = 24h});
  }
  ops::Admin admin(f.db);
  const json list = admin.schedules();
  REQUIRE(list.at("schedules").size() == 1);
  CHECK(list.at("schedules")[0].at("id") == "daily");
  CHECK(list.at("schedules")[0].at("every_ms") == 86'400'000);
  admin.unschedule("daily");
  CHECK(admin.schedules().at("schedules").empty());
  CHECK_THROWS_AS(admin.unschedule("daily"), NotFound);
}

TEST_CASE("http api: every endpoint answers, and bad requests get JSON 4xx (on each store)") {
  Fixture f;
  ops::Admin admin(f.db);
  ops::HttpServer server({.port = 0, .max_body = 64 * 1024}, ops::api_handler(admin));
  const unsigned short port = server.port();

  auto answer = http(port, "GET", "/v1/runs?status=failed");
  CHECK(answer.first == 200);
  CHECK(body_of(answer).at("runs")[0].at("id") == f.failed);
  CHECK(http(port, "GET", "/v1/runs?status=lost").first == 400);
  CHECK(http(port, "GET", "/v1/runs?limit=0").first == 400);
  CHECK(http(port, "GET", "/v1/runs?workflow=signup&limit=5").first == 200);
  const std::string correlation = Runtime({.database = f.db}).get(f.failed).correlation_id;
  answer = http(port, "GET", "/v1/runs?correlation_id=" + correlation);
  CHECK(answer.first == 200);
  REQUIRE(body_of(answer).at("runs").size() == 1);
  CHECK(body_of(answer).at("runs")[0].at("id") == f.failed);
  CHECK(body_of(answer).at("total") == 1);  // the counts are of the same runs
  CHECK(body_of(http(port, "GET", "/v1/runs?correlation_id=nobody")).at("total") == 0);

  answer = http(port, "GET", "/v1/runs/" + f.failed);
  CHECK(answer.first == 200);
  CHECK(body_of(answer).at("runbook").at("failed_step") == "charge");
  answer = http(port, "GET", "/v1/runs/nope");
  CHECK(answer.first == 404);
  CHECK(body_of(answer).at("error").at("code") == "not_found");
  CHECK(body_of(answer).at("error").at("id") == "durable.not_found");  // docs/errors.md
  CHECK(body_of(http(port, "GET", "/v1/runs/" + f.completed + "/steps")).at("steps").size() == 2);

  const std::string start =
      R"({"workflow":"signup","input":{"email":"h@t"},"idempotency_key":"k"})";
  answer = http(port, "POST", "/v1/runs", start);
  CHECK(answer.first == 201);
  const std::string id = body_of(answer).at("id");
  answer = http(port, "POST", "/v1/runs", start);
  CHECK(answer.first == 200);
  CHECK(body_of(answer).at("id") == id);
  answer = http(port, "POST", "/v1/runs", "{not json");
  CHECK(answer.first == 400);
  CHECK(body_of(answer).at("error").at("message").get<std::string>().find("not valid JSON") !=
        std::string::npos);
  CHECK(body_of(answer).at("error").at("id") == "durable.bad_request");
  CHECK(http(port, "POST", "/v1/runs", "[1]").first == 400);
  CHECK(http(port, "POST", "/v1/runs", R"({"input":{}})").first == 400);
  answer = http(port, "POST", "/v1/runs", R"({"workflow":"nobody-has-it"})");
  CHECK(answer.first == 422);
  CHECK(body_of(answer).at("error").at("code") == "unknown_workflow");
  CHECK(body_of(answer).at("error").at("id") == "durable.unknown_workflow");
  answer = http(port, "POST", "/v1/runs",
                R"({"workflow":"signup","input":")" + std::string(70 * 1024, 'x') + "\"}");
  CHECK(answer.first == 413);
  CHECK(!body_of(answer).at("error").contains("id"));  // the server's own refusal, not an Error
  CHECK(admin.list({.workflow = "signup"}).at("total") == 2);  // nothing half-written

  CHECK(http(port, "POST", "/v1/runs/" + f.failed + "/retry").first == 200);
  answer = http(port, "POST", "/v1/runs/" + f.completed + "/retry");
  CHECK(answer.first == 409);
  CHECK(body_of(answer).at("error").at("code") == "conflict");
  CHECK(body_of(answer).at("error").at("id") == "durable.conflict");
  CHECK(body_of(answer).at("error").at("message").get<std::string>().starts_with(
      "[durable.conflict] run "));
  CHECK(http(port, "POST", "/v1/runs/" + id + "/cancel").first == 200);
  CHECK(http(port, "POST", "/v1/runs/nope/cancel").first == 404);
  CHECK(http(port, "GET", "/v1/runs/" + f.failed + "/retry").first == 405);

  answer = http(port, "POST", "/v1/events", R"({"name":"approved","data":{"by":"bo"}})");
  CHECK(answer.first == 202);
  CHECK(body_of(answer).at("woken") == 1);
  CHECK(http(port, "POST", "/v1/events", R"({"data":{}})").first == 400);

  answer = http(port, "GET", "/v1/stats");
  CHECK(answer.first == 200);
  CHECK(body_of(answer).contains("pending_depth"));
  CHECK(http(port, "GET", "/v1/schedules").first == 200);
  CHECK(http(port, "DELETE", "/v1/schedules/none").first == 404);
  answer = http(port, "GET", "/metrics");
  CHECK(answer.first == 200);
  CHECK(test::prometheus::parse(answer.second).sum("durable_runs", {{"status", "completed"}}) > 0);
  answer = http(port, "GET", "/");
  CHECK(answer.first == 200);
  CHECK(answer.second.find("<!doctype html>") != std::string::npos);
  CHECK(http(port, "GET", "/v2/anything").first == 404);
}

TEST_CASE("http api: with a token, the API needs it and the page does not (on each store)") {
  Fixture f;
  ops::Admin admin(f.db);
  ops::HttpServer server({.port = 0, .token = "t0ken"}, ops::api_handler(admin));
  CHECK(http(server.port(), "GET", "/v1/stats").first == 401);
  CHECK(http(server.port(), "GET", "/metrics").first == 401);
  CHECK(http(server.port(), "GET", "/v1/stats", "", "Authorization: Bearer wrong\r\n").first ==
        401);
  CHECK(http(server.port(), "GET", "/v1/stats", "", "Authorization: Bearer t0ken\r\n").first ==
        200);
  CHECK(http(server.port(), "GET", "/").first == 200);
}

TEST_CASE(
    "http api: a serving Runtime serves it when asked, and runs what it starts at once (on each "
    "store)") {
  test::TempDir dir;
  RuntimeOptions opts = quiet(test::database(dir, "served.db"));
  opts.http.address = "127.0.0.1";
  opts.http.port = 0;
  opts.poll_interval = 10min;  // a start over HTTP must wake the loop, not wait for a poll
  Runtime runtime(opts);
  add_workflows(runtime);
  CHECK(runtime.http_url().empty());
  std::thread serving([&] { runtime.serve(); });
  while (runtime.http_url().empty()) std::this_thread::sleep_for(5ms);
  const std::string url = runtime.http_url();
  const auto port = static_cast<unsigned short>(std::stoi(url.substr(url.rfind(':') + 1)));
  const auto started = std::chrono::steady_clock::now();
  const auto answer =
      http(port, "POST", "/v1/runs", R"({"workflow":"signup","input":{"email":"s@t"}})");
  REQUIRE(answer.first == 201);
  const std::string id = body_of(answer).at("id");
  while (runtime.get(id).status != Status::completed &&
         std::chrono::steady_clock::now() - started < 2min) {
    std::this_thread::sleep_for(5ms);
  }
  CHECK(runtime.get(id).status == Status::completed);  // long before the first poll
  runtime.stop();
  serving.join();
  CHECK(runtime.http_url().empty());
}

TEST_CASE("durable command: each command, its --json answer and its exit code (on each store)") {
  Fixture f;
  const std::string db = "--db '" + f.db + "' ";
  auto [code, out] = durable_cli(db + "runs");
  CHECK(code == 0);
  CHECK(out.find("failed 1") != std::string::npos);
  CHECK(out.find(f.completed) != std::string::npos);
  std::tie(code, out) = durable_cli(db + "--json runs --status failed");
  CHECK(code == 0);
  CHECK(json::parse(out).at("runs")[0].at("id") == f.failed);
  const std::string correlation = Runtime({.database = f.db}).get(f.completed).correlation_id;
  std::tie(code, out) = durable_cli(db + "--json runs --correlation " + correlation);
  CHECK(code == 0);
  REQUIRE(json::parse(out).at("runs").size() == 1);
  CHECK(json::parse(out).at("runs")[0].at("id") == f.completed);
  std::tie(code, out) = durable_cli(db + "show " + f.failed);
  CHECK(code == 0);
  CHECK(out.find("runbook") != std::string::npos);
  CHECK(out.find("card declined (code 51)") != std::string::npos);
  CHECK(out.find("retry " + f.failed) != std::string::npos);
  std::tie(code, out) = durable_cli(db + "--json steps " + f.completed);
  CHECK(code == 0);
  CHECK(json::parse(out).at("steps").size() == 2);
  CHECK(durable_cli(db + "stats").first == 0);
  CHECK(json::parse(durable_cli(db + "--json stats").second).at("failed_runs") == 1);

  CHECK(durable_cli(db + "show nope").first == 3);
  CHECK(durable_cli(db + "retry " + f.completed).first == 4);
  CHECK(durable_cli(db + "cancel " + f.completed).first == 4);
  std::tie(code, out) = durable_cli(db + "retry " + f.failed);
  CHECK(code == 0);
  CHECK(out.find("is now pending") != std::string::npos);

  std::tie(code, out) =
      durable_cli(db + "--json start signup --input '{\"email\":\"c@l\"}' --key k9");
  CHECK(code == 0);
  const std::string id = json::parse(out).at("id");
  CHECK(json::parse(durable_cli(db + "--json start signup --key k9").second).at("id") == id);
  CHECK(durable_cli(db + "cancel " + id).first == 0);
  std::tie(code, out) = durable_cli(db + "--json start not-deployed-yet");
  CHECK(code == 0);  // queued for a worker that will have it, and flagged
  CHECK(json::parse(out).at("known") == false);
  CHECK(durable_cli(db + "start signup --input '{oops'").first == 2);
  std::tie(code, out) = durable_cli(db + "--json send approved --data '{\"by\":\"cli\"}'");
  CHECK(code == 0);
  CHECK(json::parse(out).at("woken") == 1);
  CHECK(durable_cli(db + "schedules").first == 0);
  CHECK(durable_cli(db + "schedules remove none").first == 3);

  CHECK(durable_cli(db + "frobnicate").first == 2);
  CHECK(durable_cli(db + "runs --limit 0").first == 2);
  CHECK(durable_cli(db + "runs --colour red").first == 2);
  CHECK(durable_cli("--db '" + f.dir.file("typo.db") + "' runs").first == 2);  // bad usage
  CHECK_FALSE(std::filesystem::exists(f.dir.file("typo.db")));  // no empty file left behind
  CHECK(durable_cli("--help").first == 0);
  // The version, as --version or a command, needs no database.
  for (const char* args : {"--version", "version"}) {
    CAPTURE(args);
    const auto [version_code, version_out] = durable_cli(args);
    CHECK(version_code == 0);
    CHECK(version_out == std::string("durable ") + DURABLE_VERSION_STRING + "\n");
  }
}

TEST_CASE("durable serve: serves the API over the file until SIGTERM (on each store)") {
  Fixture f;
  test::ServeProcess serve(DURABLE_CLI, f.db);
  std::array<char, 512> line{};
  REQUIRE(std::fgets(line.data(), line.size(), serve.out()) != nullptr);
  const std::string first(line.data());
  const std::size_t at = first.find("http://127.0.0.1:");
  REQUIRE(at != std::string::npos);
  const auto port = static_cast<unsigned short>(std::stoi(first.substr(at + 17)));
  CHECK(body_of(http(port, "GET", "/v1/stats")).at("total") == 3);
  CHECK(http(port, "POST", "/v1/runs/" + f.failed + "/retry").first == 200);
  const int status = serve.stop();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("http api: a browser request from another site is refused (on each store)") {
  Fixture f;
  ops::Admin admin(f.db);
  ops::HttpServer server({.port = 0}, ops::api_handler(admin));
  const unsigned short port = server.port();
  const std::string self = "127.0.0.1:" + std::to_string(port);
  const std::string event = R"({"name":"approved","data":{"by":"evil"}})";
  // A page elsewhere posting a no-cors fetch: its Origin is not this server.
  auto answer = http(port, "POST", "/v1/events", event, "Origin: https://evil.example\r\n");
  CHECK(answer.first == 403);
  CHECK(body_of(answer).at("error").at("code") == "forbidden");
  // DNS rebinding: the page's own name, now pointing at 127.0.0.1.
  CHECK(http(port, "GET", "/v1/stats", "", "Host: evil.example:" + std::to_string(port) + "\r\n")
            .first == 403);
  CHECK(admin.show(f.waiting).at("status") == "waiting");  // nothing was delivered
  // The dashboard's own requests, and clients that are not browsers, pass.
  CHECK(http(port, "GET", "/v1/stats", "", "Host: " + self + "\r\nOrigin: http://" + self + "\r\n")
            .first == 200);
  CHECK(http(port, "GET", "/v1/stats", "", "Host: localhost:" + std::to_string(port) + "\r\n")
            .first == 200);
}

TEST_CASE(
    "http api: a number out of range or JSON nested too deep gets 400, and serving goes on (on "
    "each store)") {
  Fixture f;
  ops::Admin admin(f.db);
  ops::HttpServer server({.port = 0}, ops::api_handler(admin));
  const unsigned short port = server.port();
  for (const auto& request : std::vector<std::pair<std::string, std::string>>{
           {"/v1/events", R"({"name":"approved","data":1e999})"},
           {"/v1/runs", R"({"workflow":"signup","input":{"n":-1e999}})"}}) {
    const std::string& target = request.first;  // not bindings: CAPTURE cannot take one in clang 14
    const std::string& body = request.second;
    CAPTURE(body);
    const auto answer = http(port, "POST", target, body);
    CHECK(answer.first == 400);
    CHECK(body_of(answer).at("error").at("code") == "bad_request");
  }
  // 200 KB nested 100,000 deep: refused before it is parsed, where it would overflow the stack.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  for (const auto& request : std::vector<std::pair<std::string, std::string>>{
           {"/v1/events", R"({"name":"approved","data":)" + deep + "}"},
           {"/v1/runs", R"({"workflow":"signup","input":)" + deep + "}"},
           // In a field no route reads: the whole body is checked, not only what is stored.
           {"/v1/events", R"({"name":"approved","data":{},"extra":)" + deep + "}"}}) {
    const std::string& target = request.first;
    const std::string& body = request.second;
    CAPTURE(target);
    const auto answer = http(port, "POST", target, body);
    CHECK(answer.first == 400);
    CHECK(body_of(answer).at("error").at("message").get<std::string>().find("64") !=
          std::string::npos);
  }
  // Brackets inside strings are text, not nesting.
  const std::string text =
      R"({"name":"approved","data":{"text":")" + std::string(1000, '[') + R"(\"{"}})";
  CHECK(http(port, "POST", "/v1/events", text).first == 202);
  CHECK(http(port, "GET", "/v1/stats").first == 200);
  CHECK(admin.list({.workflow = "signup"}).at("total") == 1);  // nothing was started
}

TEST_CASE("http api: a read answers while a write waits on another connection's write lock") {
  Fixture f;
  ops::Admin admin(f.db);
  const ops::HttpHandler api = ops::api_handler(admin);
  std::atomic<bool> write_entered{false};
  ops::HttpServer server({.port = 0}, [&](const ops::HttpRequest& request) {
    if (request.method == "POST") write_entered = true;
    return api(request);
  });
  const unsigned short port = server.port();
  SQLite::Database holder(f.db, SQLite::OPEN_READWRITE);
  holder.setBusyTimeout(10'000);   // the serving side may be writing right now
  holder.exec("BEGIN IMMEDIATE");  // another process holding the write lock
  std::atomic<bool> write_answered{false};
  int write_status = 0;
  std::thread writer([&] {
    try {
      write_status = http(port, "POST", "/v1/events", R"({"name":"approved","data":{}})").first;
    } catch (...) {
    }
    write_answered = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!write_entered && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  REQUIRE(write_entered);
  // Give the write time to reach its BEGIN IMMEDIATE, where it waits on the holder. Were the
  // reads sent first they would prove nothing; the pause can only make this test weaker on a
  // very slow machine, never make it fail.
  std::this_thread::sleep_for(200ms);
  CHECK(http(port, "GET", "/v1/stats").first == 200);
  CHECK(http(port, "GET", "/v1/runs").first == 200);
  CHECK(http(port, "GET", "/").first == 200);
  CHECK_FALSE(write_answered);  // the reads were answered while the write still waited
  holder.exec("COMMIT");
  writer.join();
  CHECK(write_status == 202);
}

TEST_CASE(
    "http api: a serving Runtime answers its dashboard while every handler waits on a write lock") {
  Fixture f;
  RuntimeOptions opts = quiet(f.db);
  opts.http.address = "127.0.0.1";
  opts.http.port = 0;
  Runtime runtime(opts);
  add_workflows(runtime);
  std::thread serving([&] { runtime.serve(); });
  while (runtime.http_url().empty()) std::this_thread::sleep_for(5ms);
  const std::string url = runtime.http_url();
  const auto port = static_cast<unsigned short>(std::stoi(url.substr(url.rfind(':') + 1)));
  SQLite::Database holder(f.db, SQLite::OPEN_READWRITE);
  holder.setBusyTimeout(10'000);   // the serving side may be writing right now
  holder.exec("BEGIN IMMEDIATE");  // another process holding the write lock
  // More writes than the server has handler threads (8): every one of them waits on the lock.
  std::atomic<int> writes_answered{0};
  std::vector<std::thread> writers;
  for (int i = 0; i < 16; ++i) {
    writers.emplace_back([&] {
      try {
        http(port, "POST", "/v1/events", R"({"name":"approved","data":{}})");
      } catch (...) {  // an answer is all this counts; a refused connection is one too
      }
      ++writes_answered;
    });
  }
  std::this_thread::sleep_for(300ms);  // the handler threads reach the lock and wait
  // Were the page a handler's, it would queue behind the writes until the holder lets go, which
  // it does only after this answer, or until their 10 s busy wait ran out, after they answered.
  auto page = std::async(std::launch::async, [&] { return http(port, "GET", "/"); });
  const bool answered = page.wait_for(30s) == std::future_status::ready;
  CHECK(answered);
  CHECK(writes_answered == 0);
  holder.exec("COMMIT");
  if (answered) {
    const auto [status, body] = page.get();
    CHECK(status == 200);
    CHECK(body.find("<html") != std::string::npos);
  }
  for (std::thread& writer : writers) writer.join();
  runtime.stop();
  serving.join();
}

// --- The command on a read-only database, and cancel with a reason ---

TEST_CASE("durable command: the read commands work on a database this user may not write") {
  Fixture f;
  // A read-only mount stops root too, whom permission bits do not. Where no mount may be made
  // (a container, a chroot), the file and its folder lose their write bits, and root runs the
  // commands without the capabilities that pass over them (an empty bounding set).
  const std::filesystem::path folder = f.dir.path() / "ro";
  const auto mount = test::ScratchMount::make(folder, 8 << 20);
  std::filesystem::create_directories(folder);
  const std::string db = (folder / "copy.db").string();
  std::filesystem::copy_file(f.db, db);  // closed: no -wal beside it
  using std::filesystem::perms;
  std::filesystem::permissions(db, perms::owner_read | perms::group_read | perms::others_read);
  struct Writable {  // the folder back as it was, for the temporary directory's removal
    std::filesystem::path folder;
    ~Writable() {
      std::error_code ignored;
      std::filesystem::permissions(folder, perms::owner_all, ignored);
    }
  } writable{folder};
  std::string as;  // what the commands run under
  if (mount) {
    REQUIRE(mount->make_read_only());
  } else {
    std::filesystem::permissions(folder, perms::owner_read | perms::owner_exec);
    if (::geteuid() == 0) {
      if (shell("setpriv --bounding-set=-all true").first != 0) {
        MESSAGE(
            "skipped: root here may neither mount nor drop its capabilities (setpriv), so "
            "nothing stops it writing the file");
        return;
      }
      as = "setpriv --bounding-set=-all ";
    }
  }
  const std::string cli = as + DURABLE_CLI + " --db '" + db + "' ";
  const std::vector<std::string> reads = {"runs",       "show " + f.failed, "steps " + f.completed,
                                          "stats",      "schedules",        "metrics",
                                          "--json runs"};
  for (const std::string& command : reads) {
    CAPTURE(command);
    const auto [code, out] = shell(cli + command);
    CHECK(code == 0);
    CHECK_FALSE(has(out, "durable:"));  // no error or warning
  }
  CHECK(has(shell(cli + "runs").second, f.failed));
  CHECK(has(shell(cli + "metrics").second, "durable_"));
  // Read as it is: nothing made beside it, as a read-write open would (the -wal and -shm).
  CHECK_FALSE(std::filesystem::exists(db + "-wal"));
  CHECK_FALSE(std::filesystem::exists(db + "-shm"));
  // A command that writes says what is wrong, and what to do.
  const auto [code, out] = shell(cli + "start signup");
  CHECK(code == 1);
  CHECK(has(out, "database '" + db + "': cannot open or write the file"));
  if (mount) CHECK(has(out, "mounted read-only"));
}

TEST_CASE(
    "a failed run is closed by cancel, with a reason, from the command and over HTTP (on each "
    "store)") {
  Fixture f;
  const std::string db = "--db '" + f.db + "' ";
  CHECK(durable_cli(db + "cancel " + f.failed + " --reason 'card expired for good'").first == 0);
  Runtime look({.database = f.db});
  RunInfo run = look.get(f.failed);
  CHECK(run.status == Status::cancelled);
  CHECK(run.history.back().reason == "cancelled: card expired for good");
  CHECK(durable_cli(db + "cancel " + f.failed).first == 4);  // ended: nothing more to close

  Fixture g;
  ops::Admin admin(g.db);
  ops::HttpServer server({.port = 0}, ops::api_handler(admin));
  const auto answer = http(server.port(), "POST", "/v1/runs/" + g.failed + "/cancel",
                           R"({"reason":"duplicate order"})");
  CHECK(answer.first == 200);
  CHECK(body_of(answer).at("status") == "cancelled");
  run = Runtime({.database = g.db}).get(g.failed);
  CHECK(run.history.back().reason == "cancelled: duplicate order");
  CHECK(http(server.port(), "POST", "/v1/runs/" + g.completed + "/cancel").first == 409);
  CHECK(http(server.port(), "POST", "/v1/runs/" + g.waiting + "/cancel", "[1]").first == 400);
}
