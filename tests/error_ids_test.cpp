// SPDX-License-Identifier: Apache-2.0
// Stable error ids (DESIGN §11.3, docs/errors.md): every durable::Error has code(), shown at the
// start of durable's own messages, in the logs, the runbook and HTTP error bodies.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "admin.hpp"
#include "cli_support.hpp"
#include "errors_internal.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;

namespace {
// The error a call throws, as the type the library documents for it.
template <class E, class F>
E error_thrown_by(F&& call) {
  try {
    call();
  } catch (const E& e) {
    return e;
  }
  FAIL("nothing was thrown");
  throw std::logic_error("unreachable");
}

bool begins_with(const std::string& text, const std::string& start) {
  return text.compare(0, start.size(), start) == 0;
}
}  // namespace

TEST_CASE("an error of the application's keeps its words, and durable's begin with their id") {
  CHECK(Error("no plan named 'gold'").code() == "durable.error");
  CHECK(std::string(Error("no plan named 'gold'").what()) == "no plan named 'gold'");
  CHECK(NonRetryableError("card declined").code() == errc::non_retryable);
  CHECK(std::string(NonRetryableError("card declined").what()) == "card declined");
  const RetryAfterError later("rate limited", std::chrono::milliseconds(500));
  CHECK(later.code() == "durable.retry_after");
  CHECK(std::string(later.what()) == "rate limited");

  CHECK(NotFound("no run 'r-1'").code() == errc::not_found);
  CHECK(std::string(NotFound("no run 'r-1'").what()) == "[durable.not_found] no run 'r-1'");
  CHECK(std::string(NonDeterminism("x").what()) == "[durable.non_determinism] x");
  CHECK(TimeoutError("x").code() == "durable.timeout");
  CHECK(InvalidInput("x").code() == "durable.invalid_input");
  CHECK(UnknownWorkflow("x").code() == "durable.unknown_workflow");
  const StepFailed failed(ErrorInfo{"std::runtime_error", "down", "charge", 3});
  CHECK(failed.code() == errc::step_failed);
  CHECK(std::string(failed.what()) ==
        "[durable.step_failed] step 'charge' failed after 3 attempts: std::runtime_error: down");

  // An application's own id reads the same way.
  const Error mine(ErrorCode("shop.out_of_stock"), "none left");
  CHECK(mine.code() == "shop.out_of_stock");
  CHECK(std::string(mine.what()) == "[shop.out_of_stock] none left");

  // What the logs and the runbook read back from a journaled message.
  CHECK(detail::error_id("[durable.timeout] step 'x' took too long") == "durable.timeout");
  CHECK(detail::error_id("no plan named 'gold'").empty());
  CHECK(detail::error_id("[durable.] x").empty());
  CHECK(detail::error_id("[durable.Not An Id] x").empty());
  CHECK(detail::error_id("[shop.out_of_stock] none left").empty());  // durable's only
  CHECK(detail::message_of(NotFound("no run 'r-1'")) == "no run 'r-1'");
  CHECK(detail::message_of(Error("[durable.x] as given")) == "[durable.x] as given");
}

TEST_CASE("what durable throws has the id of what went wrong (on each store)") {
  test::TempDir dir;
  const std::string database = test::database(dir, "db");
  Runtime runtime({.database = database});
  runtime.add(Workflow("noop", [](Step&, const json&) -> json { return nullptr; }));

  const auto missing = error_thrown_by<NotFound>([&] { runtime.get("no-such-run"); });
  CHECK(missing.code() == errc::not_found);
  CHECK(begins_with(missing.what(), "[durable.not_found] "));

  const auto priority =
      error_thrown_by<Error>([&] { runtime.start("noop", {}, {.priority = 1 << 20}); });
  CHECK(priority.code() == errc::invalid_argument);
  CHECK(begins_with(priority.what(), "[durable.invalid_argument] a run's priority is"));

  const auto lease = error_thrown_by<Error>(
      [&] { Runtime wrong({.database = database, .lease = std::chrono::milliseconds(0)}); });
  CHECK(lease.code() == errc::config);
  CHECK(std::string(lease.what()) == "[durable.config] RuntimeOptions::lease must be positive");

  const std::string done = runtime.start("noop");
  runtime.run_until_idle();
  const auto again = error_thrown_by<Error>([&] { runtime.retry(done); });
  CHECK(again.code() == errc::conflict);
  CHECK(begins_with(again.what(), "[durable.conflict] run " + done));
}

