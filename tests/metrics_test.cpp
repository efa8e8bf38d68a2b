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
#include "prometheus_text.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

TEST_CASE("metrics: failed attempts and steps failed for good are counted apart (on each store)") {
  using test::prometheus::parse;
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
  auto metrics = parse(admin.metrics());
  const auto in = [](const char* workflow) {
    return test::prometheus::Labels{{"workflow", workflow}};
  };
  CHECK(metrics.sum("durable_steps") == 4);  // call, hotel, cancel-flight, charge
  CHECK(metrics.value("durable_steps", in("compensated")) == 2);
  CHECK(metrics.sum("durable_step_attempts_failed") == 6);  // 1 + 2 + 3
  CHECK(metrics.value("durable_step_attempts_failed", in("flaky")) == 1);
  CHECK(metrics.value("durable_step_attempts_failed", in("doomed")) == 3);
  CHECK(metrics.sum("durable_step_retries") == 4);  // 1 + 1 + 2
  CHECK(metrics.value("durable_step_retries", in("compensated")) == 1);
  CHECK(metrics.sum("durable_steps_failed") == 2);  // hotel (caught) and charge
  CHECK(metrics.value("durable_steps_failed", in("flaky")) == 0);
  CHECK(metrics.sum("durable_runs", {{"status", "failed"}}) == 1);
  CHECK(metrics.value("durable_runs", {{"workflow", "doomed"}, {"status", "failed"}}) == 1);
  CHECK(metrics.sum("durable_runs", {{"status", "completed"}}) == 2);
  CHECK(metrics.of("durable_step_failures").empty());  // renamed: it said neither of the two

  // A retry resets the failed run's step: the series go down, which a counter may not.
  admin.retry(doomed);
  metrics = parse(admin.metrics());
  CHECK(metrics.sum("durable_step_attempts_failed") == 3);
  CHECK(metrics.value("durable_step_attempts_failed", in("doomed")) == 0);
  CHECK(metrics.sum("durable_step_retries") == 2);
  CHECK(metrics.sum("durable_steps_failed") == 1);
  for (const char* family :
       {"durable_runs", "durable_steps", "durable_step_attempts_failed", "durable_step_retries",
        "durable_steps_failed", "durable_pending_depth", "durable_oldest_pending_age_seconds",
        "durable_workers", "durable_worker_start_time_seconds"}) {
    CHECK_MESSAGE(metrics.types[family] == "gauge", family);
  }
  CHECK(metrics.types["durable_step_duration_seconds"] == "histogram");
  // Only the workers' own counters only ever grow; nothing read from the journals is a counter.
  for (const auto& family_type : metrics.types) {
    const std::string& family = family_type.first;
    if (family_type.second == "counter") {
      CHECK_MESSAGE(family.rfind("durable_worker_", 0) == 0, family);
    }
  }
}

TEST_CASE(
    "metrics: the /metrics of runs in every state passes promtool check metrics (on each store)") {
  using test::prometheus::parse;
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
  const auto scrape_of = parse(metrics);
  for (const char* status :
       {"completed", "failed", "sleeping", "waiting", "pending", "cancelled"}) {
    CHECK_MESSAGE(scrape_of.sum("durable_runs", {{"status", status}}) > 0, status);
  }
  CHECK(scrape_of.sum("durable_steps_failed") == 2);  // checkout's charge-card, book-hotel
  CHECK(scrape_of.sum("durable_step_attempts_failed") == 5);

  const std::string scrape = dir.file("metrics.txt");
  std::ofstream(scrape) << metrics;
  const auto checked = test::run_shell("promtool check metrics < " + scrape + " 2>&1");
  const int code = checked.first;
  const std::string& said = checked.second;
  INFO("promtool check metrics said:\n" << said << "on this scrape:\n" << metrics);
  CHECK(code == 0);
  CHECK(said.empty());
}
