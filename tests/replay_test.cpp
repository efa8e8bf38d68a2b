// SPDX-License-Identifier: Apache-2.0
// durable::testing::replay: today's code against a run recorded in a database file.

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>

#include <atomic>
#include <durable/testing.hpp>
#include <fstream>
#include <sstream>

#include "store.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;
using test::has;
using testing::replay;
using testing::replay_all;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Counts the step bodies that run: replay must run none.
std::atomic<int> g_bodies{0};

int body(int value) {
  ++g_bodies;
  return value;
}

// The workflow as it was recorded: three steps around a sleep, 1 + 2 + 3.
Workflow checkout() {
  return Workflow("checkout", [](Step& step, const json&) -> json {
    const int a = step.run("reserve", [] { return body(1); });
    step.sleep("cool-off", 1h);
    const int b = step.run("charge", [] { return body(2); });
    const int c = step.run("ship", [] { return body(3); });
    return a + b + c;
  });
}

// Records one completed run of checkout() in a file; returns its id.
std::string record_checkout(const std::string& path) {
  testing::TestRuntime kit;
  kit.add(checkout());
  const testing::RunResult run = kit.run("checkout");
  REQUIRE(run.info.status == Status::completed);
  REQUIRE(run.info.output == 6);
  kit.save(path);
  return run.info.id;
}

// The message replay() threw, or "" if it threw nothing.
std::string divergence(const Workflow& wf, const std::string& path, const std::string& id) {
  try {
    replay(wf, path, id);
  } catch (const NonDeterminism& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("replay: unchanged code replays a recorded run without running a body or writing") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  const std::string id = record_checkout(path);
  const std::string before = read_all(path);
  g_bodies = 0;
  CHECK_NOTHROW(replay(checkout(), path, id));
  CHECK(g_bodies == 0);
  CHECK(read_all(path) == before);
  // Nothing was made beside the file either: a golden file in a source tree stays alone.
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()),
                      std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("replay: a renamed step names both steps, the journal's content and the call site") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  const std::string id = record_checkout(path);
  Workflow renamed("checkout", [](Step& step, const json&) -> json {
    const int a = step.run("reserve", [] { return body(1); });
    step.sleep("cool-off", 1h);
    const int b = step.run("charge-card", [] { return body(2); });  // was "charge"
    return a + b + step.run("ship", [] { return body(3); });
  });
  g_bodies = 0;
  const std::string message = divergence(renamed, path, id);
  INFO(message);
  CHECK(has(message, "run " + id));
  CHECK(has(message, "the code now calls step.run('charge-card') (at "));
  CHECK(has(message, "replay_test.cpp:"));
  CHECK(has(message, "where the journal holds step 'charge', a step.run that returned 2"));
  CHECK(g_bodies == 0);
}

TEST_CASE("replay: a step inserted before journaled ones is a divergence") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  const std::string id = record_checkout(path);
  Workflow inserted("checkout", [](Step& step, const json&) -> json {
    const int a = step.run("reserve", [] { return body(1); });
    step.run("fraud-check", [] { return body(0); });  // new
    step.sleep("cool-off", 1h);
    const int b = step.run("charge", [] { return body(2); });
    return a + b + step.run("ship", [] { return body(3); });
  });
  const std::string message = divergence(inserted, path, id);
  INFO(message);
  CHECK(has(message, "step.run('fraud-check')"));
  CHECK(has(message, "step 'cool-off', a step.sleep until "));
}

TEST_CASE("replay: a removed step is named, with how the workflow now ends") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  const std::string id = record_checkout(path);
  Workflow removed("checkout", [](Step& step, const json&) -> json {
    const int a = step.run("reserve", [] { return body(1); });
    step.sleep("cool-off", 1h);
    return a + step.run("ship", [] { return body(3); });  // "charge" is gone
  });
  const std::string message = divergence(removed, path, id);
  INFO(message);
  CHECK(has(message,
            "the workflow now returned 4 without calling step 'charge', a step.run that "
            "returned 2"));
}

TEST_CASE("replay: a step id reused for another kind of step names both kinds") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  const std::string id = record_checkout(path);
  Workflow changed("checkout", [](Step& step, const json&) -> json {
    step.run("reserve", [] { return body(1); });
    step.run("cool-off", [] { return body(0); });  // was a sleep
    return 0;
  });
  const std::string message = divergence(changed, path, id);
  INFO(message);
  CHECK(has(message, "step 'cool-off' of run " + id + " was journaled as a step.sleep until "));
  CHECK(has(message, ", over, but the code now calls step.run with that id (at "));
  CHECK(has(message, "replay_test.cpp:"));
}

