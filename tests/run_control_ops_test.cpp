// SPDX-License-Identifier: Apache-2.0
// Run control from the outside: pause and resume of runs and workflows, and starts with a
// priority, tags and a deadline, from the HTTP API and the durable command, with their bad
// requests.

#include <doctest/doctest.h>

#include <atomic>

#include "admin.hpp"
#include "api.hpp"
#include "durations.hpp"
#include "http_client.hpp"
#include "stores.hpp"
#include "cli_support.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;
namespace client = durable::test::http_client;

namespace {

// A database with the "nap" workflow registered (a worker ran it) and one run asleep in it.
struct Naps {
  test::TempDir dir;
  test::ManualClock clock;
  std::string db = test::database(dir, "naps.db");
  std::string sleeping;

  Naps() {
    auto runtime = test::runtime_on(db, clock, test::quiet(db));
    runtime->add(Workflow("nap", [](Step& step, const json&) -> json {
      step.sleep("nap", 1h);
      return nullptr;
    }));
    sleeping = runtime->start("nap");
    runtime->run_until_idle();
    REQUIRE(runtime->get(sleeping).status == Status::sleeping);
  }

  std::pair<int, std::string> command(const std::string& args) const {
    return test::run_cli(db, args);
  }
};

}  // namespace

TEST_CASE("HTTP: pause and resume a run and a workflow, and their bad requests (on each "
          "store)") {
  Naps naps;
  ops::Admin admin(naps.db);
  ops::HttpServer server(client::ephemeral(), ops::api_handler(admin));
  client::Connection http(server.port());
  const auto post = [&](const std::string& target, const std::string& body = "{}") {
    return http.exchange(client::request_text("POST", target, body));
  };
  const auto status_of = [&](const std::string& id) {
    return client::json_of(http.exchange(client::get("/v1/runs/" + id))).at("status");
  };
  const std::string run = "/v1/runs/" + naps.sleeping;

  auto answer = post(run + "/pause");
  CHECK(answer.result_int() == 200);
  CHECK(client::json_of(answer).at("status") == "paused");
  CHECK(status_of(naps.sleeping) == "paused");
  const json paused = client::json_of(http.exchange(client::get("/v1/runs?status=paused")));
  CHECK(paused.at("counts").at("paused") == 1);
  CHECK(paused.at("runs").size() == 1);
  answer = post(run + "/resume");
  CHECK(answer.result_int() == 200);
  CHECK(client::json_of(answer).at("status") == "sleeping");
  CHECK(post(run + "/resume").result_int() == 409);
  CHECK(post("/v1/runs/nope/pause").result_int() == 404);
  CHECK(post("/v1/runs/nope/resume").result_int() == 404);
  CHECK(http.exchange(client::get(run + "/pause")).result_int() == 405);

  answer = post("/v1/workflows/nap/pause");
  CHECK(answer.result_int() == 200);
  CHECK(client::json_of(answer) == json{{"workflow", "nap"}, {"paused", 1}});
  CHECK(client::json_of(http.exchange(client::get("/v1/stats"))).at("paused_workflows") ==
        json::array({"nap"}));
  answer = post("/v1/runs", R"({"workflow": "nap"})");
  REQUIRE(answer.result_int() == 201);
  CHECK(status_of(client::json_of(answer).at("id")) == "paused");
  answer = post("/v1/workflows/nap/resume");
  CHECK(client::json_of(answer) == json{{"workflow", "nap"}, {"resumed", 2}});
  CHECK(status_of(naps.sleeping) == "sleeping");
  CHECK(post("/v1/workflows/nap/stop").result_int() == 404);
  CHECK(post("/v1/workflows//pause").result_int() == 404);
  CHECK(http.exchange(client::get("/v1/workflows/nap/pause")).result_int() == 405);

  // An ended run cannot be paused.
  CHECK(post(run + "/cancel").result_int() == 200);
  answer = post(run + "/pause");
  CHECK(answer.result_int() == 409);
  CHECK(client::json_of(answer).at("error").at("message").get<std::string>().find(
            "only a run that has not ended can be paused") != std::string::npos);
}

