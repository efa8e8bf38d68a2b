// SPDX-License-Identifier: Apache-2.0
// Deploying and repairing from the outside: the durable command embedded in an application
// (durable::cli_main: verify, start, serve), fork and resolve from the command and the HTTP API, and
// a run's version, origin and successor where operators look.

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <thread>

#include "admin.hpp"
#include "api.hpp"
#include "http_client.hpp"
#include "order_releases.hpp"
#include "runtime_core.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;
namespace client = durable::test::http_client;

namespace {

// A database with three orders of release 1: `shipped` past "ship" (release 2 cannot replay
// it), `waiting` before it, and `failed` at it.
struct Orders {
  test::TempDir dir;
  test::ManualClock clock;
  std::string db = test::database(dir, "orders.db");
  std::string shipped, waiting, failed;

  Orders() {
    RuntimeOptions opts = test::quiet(db);
    opts.version = "r1";
    auto runtime = test::runtime_on(db, clock, opts);
    runtime->add(test::order_release(1));
    shipped = runtime->start("order", {{"sku", "A-1"}});
    failed = runtime->start("order", {{"sku", "broken"}});
    runtime->run_until_idle();
    clock.advance(61min);
    runtime->run_until_idle();
    waiting = runtime->start("order", {{"sku", "B-2"}});
    runtime->run_until_idle();
    REQUIRE(runtime->get(shipped).status == Status::sleeping);
    REQUIRE(runtime->get(waiting).status == Status::sleeping);
    REQUIRE(runtime->get(failed).status == Status::failed);
  }

  // The command of the application of `release` (0: the standalone durable binary) on this
  // database: its exit code and everything it printed.
  std::pair<int, std::string> command(int release, const std::string& args) const {
    const std::string program = release == 0 ? std::string(DURABLE_CLI)
                                             : std::string(DURABLE_CLI_APP) + " " +
                                                   std::to_string(release) + " durable";
    return test::run_shell(program + " --db '" + db + "' " + args + " 2>&1");
  }
};

}  // namespace

TEST_CASE("myapp durable verify: exit 5 naming the run release 2 cannot replay, 0 on release 1, "
          "and the standalone command says where verify lives (on each store)") {
  Orders orders;
  auto [code, out] = orders.command(2, "verify");
  CHECK(code == 5);
  CHECK(out.find("run " + orders.shipped + " (order) at step 'ship', ") != std::string::npos);
  CHECK(out.find("order_releases.hpp:") != std::string::npos);
  CHECK(out.find("2 run(s) checked: 1 would not replay on this code") !=
        std::string::npos);
  std::tie(code, out) = orders.command(2, "--json verify");
  CHECK(code == 5);
  const json report = json::parse(out);
  CHECK(report.at("runs_checked") == 2);
  CHECK(report.at("ok") == false);
  REQUIRE(report.at("divergences").size() == 1);
  CHECK(report.at("divergences")[0].at("run_id") == orders.shipped);

  std::tie(code, out) = orders.command(1, "verify");
  CHECK(code == 0);
  CHECK(out.find("2 run(s) checked: every one replays on this code") !=
        std::string::npos);
  std::tie(code, out) = orders.command(1, "verify --status failed");  // the failed run, as it was
  CHECK(code == 0);
  CHECK(out.find("1 run(s) checked: every one replays on this code") != std::string::npos);

  std::tie(code, out) = orders.command(0, "verify");
  CHECK(code == 2);
  CHECK(out.find("durable::cli_main") != std::string::npos);
  std::tie(code, out) = test::run_shell(std::string(DURABLE_CLI_APP) +
                                        " 2 durable --db /nonexistent/x.db verify 2>&1");
  CHECK(code == 2);
  CHECK(out.find("no database at '/nonexistent/x.db'") != std::string::npos);
  // Its runtime is on ":memory:": without --db there is nothing to check, which is no pass.
  std::tie(code, out) = test::run_shell(std::string(DURABLE_CLI_APP) + " 2 durable verify 2>&1");
  CHECK(code == 2);
  CHECK(out.find("verify needs --db DATABASE") != std::string::npos);
}

