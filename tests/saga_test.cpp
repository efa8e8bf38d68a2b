// SPDX-License-Identifier: Apache-2.0
// durable::Saga: steps that register their undos, run last first by compensate(), each once.

#include <doctest/doctest.h>

#include <algorithm>
#include <durable/saga.hpp>
#include <durable/testing.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

// What the undo bodies did, per run: "undo KEY(RESULT)" lines in the order they ran.
struct Effects {
  std::mutex mutex;
  std::map<std::string, std::vector<std::string>> lines;
  void add(const std::string& run, std::string line) {
    std::lock_guard lock(mutex);
    lines[run].push_back(std::move(line));
  }
  std::vector<std::string> of(const std::string& run) {
    std::lock_guard lock(mutex);
    return lines[run];
  }
};

// Books a trip: a hotel (its result a booking number), a flight (void) and a car that cannot be
// had, whose failure is compensated. Returns what the undos were given.
Workflow trip(std::shared_ptr<Effects> effects) {
  return Workflow("trip", [effects](Step& step, const json&) -> json {
    const std::string run(step.run_id());
    Saga saga(step);
    try {
      saga.run(
          "hotel", [] { return 17; },
          [=](const int& booking) { effects->add(run, "undo hotel " + std::to_string(booking)); });
      saga.run(
          "flight", [] {}, [=] { effects->add(run, "undo flight"); });
      step.sleep("think", 1min);  // another boundary between steps
      saga.run(
          "car", []() -> int { throw NonRetryableError("no car left"); },
          [=](int) { effects->add(run, "undo car"); });
    } catch (const StepFailed&) {
      saga.compensate();
      return "compensated";
    }
    return "booked";
  });
}

}  // namespace

TEST_CASE("compensate runs the undos last first, each with its step's result, as steps") {
  auto effects = std::make_shared<Effects>();
  testing::TestRuntime t;
  t.add(trip(effects));
  const testing::RunResult result = t.run("trip");
  CHECK(result.info.status == Status::completed);
  CHECK(result.info.output == "compensated");
  const std::string id = result.info.id;
  // The failed step registered nothing; the others are undone in reverse order.
  CHECK(effects->of(id) == std::vector<std::string>{"undo flight", "undo hotel 17"});
  std::vector<std::string> keys;
  for (const StepInfo& s : t.runtime().steps(id)) keys.push_back(s.id);
  CHECK(keys ==
        std::vector<std::string>{"hotel", "flight", "think", "car", "undo:flight", "undo:hotel"});
  // Replayed after every step (and here driven to its end): each undo ran once.
  CHECK(std::count(result.executed.begin(), result.executed.end(), "undo:hotel") == 1);
  CHECK(result.invocations > 1);
}

TEST_CASE("compensate a second time undoes only steps run since, and a failed undo is retried") {
  auto effects = std::make_shared<Effects>();
  auto tries = std::make_shared<int>(0);
  testing::TestRuntime t;
  t.add(Workflow("twice", [effects, tries](Step& step, const json&) -> json {
    const std::string run(step.run_id());
    Saga saga(step);
    saga.run(
        "a", [] { return 1; }, [=](int a) { effects->add(run, "undo a " + std::to_string(a)); });
    saga.compensate();
    const std::size_t left = saga.pending();
    saga.compensate();  // nothing left to undo
    saga.run(
        "b", [] { return 2; },
        [=] {
          if (++*tries < 2) throw std::runtime_error("refund service down");
          effects->add(run, "undo b");
        });
    saga.compensate({.retry = test::quick_retries(3)});
    return left;
  }));
  const testing::RunResult result = t.run("twice");
  CHECK(result.info.status == Status::completed);
  CHECK(result.info.output == 0);
  CHECK(effects->of(result.info.id) == std::vector<std::string>{"undo a 1", "undo b"});
  CHECK(*tries == 2);
}

TEST_CASE("an undo that fails for good does not stop the others, and compensate throws it after") {
  auto effects = std::make_shared<Effects>();
  testing::TestRuntime t;
  t.add(Workflow("stuck", [effects](Step& step, const json&) -> json {
    const std::string run(step.run_id());
    Saga saga(step);
    saga.run(
        "a", [] { return 1; }, [=] { effects->add(run, "undo a"); });
    saga.run(
        "b", [] { return 2; }, [] { throw NonRetryableError("cannot undo b"); });
    saga.compensate();
    return true;
  }));
  const testing::RunResult result = t.run("stuck");
  CHECK(result.info.status == Status::failed);
  REQUIRE(result.info.error);
  CHECK(test::has(result.info.error->message, "cannot undo b"));
  CHECK(effects->of(result.info.id) == std::vector<std::string>{"undo a"});
}

TEST_CASE("crash_sweep: each undo runs exactly once, whatever boundary the crash lands on") {
  auto effects = std::make_shared<Effects>();
  const testing::CrashSweep sweep = testing::crash_sweep(trip(effects));
  INFO(sweep.report());
  CHECK(sweep.expected.info.output == "compensated");
  CHECK(sweep.ok());
  REQUIRE(sweep.cases.size() >= 8);  // hotel, flight, car, and the two undos: before and after
  for (const testing::CrashCase& c : sweep.cases) {
    CAPTURE(c.step);
    CAPTURE(c.before_commit);
    // A body runs again only when the crash struck after it ran and before its commit.
    for (const std::string& key : c.ran_again) CHECK((key == c.step && c.before_commit));
  }
  // Every run (the crash-free one and one per case) ended with both undos done, in order, each
  // once; an undo's effect twice only in a run whose crash struck between that undo's body and
  // its commit, and so exactly as many runs as there are such cases.
  const std::vector<std::string> undos{"undo flight", "undo hotel 17"};
  std::size_t doubled = 0;
  for (const auto& entry : effects->lines) {
    CAPTURE(entry.first);
    CAPTURE(entry.second);
    if (entry.second == undos) continue;
    const bool first_twice = entry.second == std::vector<std::string>{undos[0], undos[0], undos[1]};
    const bool second_twice =
        entry.second == std::vector<std::string>{undos[0], undos[1], undos[1]};
    CHECK((first_twice || second_twice));
    ++doubled;
  }
  const auto crashed_in_undo = std::count_if(
      sweep.cases.begin(), sweep.cases.end(),
      [](const testing::CrashCase& c) { return c.before_commit && c.step.rfind("undo:", 0) == 0; });
  CHECK(crashed_in_undo == 2);
  CHECK(doubled == static_cast<std::size_t>(crashed_in_undo));
  CHECK(effects->lines.size() == sweep.cases.size() + 1);
}