TEST_CASE("HTTP: a start with a priority, tags and a deadline, a list by tag, and their bad "
          "requests, which write nothing (on each store)") {
  Naps naps;
  ops::Admin admin(naps.db, {}, &naps.clock.env());
  ops::HttpServer server(client::ephemeral(), ops::api_handler(admin));
  client::Connection http(server.port());
  const auto post = [&](const std::string& body) {
    return http.exchange(client::request_text("POST", "/v1/runs", body));
  };
  auto answer = post(R"({"workflow": "nap", "priority": 7, "tags": {"tenant": "acme"},
                         "deadline": "30m"})");
  REQUIRE(answer.result_int() == 201);
  const std::string id = client::json_of(answer).at("id");
  json shown = client::json_of(http.exchange(client::get("/v1/runs/" + id)));
  CHECK(shown.at("priority") == 7);
  CHECK(shown.at("tags") == json{{"tenant", "acme"}});
  CHECK(shown.at("deadline") ==
        detail::utc_text(detail::to_ms(naps.clock.now() + std::chrono::minutes(30))));
  answer = post(R"({"workflow": "nap", "deadline": "2199-01-02T03:04:05Z"})");
  REQUIRE(answer.result_int() == 201);
  shown = client::json_of(http.exchange(client::get(
      "/v1/runs/" + client::json_of(answer).at("id").get<std::string>())));
  CHECK(shown.at("deadline") == "2199-01-02T03:04:05.000Z");

  json listed = client::json_of(http.exchange(client::get("/v1/runs?tag.tenant=acme")));
  REQUIRE(listed.at("runs").size() == 1);
  CHECK(listed.at("runs")[0].at("id") == id);
  listed = client::json_of(http.exchange(client::get("/v1/runs?tag.tenant=globex")));
  CHECK(listed.at("runs").empty());

  const std::size_t before = client::json_of(http.exchange(client::get("/v1/runs"))).at("total");
  for (const char* bad : {R"({"workflow": "nap", "priority": "high"})",
                          R"({"workflow": "nap", "priority": 1.5})",
                          R"({"workflow": "nap", "priority": 99999999})",
                          R"({"workflow": "nap", "tags": ["tenant"]})",
                          R"({"workflow": "nap", "tags": {"tenant": 1}})",
                          R"({"workflow": "nap", "tags": {"tenant": ""}})",
                          R"({"workflow": "nap", "deadline": "soon"})",
                          R"({"workflow": "nap", "deadline": "2001-01-01T00:00:00Z"})",
                          R"({"workflow": "nap", "deadline": "2999-01-01T00:00:00Z"})",
                          R"({"workflow": "nap", "deadline": 5})"}) {
    INFO(bad);
    CHECK(post(bad).result_int() == 400);
  }
  // Before the clock's first time (1677), found by fuzz/fuzz_http.cpp: these overflowed as they
  // became a time point, into any time; 0300 into 2053, which was taken (201).
  for (const char* bad : {R"({"workflow": "nap", "deadline": "0300-01-01T00:00:00Z"})",
                          R"({"workflow": "nap", "deadline": "1262-01-01T00:00:00Z"})"}) {
    INFO(bad);
    CHECK(post(bad).result_int() == 400);
  }
  CHECK(client::json_of(http.exchange(client::get("/v1/runs"))).at("total") == before);
  CHECK(http.exchange(client::get("/v1/runs?tag.=x")).result_int() == 400);
  CHECK(http.exchange(client::get("/v1/runs?tag.tenant=")).result_int() == 400);
}

