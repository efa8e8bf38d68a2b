#pragma once
/// \file
/// The test kit: run workflows in unit tests against an in-memory database and a virtual clock.
/// Link durable::testing; it works with any test framework.

#include <chrono>
#include <durable/durable.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace durable::testing {

/// What TestRuntime::run() and the calls that drive runs on report of one run.
struct RunResult {
  RunInfo info;                       ///< the run as it then is (terminal, or blocked)
  std::vector<std::string> executed;  ///< the step bodies that ran, by journal key, in order
  int invocations = 0;                ///< times the workflow function was entered
};

/// A Runtime on an in-memory database with a virtual clock. Sleeps, retry backoffs and delayed
/// starts pass at once: run() drives a run until it is completed, failed or cancelled, or
/// blocked waiting for an event or a child that only the test can bring (send_event, advance).
/// The clock starts at the real time of construction and moves only when the kit moves it.
///
/// Not thread-safe: drive it from one thread (step bodies still run on the step threads).
class TestRuntime {
 public:
  explicit TestRuntime(RuntimeOptions opts = {});
  ~TestRuntime();
  TestRuntime(const TestRuntime&) = delete;
  TestRuntime& operator=(const TestRuntime&) = delete;

  void add(Workflow wf);
  /// From now on the step with this journal key ("charge", "charge#2", "outer/inner") returns
  /// `output` without its body running, in every run.
  void mock(std::string_view step_id, json output);
  /// The body of this step throws durable::Error(message) on its first `times` attempts (-1:
  /// on every attempt), counted per run; the retry policy applies as for a real failure.
  void fail(std::string_view step_id, std::string message, int times = -1);
  /// Starts a run and drives it to a terminal or blocked state.
  RunResult run(std::string_view workflow, json input = json::object(), StartOptions opts = {});
  /// The run as it now is, with the bodies it ran so far.
  RunResult result(std::string_view run_id) const;
  /// Both deliver, then drive every affected run on to a terminal or blocked state.
  void send_event(std::string_view name, json data = json::object());
  /// Moves the virtual clock (event timeouts, schedules, delayed work then come due).
  void advance(std::chrono::milliseconds d);
  /// The virtual time now.
  Clock::time_point now() const;
  /// The runtime underneath: get, list, steps, cancel, retry, schedule, ...
  Runtime& runtime();

 private:
  struct State;
  void drive();
  std::unique_ptr<State> state_;
};

}  // namespace durable::testing
