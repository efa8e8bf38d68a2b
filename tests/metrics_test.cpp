// SPDX-License-Identifier: Apache-2.0
// /metrics: what each step series counts, that each is typed as what it is (a figure read from
// the database can go down, so it is a gauge), and that the real output of a file with runs in
// every state passes `promtool check metrics` (Debian's prometheus package).

#include <doctest/doctest.h>

#include <fstream>
#include <regex>

#include "admin.hpp"
#include "api.hpp"
#include "http_client.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::has;

namespace {

// The value of the one sample named `series` (with its labels, if any) in a scrape.
std::optional<double> sample(const std::string& metrics, const std::string& series) {
  const std::string at = "\n" + series + " ";
  const std::size_t found = ("\n" + metrics).find(at);
  if (found == std::string::npos) return std::nullopt;
  return std::stod(metrics.substr(found + at.size() - 1));
}

// The TYPE line's type of a metric family, or empty.
std::string type_of(const std::string& metrics, const std::string& family) {
  std::smatch match;
  const std::regex line("# TYPE " + family + " (\\w+)\n");
  return std::regex_search(metrics, match, line) ? match[1].str() : std::string();
}

}  // namespace

TEST_CASE("metrics: failed attempts and steps failed for good are counted apart (on each store)") {
  test::TempDir dir;
  const RuntimeOptions opts = test::quiet(test::database(dir, "metrics.db"));
  Runtime runtime(opts);
  auto flaky_calls = std::make_shared<std::atomic<int>>(0);
  // One failed attempt, retried, then success: no step failed for good.
  runtime.add(Workflow("flaky", [flaky_calls](Step& step, const json&) -> json {
    return step.run("call",
                    [flaky_calls] {
                      if (++*flaky_calls == 1) throw std::runtime_error("503 from the service");
                      return 1;
                    },
                    {.retry = test::quick_retries(3)});
  }));
  // Two failed attempts; the step fails for good, the workflow catches it and completes.
  runtime.add(Workflow("compensated", [](Step& step, const json&) -> json {
    try {
      step.run("hotel", []() -> int { throw std::runtime_error("no room"); },
               {.retry = test::quick_retries(2)});
    } catch (const StepFailed&) {
      return step.run("cancel-flight", [] { return "cancelled"; });
    }
    return "booked";
  }));
  // Three failed attempts; the step fails for good and so does the run.
  runtime.add(Workflow("doomed", [](Step& step, const json&) -> json {
    return step.run("charge", []() -> int { throw std::runtime_error("card declined"); },
                    {.retry = test::quick_retries(3)});
  }));
  REQUIRE(runtime.wait(runtime.start("flaky"), 10s).status == Status::completed);
  REQUIRE(runtime.wait(runtime.start("compensated"), 10s).status == Status::completed);
  const std::string doomed = runtime.start("doomed");
  REQUIRE(runtime.wait(doomed, 10s).status == Status::failed);

  ops::Admin admin(opts.database);
  std::string metrics = admin.metrics();
  CHECK(sample(metrics, "durable_steps") == 4);  // call, hotel, cancel-flight, charge
  CHECK(sample(metrics, "durable_step_attempts_failed") == 6);  // 1 + 2 + 3
  CHECK(sample(metrics, "durable_step_retries") == 4);          // 1 + 1 + 2
  CHECK(sample(metrics, "durable_steps_failed") == 2);          // hotel (caught) and charge
  CHECK(sample(metrics, "durable_runs{status=\"failed\"}") == 1);
  CHECK(sample(metrics, "durable_runs{status=\"completed\"}") == 2);
  CHECK_FALSE(has(metrics, "durable_step_failures"));  // renamed: it said neither of the two

  // A retry resets the failed run's step: the series go down, which a counter may not.
  admin.retry_run(doomed);
  metrics = admin.metrics();
  CHECK(sample(metrics, "durable_step_attempts_failed") == 3);
  CHECK(sample(metrics, "durable_step_retries") == 2);
  CHECK(sample(metrics, "durable_steps_failed") == 1);
  for (const char* family :
       {"durable_runs", "durable_steps", "durable_step_attempts_failed", "durable_step_retries",
        "durable_steps_failed", "durable_pending_depth", "durable_oldest_pending_age_seconds",
        "durable_workers"}) {
    CHECK_MESSAGE(type_of(metrics, family) == "gauge", family);
  }
  CHECK(type_of(metrics, "durable_step_duration_seconds") == "histogram");
  CHECK_FALSE(has(metrics, " counter\n"));  // nothing read from the file only ever grows
}

TEST_CASE(
    "metrics: the /metrics of runs in every state passes promtool check metrics (on each store)") {
  const auto [found, promtool] = test::run_shell("command -v promtool");
  if (found != 0) {
    FAIL(
        "promtool is not on PATH: install Debian's prometheus package (apt-get install "
        "--no-install-recommends prometheus; scripts/deps.sh installs it for the tests)");
  }
  test::TempDir dir;
  const std::string db = test::database(dir, "states.db");
  // Not structured bindings: doctest's messages capture them, which clang 14 cannot.
  const auto fixture =
      test::run_shell(std::string(DURABLE_OPS_FIXTURE) + " --db " + db + " --extended");
  const int made = fixture.first;
  const std::string& ids = fixture.second;
  REQUIRE_MESSAGE(made == 0, "the fixture failed: " << ids);

  ops::Admin admin(db);
  ops::HttpServer server(test::http_client::ephemeral(), ops::api_handler(admin));
  test::http_client::Connection client(server.port());
  const auto response = client.exchange(test::http_client::get("/metrics"));
  REQUIRE(response.result_int() == 200);
  const std::string metrics = response.body();
  for (const char* status :
       {"completed", "failed", "sleeping", "waiting", "pending", "cancelled"}) {
    CHECK_MESSAGE(sample(metrics, "durable_runs{status=\"" + std::string(status) + "\"}") > 0,
                  status);
  }
  CHECK(sample(metrics, "durable_steps_failed") == 2);  // checkout's charge-card, book-hotel
  CHECK(sample(metrics, "durable_step_attempts_failed") == 5);

  const std::string scrape = dir.file("metrics.txt");
  std::ofstream(scrape) << metrics;
  const auto checked = test::run_shell("promtool check metrics < " + scrape + " 2>&1");
  const int code = checked.first;
  const std::string& said = checked.second;
  INFO("promtool check metrics said:\n" << said << "on this scrape:\n" << metrics);
  CHECK(code == 0);
  CHECK(said.empty());
}