TEST_CASE("replay: a completed run whose code now goes on, or returns another output") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  const std::string id = record_checkout(path);
  Workflow longer("checkout", [](Step& step, const json& input) -> json {
    const json total = checkout().invoke(step, input);
    step.run("receipt", [] { return body(0); });  // new, after the recorded end
    return total;
  });
  std::string message = divergence(longer, path, id);
  INFO(message);
  CHECK(has(message,
            "the recorded run returned 6, but the code now goes on to call "
            "step.run('receipt') (at "));

  Workflow other_output("checkout", [](Step& step, const json& input) -> json {
    return checkout().invoke(step, input).get<int>() * 100;
  });
  message = divergence(other_output, path, id);
  CHECK(has(message, "the recorded run returned 6, but the code now returned 600"));
}

TEST_CASE("replay: steps that keep their ids may change order, as the runtime allows") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  const std::string id = record_checkout(path);
  Workflow swapped("checkout", [](Step& step, const json&) -> json {
    const int a = step.run("reserve", [] { return body(1); });
    step.sleep("cool-off", 1h);
    const int c = step.run("ship", [] { return body(3); });
    const int b = step.run("charge", [] { return body(2); });
    return a + b + c;
  });
  CHECK_NOTHROW(replay(swapped, path, id));
}

TEST_CASE("replay: a failed run must fail the same way") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  const auto payment = [](bool catches) {
    return Workflow("payment", [catches](Step& step, const json&) -> json {
      try {
        return step.run("charge", [] { return body(1); },
                        {.retry = RetryPolicy{.max_attempts = 2}});
      } catch (const StepFailed&) {
        if (!catches) throw;
        return "refunded";
      }
    });
  };
  std::string id;
  {
    testing::TestRuntime kit;
    kit.add(payment(false));
    kit.fail("charge", "card declined");
    const testing::RunResult run = kit.run("payment");
    REQUIRE(run.info.status == Status::failed);
    kit.save(path);
    id = run.info.id;
  }
  CHECK_NOTHROW(replay(payment(false), path, id));
  const std::string message = divergence(payment(true), path, id);
  INFO(message);
  CHECK(has(message, "the recorded run failed (durable::Error: card declined)"));
  CHECK(has(message, "but the code now returned \"refunded\""));
}

TEST_CASE("replay: a run recorded in progress may go on past its journal, not change it") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  const auto approval = [](bool extra_before, bool extra_after) {
    return Workflow("approval", [=](Step& step, const json&) -> json {
      step.run("submit", [] { return body(1); });
      if (extra_before) step.run("notify", [] { return body(0); });
      const auto answer = step.wait_for_event("answer", "order.approved");
      if (extra_after) step.run("archive", [] { return body(0); });
      return answer.value_or("none");
    });
  };
  std::string id;
  {
    testing::TestRuntime kit;
    kit.add(approval(false, false));
    const testing::RunResult run = kit.run("approval");
    REQUIRE(run.info.status == Status::waiting);
    kit.save(path);
    id = run.info.id;
  }
  CHECK_NOTHROW(replay(approval(false, false), path, id));
  CHECK_NOTHROW(replay(approval(false, true), path, id));  // the wait is still where it stops
  const std::string message = divergence(approval(true, false), path, id);
  INFO(message);
  CHECK(has(message, "step.run('notify')"));
  CHECK(has(message, "step 'answer', a step.wait_for_event of 'order.approved', still waiting"));
}

TEST_CASE("replay: parallel steps, event waits, sends, children and retries replay from a file") {
  test::TempDir dir;
  const std::string path = dir.file("live.db");
  const auto child = Workflow("label", [](Step& step, const json& input) -> json {
    return step.run("print", [input] { return "label:" + input.value("order", ""); });
  });
  const auto parent = [](bool labels) {
    return Workflow("fulfil", [labels](Step& step, const json&) -> json {
      const std::vector<int> items{1, 2, 3};
      const std::vector<int> doubled = step.map("double", items, [](int i) { return body(i * 2); });
      auto a = step.start("left", [] { return body(10); });
      auto b = step.start("right", [] { return body(20); });
      const auto [left, right] = all(a, b);
      const json label = labels ? step.invoke("label", "label", {{"order", "o-1"}}) : json();
      step.send_event("announce", "order.packed", {{"order", "o-1"}});
      const auto picked = step.wait_for_event("pickup", "courier.picked", {.timeout = 1h});
      static std::atomic<int> tries{0};
      const int flaky = step.run("flaky",
                                 [] {
                                   if (++tries < 3) throw std::runtime_error("busy");
                                   return body(5);
                                 },
                                 {.retry = RetryPolicy{.max_attempts = 5, .initial_backoff = 1ms}});
      return json{{"sum", doubled[0] + doubled[1] + doubled[2] + left + right + flaky},
                  {"label", label},
                  {"picked", picked.has_value()}};
    });
  };
  test::ManualClock clock;
  auto runtime = test::runtime_on(path, clock);
  runtime->add(child);
  runtime->add(parent(true));
  const std::string id = runtime->start("fulfil");
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::waiting);
  runtime->send_event("courier.picked", {{"order", "o-1"}});
  for (int i = 0; i < 20 && runtime->get(id).status != Status::completed; ++i) {
    clock.advance(1s);
    runtime->run_until_idle();
  }
  REQUIRE(runtime->get(id).status == Status::completed);
  // The runtime is still open: its -wal holds the latest commits, and replay reads through it.
  REQUIRE(std::filesystem::exists(path + "-wal"));
  g_bodies = 0;
  CHECK_NOTHROW(replay(parent(true), path, id));
  CHECK(g_bodies == 0);
  const std::string message = divergence(parent(false), path, id);  // no child any more
  INFO(message);
  CHECK(has(message, "without calling step 'label', a step.invoke of 'label' (child run "));
  CHECK(has(message, ") that returned \"label:o-1\""));
}

