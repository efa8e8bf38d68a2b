// SPDX-License-Identifier: Apache-2.0
// The worker loop's scheduling (DESIGN §10): a run that comes due while other runs' bodies
// execute starts at once, runs due earlier go first, and each parallel body is durable when it
// ends. No test here is bounded by a tight wall-clock figure: each is gated on the bodies it
// waits for, or bounded by how much of the slow work had run.

#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "fiber_scheduler.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

using test::Serving;

bool runs_on_fibers() {
  if (detail::FiberScheduler::uses_fibers()) return true;
  MESSAGE("not run: this build has no fibers (ThreadSanitizer), so runs execute one by one");
  return false;
}

template <class F>
bool within(std::chrono::seconds limit, F&& done) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

}  // namespace

TEST_CASE("a run started while another run's slow step executes starts at once (on each store)") {
  if (!runs_on_fibers()) return;
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db"), .threads = 4});
  std::atomic<bool> slow_began{false}, release{false};
  runtime.add(Workflow("slow", [&](Step& step, const json&) -> json {
    for (const char* id : {"call-1", "call-2"}) {
      step.run(id, [&] {
        slow_began = true;
        // A slow service: it answers when the test lets it (or after a minute).
        within(60s, [&] { return release.load(); });
        return true;
      });
    }
    return "slow done";
  }));
  runtime.add(Workflow("quick", [](Step& step, const json&) -> json {
    return step.run("a", [] { return 1; }) + step.run("b", [] { return 2; });
  }));
  Serving serving(runtime);
  const std::string slow = runtime.start("slow");
  REQUIRE(within(20s, [&] { return slow_began.load(); }));
  const std::string quick = runtime.start("quick");
  // Three of the four step threads are free: the quick run does not wait for the slow body.
  CHECK(within(20s, [&] { return runtime.get(quick).status == Status::completed; }));
  CHECK(runtime.get(quick).output == 3);
  CHECK(runtime.get(slow).status == Status::running);  // its body is still held
  release = true;
  CHECK(within(20s, [&] { return runtime.get(slow).status == Status::completed; }));
}

TEST_CASE(
    "fair share: quick runs started among 100 slow ones end well before the slow queue drains (on "
    "each store)") {
  if (!runs_on_fibers()) return;
  constexpr int kSlowRuns = 100, kSlowSteps = 3, kQuickRuns = 10;
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db"), .threads = 4});
  std::atomic<int> slow_bodies{0};
  runtime.add(Workflow("slow", [&](Step& step, const json&) -> json {
    for (int i = 0; i < kSlowSteps; ++i) {
      step.run("call", [&] {
        // Longer than a run's fair slice (100 ms), so that each slow run gives its turn up at
        // every step; short enough to drain the queue in seconds.
        std::this_thread::sleep_for(250ms);
        return ++slow_bodies;
      });
    }
    return true;
  }));
  runtime.add(Workflow(
      "quick", [](Step& step, const json&) -> json { return step.run("a", [] { return 1; }); }));
  std::vector<std::string> quick;
  for (int i = 0; i < kSlowRuns; ++i) {
    runtime.start("slow");
    if (i % (kSlowRuns / kQuickRuns) == kSlowRuns / kQuickRuns - 1)
      quick.push_back(runtime.start("quick"));
  }
  Serving serving(runtime);
  // Each quick run is due before the slow runs' second steps: it runs once the first steps due
  // before it have, not after the slow runs it was started among have ended.
  const auto all_quick_done = [&] {
    for (const std::string& id : quick) {
      if (runtime.get(id).status != Status::completed) return false;
    }
    return true;
  };
  REQUIRE(within(180s, all_quick_done));
  const int done = slow_bodies.load();
  MESSAGE(done << " of " << kSlowRuns * kSlowSteps
               << " slow bodies had run when the last quick run ended");
  CHECK(done <= kSlowRuns * kSlowSteps / 2);
}

