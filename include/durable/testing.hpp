// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The test kit: run workflows in unit tests against an in-memory database and a virtual clock.
/// Link durable::testing; it works with any test framework.

#include <chrono>
#include <durable/durable.hpp>
#include <memory>
#include <optional>
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

/// How TestRuntime::mock treats a mock that no step matches.
struct MockOptions {
  /// false (the default): once the kit's runs have all ended, a mock whose journal key no step
  /// of theirs reached is an error (a misnamed mock would let the real body run). true: the
  /// mock may go unused, for a step on a branch this test does not take.
  bool optional = false;
};

/// A Runtime on an in-memory database with a virtual clock. Sleeps, retry backoffs and delayed
/// starts pass at once: run() drives a run until it is completed, failed or cancelled, or
/// blocked waiting for an event or a child that only the test can bring (send_event, advance).
/// The clock starts at the real time of construction and moves only when the kit moves it.
///
/// The runtime's log lines do not go to stderr (a test's failures are mostly on purpose): logs()
/// keeps them, a log_sink in the options receives them too, and the environment variable
/// DURABLE_TEST_LOG=1 writes them to stderr as well.
///
/// Not thread-safe: drive it from one thread (step bodies still run on the step threads).
class TestRuntime {
 public:
  explicit TestRuntime(RuntimeOptions opts = {});
  ~TestRuntime();
  TestRuntime(const TestRuntime&) = delete;
  TestRuntime& operator=(const TestRuntime&) = delete;

  void add(Workflow wf);
  /// From now on the step with this journal key ("charge", "charge#2", "outer/inner",
  /// "fetch[0]") returns `output` without its body running, in every run. A mock that no step of
  /// any run has reached once no run is in flight (each has completed, failed or was cancelled)
  /// makes run(), send_event() or advance() throw Error naming it, with the steps the runs did
  /// reach; opts.optional allows it. A step whose result type `output` does not convert to
  /// fails its run with an Error saying so.
  void mock(std::string_view step_id, json output, MockOptions opts = {});
  /// The body of this step throws durable::Error(message) on its first `times` attempts (-1:
  /// on every attempt), counted per run; the retry policy applies as for a real failure.
  void fail(std::string_view step_id, std::string message, int times = -1);
  /// Starts a run and drives it to a terminal or blocked state. Throws Error for a mock that no
  /// step matched (see mock()), once the run has ended.
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
  /// The runtime's log lines so far (at the options' log_level and above), one JSON object each.
  std::vector<std::string> logs() const;
  /// Writes the database as it now is to a file, replacing one there once the copy is complete:
  /// a recording of its runs for replay() (a golden journal kept with the tests).
  void save(const std::string& path) const;

 private:
  struct State;
  void drive();
  void check_mocks();
  std::unique_ptr<State> state_;
};

/// One simulated crash of crash_sweep(): where it struck and what the restart made of it.
struct CrashCase {
  int body = 0;        ///< the crash-free run's n-th step body (0-based) it struck at
  std::string step;    ///< that body's journal key
  bool before_commit;  ///< true: after the body ran, before its result was journaled; false: just
                       ///< after it was journaled, before anything else ran
  Status status = Status::pending;  ///< the run's status once restarted and driven to the end
  json output;                      ///< its output (or null)
  std::optional<ErrorInfo> error;   ///< its error, if it failed
  bool matches = false;             ///< status and output equal the crash-free run's
  /// Step bodies that ran more often than in the crash-free run, across crash and restart:
  /// those whose effects must be safe to repeat. In natural order: "fetch[2]" before
  /// "fetch[10]".
  std::vector<std::string> ran_again;
};

/// What crash_sweep() found.
struct CrashSweep {
  RunResult expected;  ///< the crash-free run
  std::vector<CrashCase> cases;
  bool ok() const;             ///< every restarted run matched the crash-free one
  std::string report() const;  ///< one line per case, for a test's failure message
};

/// Runs the workflow once without a crash, then once per step-body boundary with a crash there
/// (after the body ran and before its commit, and just after its commit): each time the runtime
/// stops writing as a killed process would, a new runtime opens the same database file and
/// drives the run to its end, and the outcome is compared with the crash-free run's. Sleeps and
/// backoffs pass at once, as in TestRuntime; every body must give the same result each time it
/// runs for the comparison to hold. A failed attempt is a boundary like a successful one. No
/// event is sent: a run that waits for one is compared as it waits. Files go to a temporary
/// directory, removed afterwards. Log lines go to opts.log_sink if set, else nowhere (to stderr
/// too with DURABLE_TEST_LOG=1).
CrashSweep crash_sweep(const Workflow& wf, json input = json::object(), RuntimeOptions opts = {});

/// The determinism lint: runs the workflow once as TestRuntime::run() does (bodies run, virtual
/// time), then replays the run twice from its journal with no body run, as the runtime replays
/// it after each step and after a restart, and returns the run. Throws NonDeterminism when the
/// run itself met one, or a replay parts from the journal (the checks of replay() below): code
/// outside steps that behaves differently from one invocation to the next (a clock read, a
/// random number, a counter kept across calls, the order of an unordered container), naming
/// the step and the line of the call where it parted. A replay that happens to take the same
/// path finds nothing: a lint, not a proof.
RunResult check_determinism(const Workflow& wf, json input = json::object(),
                            RuntimeOptions opts = {});

/// Runs the current code of `wf` against run `run_id` as recorded in the database file, running
/// no step body and writing nothing to the file or beside it. Throws NonDeterminism naming the
/// first divergence:
/// - a call that finds the journal holding another kind of step under its id;
/// - a call the journal does not hold while a journaled step was not called (an inserted,
///   renamed or removed step), or the workflow ending without calling one;
/// - for a run recorded completed or failed: a call past its journal, or another output or
///   error than the recorded one;
/// - for a run recorded in progress (pending, sleeping, waiting, running): the workflow failing
///   where no journaled step failed (an input or a result that no longer converts).
/// A run recorded in progress or cancelled may go on past its journal. Steps are matched by id and
/// use count, as the runtime matches them, so a change in the order of steps that keep their ids is
/// not a divergence. Throws Error for a missing file, a file that is not a durable database, an
/// unknown run, or a run of another workflow.
void replay(const Workflow& wf, const std::string& database, std::string_view run_id);

/// replay() of every run of `wf` in the database file, oldest first; returns how many. Throws
/// Error when the file holds none (a golden test that checks nothing must not pass).
std::size_t replay_all(const Workflow& wf, const std::string& database);

/// replay() and replay_all() of a database whose payloads are encoded: `options.codec` and
/// `options.encryption_key_file` decode them (as the runtime that wrote it had them); its other
/// fields are not used. Throws Error for a payload stored under another codec, or a bad key file.
void replay(const Workflow& wf, const std::string& database, std::string_view run_id,
            const RuntimeOptions& options);
std::size_t replay_all(const Workflow& wf, const std::string& database,
                       const RuntimeOptions& options);

}  // namespace durable::testing