TEST_CASE("durable pause, resume, start with --priority, --tag and --deadline, runs --tag, and "
          "their bad usage (on each store)") {
  Naps naps;
  auto [code, out] = naps.command("pause " + naps.sleeping);
  CHECK(code == 0);
  CHECK(out == "run " + naps.sleeping + " is now paused\n");
  std::tie(code, out) = naps.command("runs --status paused");
  CHECK(code == 0);
  CHECK(test::has(out, naps.sleeping));
  std::tie(code, out) = naps.command("resume " + naps.sleeping);
  CHECK(out == "run " + naps.sleeping + " is now sleeping\n");
  std::tie(code, out) = naps.command("resume " + naps.sleeping);
  CHECK(code == 4);
  CHECK(naps.command("pause no-such-run").first == 3);
  std::tie(code, out) = naps.command("pause --workflow nap");
  CHECK(code == 0);
  CHECK(out == "workflow nap paused: 1 run(s)\n");
  std::tie(code, out) = naps.command("resume --workflow nap");
  CHECK(out == "workflow nap resumed: 1 run(s)\n");
  std::tie(code, out) = naps.command("pause");
  CHECK(code == 2);
  CHECK(test::has(out, "pause needs a run id or --workflow NAME"));
  CHECK(naps.command("pause " + naps.sleeping + " --workflow nap").first == 2);

  std::tie(code, out) = naps.command(
      "--json start nap --priority 3 --tag tenant=acme,plan=gold --deadline 2h");
  REQUIRE(code == 0);
  const std::string id = json::parse(out).at("id");
  std::tie(code, out) = naps.command("show " + id);
  CHECK(test::has(out, "priority"));
  CHECK(test::has(out, "plan=gold, tenant=acme"));
  CHECK(test::has(out, "deadline"));
  std::tie(code, out) = naps.command("--json runs --tag tenant=acme");
  REQUIRE(code == 0);
  REQUIRE(json::parse(out).at("runs").size() == 1);
  CHECK(json::parse(out).at("runs")[0].at("id") == id);

  std::tie(code, out) = naps.command("start nap --priority high");
  CHECK(code == 2);
  CHECK(test::has(out, "--priority takes a whole number"));
  std::tie(code, out) = naps.command("start nap --tag tenant");
  CHECK(code == 2);
  CHECK(test::has(out, "is not KEY=VALUE"));
  std::tie(code, out) = naps.command("start nap --deadline whenever");
  CHECK(code == 2);
  CHECK(test::has(out, "neither a UTC time"));
  CHECK(naps.command("runs --tag =x").first == 2);
  std::tie(code, out) = naps.command("--json runs");
  CHECK(json::parse(out).at("runs").size() == 2);  // the bad starts wrote nothing
}