TEST_CASE("replay_all replays every run of the workflow in the file") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  testing::TestRuntime kit;
  kit.add(checkout());
  kit.add(Workflow("other", [](Step&, const json&) -> json { return 0; }));
  kit.run("checkout");
  kit.run("checkout");
  kit.run("other");
  kit.save(path);
  CHECK(replay_all(checkout(), path) == 2);
  Workflow broken("checkout", [](Step& step, const json&) -> json {
    return step.run("reserve", [] { return body(1); });
  });
  CHECK_THROWS_AS(replay_all(broken, path), NonDeterminism);
  CHECK_THROWS_WITH_AS(
      replay_all(Workflow("absent", [](Step&, const json&) -> json { return 0; }), path),
      doctest::Contains("holds no run of workflow 'absent'"), Error);
}

TEST_CASE("replay: bad input gets a clear error and the file is left as it was") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  const std::string id = record_checkout(path);
  CHECK_THROWS_WITH_AS(replay(checkout(), dir.file("missing.db"), id),
                       doctest::Contains("missing.db' does not exist"), Error);
  CHECK_THROWS_WITH_AS(replay(checkout(), path, "no-such-run"),
                       doctest::Contains("holds no run 'no-such-run'"), Error);
  CHECK_THROWS_WITH_AS(
      replay(Workflow("refund", [](Step&, const json&) -> json { return 0; }), path, id),
      doctest::Contains("is a run of workflow 'checkout', not of 'refund'"), Error);

  const std::string notes = dir.file("notes.db");
  { std::ofstream(notes) << "not a database\n" << std::string(5000, 'z'); }
  CHECK_THROWS_WITH_AS(
      replay(checkout(), notes, id),
      doctest::Contains("not a durable database: the file is not an SQLite database"), Error);
  CHECK(read_all(notes).starts_with("not a database"));

  const std::string newer = dir.file("newer.db");
  std::filesystem::copy_file(path, newer);
  {
    SQLite::Database(newer, SQLite::OPEN_READWRITE)
        .exec("PRAGMA user_version = " + std::to_string(detail::kSchemaVersion + 1));
  }
  CHECK_THROWS_WITH_AS(replay(checkout(), newer, id),
                       doctest::Contains("written by a newer durable"), Error);

  const std::string odd = dir.file("100% #1?.db");  // characters a file: URI must escape
  std::filesystem::copy_file(path, odd);
  CHECK_NOTHROW(replay(checkout(), odd, id));
}

TEST_CASE("TestRuntime::save replaces an existing file only with a complete copy") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  { std::ofstream(path) << "an older recording"; }
  { std::ofstream(path + "-wal") << "a stale log, as a crashed sqlite3 shell leaves"; }
  const std::string id = record_checkout(path);  // saves over it
  CHECK_FALSE(std::filesystem::exists(path + "-wal"));
  CHECK_NOTHROW(replay(checkout(), path, id));
  testing::TestRuntime kit;
  CHECK_THROWS_WITH_AS(kit.save(dir.file("no-such-dir/golden.db")),
                       doctest::Contains("could not copy database"), Error);
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()),
                      std::filesystem::directory_iterator()) == 1);
}