TEST_CASE("myapp durable start: a workflow the program lacks or an input it cannot take is "
          "refused, writing nothing (on each store)") {
  Orders orders;
  auto [code, out] = orders.command(1, "start refund");
  CHECK(code == 2);
  CHECK(out.find("this program has no workflow 'refund' (it has: order)") != std::string::npos);
  std::tie(code, out) = orders.command(1, "start order --input '{\"sku\": 5}'");
  CHECK(code == 2);
  CHECK(out.find("the input of workflow 'order' does not convert") != std::string::npos);
  std::tie(code, out) = orders.command(0, "--json runs");
  CHECK(json::parse(out).at("total") == 3);
  std::tie(code, out) = orders.command(1, "start order --input '{\"sku\": \"C-3\"}'");
  CHECK(code == 0);
  CHECK(out.find("started run ") != std::string::npos);
}

TEST_CASE("durable fork and resolve: exit codes, and what show prints of a run's version, origin "
          "and a resolved step (on each store)") {
  Orders orders;
  // Refusals first: nothing is written by any of them.
  CHECK(orders.command(0, "fork " + orders.failed).first == 2);  // no --from
  CHECK(orders.command(0, "fork " + orders.failed + " --from nowhere").first == 3);
  CHECK(orders.command(0, "fork " + orders.waiting + " --from charge").first == 4);
  CHECK(orders.command(0, "resolve " + orders.failed + " ship").first == 2);  // no --output
  CHECK(orders.command(0, "resolve " + orders.failed + " ship --output nope").first == 2);
  CHECK(orders.command(0, "resolve " + orders.failed + " charge --output 1").first == 4);
  CHECK(orders.command(0, "resolve " + orders.failed + " nowhere --output 1").first == 3);
  auto [code, out] = orders.command(1, "resolve " + orders.failed + " ship --output '\"x\"'");
  CHECK(code == 2);  // ship returns int: checked against the application's code
  CHECK(out.find("refused, nothing written") != std::string::npos);
  std::tie(code, out) = orders.command(0, "--json runs");
  CHECK(json::parse(out).at("total") == 3);

  std::tie(code, out) = orders.command(0, "--json fork " + orders.failed + " --from ship");
  REQUIRE(code == 0);
  const std::string fork = json::parse(out).at("id");
  std::tie(code, out) = orders.command(0, "show " + fork);
  CHECK(code == 0);
  CHECK(out.find("forked from  " + orders.failed) != std::string::npos);

  std::tie(code, out) = orders.command(
      1, "resolve " + orders.failed + " ship --output 9 --reason 'shipped by hand (OPS-12)'");
  CHECK(code == 0);
  CHECK(out.find("step 'ship' of run " + orders.failed + " resolved; the run is now pending") !=
        std::string::npos);
  std::tie(code, out) = orders.command(0, "show " + orders.failed);
  CHECK(out.find("version      r1") != std::string::npos);
  CHECK(out.find("(resolved by hand: shipped by hand (OPS-12))") != std::string::npos);
  CHECK(out.find("step 'ship' resolved by hand: shipped by hand (OPS-12)") != std::string::npos);
  std::tie(code, out) = orders.command(0, "runs");  // a VERSION column: r1, the fork's "-"
  CHECK(out.find("STATUS ") < out.find(" VERSION "));
  const std::size_t row = out.find(orders.failed);
  REQUIRE(row != std::string::npos);
  const std::string line = out.substr(row, out.find('\n', row) - row);
  CHECK(line.find(" pending ") < line.find(" r1 "));
}