TEST_CASE(
    "a run failed by durable's own error carries its id: in its error, the runbook and the log "
    "line (on each store)") {
  test::TempDir dir;
  std::vector<std::string> lines;
  RuntimeOptions options{.database = test::database(dir, "db")};
  options.log_level = LogLevel::error;
  options.log_sink = [&](std::string_view line) { lines.emplace_back(line); };
  Runtime runtime(options);
  runtime.add(Workflow("careless", [](Step& step, const json&) -> json {
    step.run("", [] { return 1; });  // an empty id: durable refuses it
    return nullptr;
  }));
  const std::string id = runtime.start("careless");
  runtime.run_until_idle();

  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error);
  CHECK(run.error->message == "[durable.invalid_argument] a step id must not be empty");

  ops::Admin admin(options.database);
  CHECK(admin.show(id).at("runbook").at("error_id") == "durable.invalid_argument");
  const auto [code, shown] = test::run_cli(options.database, "show " + id);
  CHECK(code == 0);
  CHECK(shown.find("\n  error id     durable.invalid_argument (docs/errors.md)\n") !=
        std::string::npos);

  bool logged = false;
  for (const std::string& line : lines) {
    const json fields = json::parse(line);
    if (fields.at("event") != "run.failed") continue;
    logged = true;
    CHECK(fields.at("error_id") == "durable.invalid_argument");
  }
  CHECK(logged);
}

TEST_CASE(
    "failures durable records without throwing carry their id too: NonDeterminism after a "
    "deploy, a run past its deadline, an output over its limit (on each store)") {
  test::TempDir dir;
  const std::string database = test::database(dir, "db");
  test::ManualClock clock;
  const auto reminder = [](bool renamed) {
    return Workflow("remind", [renamed](Step& step, const json&) -> json {
      if (renamed) {
        step.run("nap", [] { return 1; });  // the deploy turned the sleep into a step
      } else {
        step.sleep("nap", std::chrono::hours(1));
      }
      return nullptr;
    });
  };
  const std::string diverged = test::run_before_restart(database, clock, reminder(false));
  auto runtime = test::runtime_on(database, clock);
  runtime->add(reminder(true));
  runtime->add(Workflow("slow", [](Step& step, const json&) -> json {
    step.sleep("wait", std::chrono::hours(2));
    return nullptr;
  }));
  const std::string late =
      runtime->start("slow", {}, {.deadline = clock.now() + std::chrono::minutes(30)});
  runtime->run_until_idle();
  clock.advance(std::chrono::hours(1) + std::chrono::minutes(1));
  runtime->run_until_idle();

  ops::Admin admin(database);
  const auto id_of = [&](const std::string& run_id) {
    const RunInfo run = runtime->get(run_id);
    CHECK(run.status == Status::failed);
    REQUIRE(run.error);
    CHECK(admin.show(run_id).at("runbook").at("error_id") ==
          std::string(detail::error_id(run.error->message)));
    return std::string(detail::error_id(run.error->message));
  };
  CHECK(id_of(diverged) == "durable.non_determinism");
  CHECK(id_of(late) == "durable.timeout");

  RuntimeOptions small = test::quiet(database);
  small.max_output_bytes = 100;
  Runtime limited(small);
  limited.add(Workflow("big", [](Step&, const json&) -> json { return std::string(600, 'x'); }));
  const std::string big = limited.start("big");
  limited.run_until_idle();
  const RunInfo run = limited.get(big);
  REQUIRE(run.error);
  CHECK(run.error->message.starts_with("[durable.too_large] the workflow of run " + big));
}