TEST_CASE("replay: a file of an older schema replays from a migrated copy, left as it was") {
  test::TempDir dir;
  const std::string path = dir.file("golden-v2.db");
  const std::string id = record_checkout(path);
  {  // What schema version 2 looked like: no step durations, no registered workflows.
    SQLite::Database db(path, SQLite::OPEN_READWRITE);
    db.exec(
        "DROP TRIGGER runs_counted; DROP TRIGGER runs_recounted; DROP TRIGGER runs_uncounted; "
        "DROP TRIGGER steps_counted; DROP TRIGGER steps_uncounted; DROP TRIGGER steps_changing; "
        "DROP TRIGGER steps_changed; DROP VIEW step_figures; DROP TABLE run_counts; "
        "DROP TABLE step_counts; DROP TABLE step_buckets; DROP INDEX runs_newest; "
        "DROP INDEX runs_status; DROP INDEX runs_workflow; DROP INDEX runs_workflow_status; "
        "CREATE INDEX runs_due ON runs (status, due_at); "
        "CREATE INDEX runs_workflow ON runs (workflow, status); "
        "ALTER TABLE steps DROP COLUMN duration_ms; ALTER TABLE steps DROP COLUMN started_at; "
        "ALTER TABLE steps DROP COLUMN resolved; ALTER TABLE runs DROP COLUMN version; "
        "ALTER TABLE runs DROP COLUMN forked_from; ALTER TABLE runs DROP COLUMN continued_as; "
        "DROP TABLE workflows; DROP TABLE run_tags; DROP TABLE paused_workflows; "
        "DROP TABLE step_progress; DROP TABLE published; DROP TABLE messages; "
        "DROP TABLE streams; DROP TABLE stream_values; DROP TABLE data_keys; "
        "ALTER TABLE events DROP COLUMN correlation_id; "
        "DROP INDEX runs_prioritized; DROP INDEX runs_deadline; DROP INDEX runs_paused; "
        "DROP INDEX runs_running_keys; DROP INDEX runs_first_body; "
        "ALTER TABLE runs DROP COLUMN first_body_at; ALTER TABLE runs DROP COLUMN "
        "flow_key; ALTER TABLE runs DROP COLUMN rate_key; ALTER TABLE runs DROP COLUMN began_at; "
        "DROP INDEX runs_debounce; DROP INDEX runs_ended; "
        "ALTER TABLE runs DROP COLUMN debounce_key; ALTER TABLE runs DROP COLUMN traceparent; "
        "ALTER TABLE runs DROP COLUMN priority; ALTER TABLE runs DROP COLUMN deadline_at; "
        "ALTER TABLE runs DROP COLUMN tags; ALTER TABLE runs DROP COLUMN paused; "
        "ALTER TABLE runs DROP COLUMN paused_from; "
        "ALTER TABLE runs DROP COLUMN crashes; DROP INDEX runs_correlation; "
        "ALTER TABLE workers DROP COLUMN seen_at; ALTER TABLE workers DROP COLUMN lease_ms; "
        "ALTER TABLE workers DROP COLUMN counters; "
        "PRAGMA user_version = 2");
  }
  const std::string before = read_all(path);
  // The migrated copy goes to TMPDIR: a directory of this test's own, so that other tests
  // running at the same time do not count.
  test::TempDir tmp;
  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string restore = old_tmpdir != nullptr ? old_tmpdir : "";
  ::setenv("TMPDIR", tmp.path().c_str(), 1);
  CHECK_NOTHROW(replay(checkout(), path, id));
  const bool empty = std::filesystem::is_empty(tmp.path());  // the migrated copy is gone
  if (old_tmpdir != nullptr) {
    ::setenv("TMPDIR", restore.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  CHECK(empty);
  CHECK(read_all(path) == before);
  Workflow renamed("checkout", [](Step& step, const json&) -> json {
    return step.run("reserve-stock", [] { return body(1); });
  });
  CHECK_THROWS_AS(replay(renamed, path, id), NonDeterminism);
}

TEST_CASE("replay: an id of a failed child's invoke reused for a step.run is NonDeterminism") {
  test::TempDir dir;
  const std::string path = dir.file("golden.db");
  const Workflow child("flaky-child", [](Step& step, const json&) -> json {
    return step.run("work", []() -> int { throw NonRetryableError("the child gives up"); });
  });
  const auto parent = [](bool as_run) {
    return Workflow("parent", [as_run](Step& step, const json&) -> json {
      if (as_run) return step.run("label", [] { return body(1); });
      try {
        return step.invoke("label", "flaky-child");
      } catch (const StepFailed&) {
        return "no label";
      }
    });
  };
  std::string id;
  {
    testing::TestRuntime kit;
    kit.add(child);
    kit.add(parent(false));
    const testing::RunResult run = kit.run("parent");
    REQUIRE(run.info.output == "no label");
    kit.save(path);
    id = run.info.id;
  }
  CHECK_NOTHROW(replay(parent(false), path, id));
  const std::string message = divergence(parent(true), path, id);
  INFO(message);
  CHECK(has(message, "was journaled as a step.invoke"));
  CHECK(has(message, "that failed (durable::NonRetryableError: child run "));
  CHECK(has(message, "of 'flaky-child' failed: the child gives up)"));
}