TEST_CASE("bulk actions from the command and the HTTP API: a dry run counts, the action "
          "changes, and a filter is required (on each store)") {
  Naps naps;
  {
    auto runtime = test::runtime_on(naps.db, naps.clock, test::quiet(naps.db));
    runtime->add(Workflow("nap", [](Step& step, const json&) -> json {
      step.sleep("nap", 1h);
      return nullptr;
    }));
    for (int i = 0; i < 3; ++i) runtime->start("nap", {}, {.tags = {{"batch", "b1"}}});
    runtime->run_until_idle();
  }
  auto [code, out] = naps.command("cancel --tag batch=b1 --dry-run");
  CHECK(code == 0);
  CHECK(out == "cancel would act on 3 run(s) (dry run: nothing changed)\n");
  std::tie(code, out) = naps.command("--json cancel --tag batch=b1 --reason 'bad batch'");
  CHECK(code == 0);
  CHECK(json::parse(out) == json{{"action", "cancel"}, {"changed", 3}});
  std::tie(code, out) = naps.command("purge --status cancelled --dry-run");
  CHECK(out == "purge would act on 3 run(s) (dry run: nothing changed)\n");
  std::tie(code, out) = naps.command("purge --status running");
  CHECK(code == 2);
  CHECK(test::has(out, "purge by filter takes runs that are completed, failed, cancelled"));
  std::tie(code, out) = naps.command("cancel nope --dry-run");
  CHECK(code == 2);
  CHECK(test::has(out, "cancel of one run takes no --dry-run"));
  std::tie(code, out) = naps.command("cancel");
  CHECK(code == 2);
  CHECK(test::has(out, "cancel needs a run id, or a filter"));
  std::tie(code, out) = naps.command("purge --since whenever");
  CHECK(code == 2);
  CHECK(test::has(out, "--since takes a UTC time"));
  std::tie(code, out) = naps.command("purge --until 1h --status cancelled");
  CHECK(out == "purge: 3 run(s)\n");

  ops::Admin admin(naps.db);
  ops::HttpServer server(client::ephemeral(), ops::api_handler(admin));
  client::Connection http(server.port());
  const auto post = [&](const std::string& target, const std::string& body) {
    return http.exchange(client::request_text("POST", target, body));
  };
  auto answer = post("/v1/runs/cancel", R"({"workflow": "nap", "dry_run": true})");
  CHECK(answer.result_int() == 200);
  CHECK(client::json_of(answer) == json{{"action", "cancel"}, {"matched", 1}});
  answer = post("/v1/runs/cancel", R"({"all": true, "reason": "drain"})");
  CHECK(client::json_of(answer) == json{{"action", "cancel"}, {"changed", 1}});
  answer = post("/v1/runs/retry", R"({"status": "failed", "error_type": "x"})");
  CHECK(client::json_of(answer) == json{{"action", "retry"}, {"changed", 0}});
  answer = post("/v1/runs/purge", R"({"created_before": "2200-01-01T00:00:00Z"})");
  CHECK(client::json_of(answer) == json{{"action", "purge"}, {"changed", 1}});
  CHECK(post("/v1/runs/purge", "{}").result_int() == 400);
  CHECK(post("/v1/runs/purge", R"({"status": "running"})").result_int() == 400);
  CHECK(post("/v1/runs/purge", R"({"created_after": "yesterday"})").result_int() == 400);
  CHECK(post("/v1/runs/purge", R"({"created_after": "2999-01-01T00:00:00Z"})").result_int() ==
        400);
  CHECK(post("/v1/runs/retry", R"({"all": "yes"})").result_int() == 400);
  CHECK(post("/v1/runs/cancel", R"({"tags": ["x"]})").result_int() == 400);
  CHECK(http.exchange(client::get("/v1/runs/purge")).result_int() == 405);
  CHECK(client::json_of(http.exchange(client::get("/v1/runs"))).at("total") == 0);
}

TEST_CASE("the progress a retrying step reported is shown by the durable command and the HTTP "
          "API (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "progress.db");
  std::string id;
  {
    auto runtime = test::runtime_on(db, clock, test::quiet(db));
    runtime->add(Workflow("pages", [](Step& step, const json&) -> json {
      return step.run(
          "fetch",
          [](StepContext& ctx) -> int {
            ctx.heartbeat({{"page", 7}});
            throw std::runtime_error("the API went away");
          },
          {.retry = test::exact_policy(3, 1h)});
    }));
    id = runtime->start("pages");
    runtime->run_until_idle();
    REQUIRE(runtime->get(id).status == Status::sleeping);
    const std::vector<StepProgress> progress = runtime->progress(id);
    REQUIRE(progress.size() == 1);
    CHECK(progress[0].progress == json{{"page", 7}});
  }
  const auto [code, out] = test::run_cli(db, "show " + id);
  CHECK(code == 0);
  CHECK(test::has(out, "progress (last heartbeat of each step not completed)"));
  CHECK(test::has(out, "{\"page\":7}"));
  ops::Admin admin(db);
  ops::HttpServer server(client::ephemeral(), ops::api_handler(admin));
  client::Connection http(server.port());
  const json run = client::json_of(http.exchange(client::get("/v1/runs/" + id)));
  REQUIRE(run.at("progress").size() == 1);
  CHECK(run.at("progress")[0].at("step") == "fetch");
  CHECK(run.at("progress")[0].at("attempt") == 1);
  CHECK(run.at("progress")[0].at("progress") == json{{"page", 7}});
}