TEST_CASE("http api: POST fork and resolve, their refusals, and the fields a run shows "
          "(on each store)") {
  Orders orders;
  ops::Admin admin(orders.db);
  auto runtime = test::runtime_on(orders.db, orders.clock, test::quiet(orders.db));
  runtime->add(test::order_release(1));
  detail::RuntimeCore& core = detail::RuntimeAccess::core(*runtime);
  admin.set_resolve_check([&core](const detail::RecordedRun& run, const std::string& step,
                                  const json& output) { core.check_resolution(run, step, output); });
  ops::HttpServer server(client::ephemeral(), ops::api_handler(admin));
  client::Connection http(server.port());
  const auto post = [&](const std::string& target, const std::string& body) {
    return http.exchange(client::request_text("POST", target, body));
  };
  const std::string runs = "/v1/runs/" + orders.failed;

  auto answer = post(runs + "/fork", R"({"from_step": "ship"})");
  CHECK(answer.result_int() == 201);
  const std::string fork = client::json_of(answer).at("id");
  CHECK(client::json_of(answer).at("forked_from") == orders.failed);
  CHECK(post(runs + "/fork", R"({"from_step": "nowhere"})").result_int() == 404);
  CHECK(post(runs + "/fork", "{}").result_int() == 400);
  CHECK(post("/v1/runs/" + orders.waiting + "/fork", R"({"from_step": "charge"})").result_int() ==
        409);

  answer = post(runs + "/resolve", R"({"step": "ship", "output": "x", "reason": "r"})");
  CHECK(answer.result_int() == 400);
  CHECK(client::json_of(answer).at("error").at("message").get<std::string>().find(
            "refused, nothing written") != std::string::npos);
  CHECK(post(runs + "/resolve", R"({"step": "ship"})").result_int() == 400);
  CHECK(post(runs + "/resolve", R"({"step": "nowhere", "output": 1})").result_int() == 404);
  answer = post(runs + "/resolve", R"({"step": "ship", "output": 9, "reason": "by hand"})");
  CHECK(answer.result_int() == 200);
  CHECK(client::json_of(answer).at("status") == "pending");
  CHECK(post(runs + "/resolve", R"({"step": "ship", "output": 9})").result_int() == 409);

  const json shown = client::json_of(http.exchange(client::get(runs)));
  CHECK(shown.at("version") == "r1");
  CHECK(shown.at("steps")[2].at("resolved") == "by hand");
  CHECK(client::json_of(http.exchange(client::get("/v1/runs/" + fork))).at("forked_from") ==
        orders.failed);
}

TEST_CASE("myapp durable serve: the API over the database, its runs executed by the program's "
          "code, and a resolve checked against it (on each store)") {
  Orders orders;
  test::ServeProcess serve(DURABLE_CLI_APP, orders.db, {"1", "durable"});
  std::array<char, 512> first{};
  REQUIRE(std::fgets(first.data(), first.size(), serve.out()) != nullptr);
  const std::string line(first.data());
  CHECK(line.find("running this program's workflows: order") != std::string::npos);
  const std::size_t at = line.find("http://127.0.0.1:");
  REQUIRE(at != std::string::npos);
  client::Connection http(static_cast<unsigned short>(std::stoi(line.substr(at + 17))));
  const auto post = [&](const std::string& target, const std::string& body) {
    return http.exchange(client::request_text("POST", target, body));
  };
  const auto status_of = [&](const std::string& id) {
    return client::json_of(http.exchange(client::get("/v1/runs/" + id))).at("status");
  };
  const auto reaches = [&](const std::string& id, const std::string& status) {
    for (int i = 0; i < 500 && status_of(id) != status; ++i) std::this_thread::sleep_for(20ms);
    return status_of(id) == status;
  };

  const std::string runs = "/v1/runs/" + orders.failed;
  CHECK(post(runs + "/resolve", R"({"step": "ship", "output": "x"})").result_int() == 400);
  CHECK(post(runs + "/resolve", R"({"step": "ship", "output": 9})").result_int() == 200);
  CHECK(reaches(orders.failed, "sleeping"));  // replayed past "ship" into its follow-up
  auto answer = post("/v1/runs", R"({"workflow": "order", "input": {"sku": "D-4"}})");
  REQUIRE(answer.result_int() == 201);
  CHECK(reaches(client::json_of(answer).at("id"), "sleeping"));  // charged, at the warehouse
  const int status = serve.stop();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