TEST_CASE(
    "a step thread takes its next body while the entry of the one that ended commits (on each "
    "store)") {
  if (!runs_on_fibers()) return;
  test::TempDir dir;
  // One step thread, and a commit of part[0]'s entry that lasts until part[1] has begun: the
  // thread must not wait for that commit before it takes part[1].
  Runtime runtime({.database = test::database(dir, "db"), .threads = 1});
  std::atomic<bool> second_began{false};
  std::atomic<bool> waited_in_vain{false};
  detail::RuntimeAccess::core(runtime).set_commit_hook(
      [&](const std::string&, const std::vector<detail::EntryWrite>& entries) {
        for (const auto& w : entries) {
          if (w.entry.key != "part[0]") continue;
          if (!within(10s, [&] { return second_began.load(); })) waited_in_vain = true;
        }
      });
  runtime.add(Workflow("two", [&](Step& step, const json&) -> json {
    const std::vector<int> parts = step.map("part", std::vector<int>{0, 1}, [&](int i) {
      if (i == 1) second_began = true;
      return i;
    });
    return parts.at(0) + parts.at(1);
  }));
  const std::string id = runtime.start("two");
  runtime.run_until_idle();
  CHECK_FALSE(waited_in_vain.load());
  CHECK(runtime.get(id).output == 1);
  const auto steps = runtime.steps(id);
  CHECK(steps.size() == 2);
}

TEST_CASE(
    "after quick steps, the bodies of a fan-out still start on every free thread at once (on each "
    "store)") {
  if (!runs_on_fibers()) return;
  test::TempDir dir;
  // Quick steps first, so the step threads spin for hand-offs; then 4 bodies that each end only
  // once all 4 have begun. Were they left to the one spinning thread, the first would wait alone.
  constexpr int kWidth = 4;
  Runtime runtime({.database = test::database(dir, "db"), .threads = kWidth});
  std::atomic<int> began{0};
  std::atomic<int> met{0};
  runtime.add(Workflow("fan", [&](Step& step, const json&) -> json {
    for (int i = 0; i < 20; ++i) step.run("quick", [i] { return i; });
    std::vector<int> items(kWidth);
    step.map("meet", items, [&](int) {
      ++began;
      if (within(10s, [&] { return began.load() >= kWidth; })) ++met;
      return 0;
    });
    return met.load();
  }));
  const std::string id = runtime.start("fan");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == kWidth);
}

TEST_CASE(
    "a run sleeping in place wakes on time while another run's long fan-out commits (on each "
    "store)") {
  if (!runs_on_fibers()) return;
  // The fan-out's bodies end faster than their entries commit, for far longer than the nap, so
  // the loop always finds entries to commit; it must still wake the run whose nap is over.
  // PostgreSQL commits take longer: a tenth of the items last as long there (seconds).
  const int kItems = test::on_postgres() ? 4000 : 40000;
  test::TempDir dir;
  Runtime runtime(
      {.database = test::database(dir, "db"), .threads = 4, .replay = Replay::on_recovery});
  std::atomic<bool> napper_woke{false};
  std::atomic<bool> woke_before_fanout_ended{false};
  runtime.add(Workflow("fanout", [&](Step& step, const json&) -> json {
    std::vector<int> items(kItems);
    step.map("item", items, [](int) { return 0; });
    woke_before_fanout_ended = napper_woke.load();
    return true;
  }));
  runtime.add(Workflow("napper", [&](Step& step, const json&) -> json {
    step.sleep("nap", 20ms);  // waited out in place (under resident_sleep)
    napper_woke = true;
    return true;
  }));
  runtime.start("fanout");
  runtime.start("napper");
  runtime.run_until_idle();
  CHECK(woke_before_fanout_ended.load());
}

// A run's fiber takes a stack kept from an ended one (no mmap, guard page or fresh page faults
// per run), and no more are kept than a loop holds runs at once.
TEST_CASE("the fiber stacks of ended runs are kept for the next runs, at most 64") {
  test::TempDir dir;
  Runtime runtime({.database = dir.file("stacks.db"), .log_level = LogLevel::off});
  runtime.add(Workflow(
      "one", [](Step& step, const json&) -> json { return step.run("a", [] { return 1; }); }));
  for (int i = 0; i < 200; ++i) runtime.start("one");
  CHECK(runtime.run_until_idle() >= 200);
  const std::size_t kept = detail::FiberScheduler::kept_stacks();
  if (detail::FiberScheduler::keeps_stacks()) {
    CHECK(kept >= 1);
    CHECK(kept <= 64);
  } else {
    CHECK(kept == 0);
  }
}
