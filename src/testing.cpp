// SPDX-License-Identifier: Apache-2.0
// The test kit: a Runtime on ":memory:" whose clock the kit moves, and a body hook for mocks,
// injected failures and the record of the bodies that ran.

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <durable/testing.hpp>
#include <filesystem>
#include <map>
#include <mutex>

#include "runtime_core.hpp"

namespace durable::testing {

namespace {

RuntimeOptions in_memory(RuntimeOptions opts) {
  opts.database = ":memory:";
  // Under on_recovery a short sleep would be waited out in real time: evict instead, so that it
  // passes at once like every other sleep.
  opts.resident_sleep = std::chrono::milliseconds(0);
  return opts;
}

}  // namespace

struct TestRuntime::State {
  explicit State(RuntimeOptions opts) : runtime(in_memory(std::move(opts))) {}

  Runtime runtime;
  std::atomic<Clock::rep> ticks{Clock::now().time_since_epoch().count()};

  struct Failure {
    std::string message;
    int times = -1;
  };
  mutable std::mutex mutex;  // the maps below; bodies run on the step threads
  std::map<std::string, json, std::less<>> mocks;
  std::map<std::string, Failure, std::less<>> failures;
  std::map<std::pair<std::string, std::string>, int> failed;  // (run, key): injected so far
  std::map<std::string, std::vector<std::string>, std::less<>> executed;

  json call(const std::string& run_id, const std::string& key, const detail::Body& body) {
    {
      std::lock_guard lock(mutex);
      if (const auto mock = mocks.find(key); mock != mocks.end()) return mock->second;
      executed[run_id].push_back(key);
      if (const auto failure = failures.find(key); failure != failures.end()) {
        int& so_far = failed[{run_id, key}];
        if (failure->second.times < 0 || so_far < failure->second.times) {
          ++so_far;
          throw Error(failure->second.message);
        }
      }
    }
    return body();
  }
};

TestRuntime::TestRuntime(RuntimeOptions opts) : state_(std::make_unique<State>(std::move(opts))) {
  detail::RuntimeCore& core = detail::RuntimeAccess::core(state_->runtime);
  State* state = state_.get();
  core.set_clock([state] { return Clock::time_point(Clock::duration(state->ticks.load())); });
  core.set_body_hook([state](const std::string& run_id, const std::string& key, int,
                             const detail::Body& body) { return state->call(run_id, key, body); });
}

TestRuntime::~TestRuntime() = default;

void TestRuntime::add(Workflow wf) { state_->runtime.add(std::move(wf)); }

void TestRuntime::mock(std::string_view step_id, json output) {
  std::lock_guard lock(state_->mutex);
  state_->mocks.insert_or_assign(std::string(step_id), std::move(output));
}

void TestRuntime::fail(std::string_view step_id, std::string message, int times) {
  if (times == 0 || times < -1) {
    throw Error("TestRuntime::fail('" + std::string(step_id) +
                "'): times must be -1 (always) or 1 or more, not " + std::to_string(times));
  }
  std::lock_guard lock(state_->mutex);
  state_->failures.insert_or_assign(std::string(step_id),
                                    State::Failure{std::move(message), times});
}

RunResult TestRuntime::run(std::string_view workflow, json input, StartOptions opts) {
  const std::string id = state_->runtime.start(workflow, std::move(input), std::move(opts));
  drive();
  return result(id);
}

RunResult TestRuntime::result(std::string_view run_id) const {
  RunResult result;
  result.info = state_->runtime.get(run_id);
  result.invocations = result.info.invocations;
  std::lock_guard lock(state_->mutex);
  if (const auto it = state_->executed.find(run_id); it != state_->executed.end()) {
    result.executed = it->second;
  }
  return result;
}

void TestRuntime::send_event(std::string_view name, json data) {
  state_->runtime.send_event(name, std::move(data));
  drive();
}

void TestRuntime::advance(std::chrono::milliseconds d) {
  if (d.count() < 0) throw Error("TestRuntime::advance: the clock does not go back");
  state_->ticks += std::chrono::duration_cast<Clock::duration>(d).count();
  drive();
}

Clock::time_point TestRuntime::now() const {
  return Clock::time_point(Clock::duration(state_->ticks.load()));
}

Runtime& TestRuntime::runtime() { return state_->runtime; }

void TestRuntime::save(const std::string& path) const {
  detail::RuntimeAccess::core(state_->runtime).copy_database(path);
}

namespace {

// Executes what is due, then moves the clock to the next sleep, backoff or delayed start and
// goes on, until every run is terminal or waits for something only the test brings (an event,
// a child that is itself blocked, a schedule's next time).
void drive_runs(Runtime& runtime, std::atomic<Clock::rep>& ticks) {
  for (;;) {
    runtime.run_until_idle();
    std::optional<Clock::time_point> next;
    for (const Status status : {Status::sleeping, Status::pending}) {
      for (const RunInfo& run : runtime.list({.status = status, .limit = SIZE_MAX})) {
        if (run.wake_at && (!next || *run.wake_at < *next)) next = run.wake_at;
      }
    }
    // Nothing ahead, or a run due now that no claim took (a workflow not added, or at its
    // concurrency limit, or a crashed runtime): blocked until the test does something.
    const Clock::time_point now{Clock::duration(ticks.load())};
    if (!next || *next <= now) return;
    ticks = next->time_since_epoch().count();
  }
}

// A fresh directory under the system's temporary one, removed with its files at the end.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "durable-crash-sweep-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw Error("crash_sweep: cannot make a temp dir");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// One runtime of the sweep on the scratch file, with the shared virtual clock and a record of
// the bodies it ran.
struct SweepRuntime {
  SweepRuntime(RuntimeOptions opts, std::atomic<Clock::rep>& ticks) : runtime(std::move(opts)) {
    core().set_clock([&ticks] { return Clock::time_point(Clock::duration(ticks.load())); });
  }
  detail::RuntimeCore& core() { return detail::RuntimeAccess::core(runtime); }
  Runtime runtime;
  std::mutex mutex;
  std::vector<std::string> executed;
};

}  // namespace

void TestRuntime::drive() { drive_runs(state_->runtime, state_->ticks); }

CrashSweep crash_sweep(const Workflow& wf, json input, RuntimeOptions opts) {
  opts.resident_sleep = std::chrono::milliseconds(0);
  CrashSweep sweep;
  {
    TestRuntime clean(opts);
    clean.add(wf);
    sweep.expected = clean.run(wf.name(), input);
  }
  const std::vector<std::string>& bodies = sweep.expected.executed;
  std::map<std::string, int> baseline;
  for (const std::string& key : bodies) ++baseline[key];

  for (std::size_t k = 0; k < bodies.size(); ++k) {
    for (const bool before_commit : {true, false}) {
      ScratchDir dir;
      RuntimeOptions file = opts;
      file.database = dir.file("sweep.db");
      std::atomic<Clock::rep> ticks{Clock::now().time_since_epoch().count()};
      std::atomic<bool> crashed{false};
      std::string id;
      std::vector<std::string> executed;
      {
        // Body k is the n-th body of its step key in the crash-free run's list; the crash
        // strikes when that one finishes here (an outer step finishes after its nested ones),
        // whatever order parallel bodies start and end in.
        const auto nth =
            static_cast<int>(std::count(bodies.begin(), bodies.begin() + k + 1, bodies[k]));
        std::map<std::string, int> finished;  // per key; outlives the runtime using it
        std::atomic<bool> finished_k{false};
        SweepRuntime first(file, ticks);
        first.runtime.add(wf);
        first.core().set_body_hook(
            [&](const std::string&, const std::string& key, int, const detail::Body& body) -> json {
              if (crashed) return json();  // a body still in flight dies with the process
              {
                std::lock_guard lock(first.mutex);
                first.executed.push_back(key);
              }
              // A failed attempt is a body of the sweep too: count it, then let it throw.
              std::exception_ptr failure;
              json out;
              try {
                out = body();
              } catch (...) {
                failure = std::current_exception();
              }
              bool is_k = false;
              if (key == bodies[k]) {
                std::lock_guard lock(first.mutex);
                is_k = ++finished[key] == nth;
              }
              if (is_k) {
                finished_k = true;
                if (before_commit) {
                  crashed = true;
                  first.core().halt();
                }
              }
              if (failure) std::rethrow_exception(failure);
              return out;
            });
        first.core().set_commit_hook(
            [&](const std::string&, const std::vector<detail::EntryWrite>& entries) {
              if (before_commit || crashed || !finished_k) return;
              for (const detail::EntryWrite& w : entries) {
                if (w.entry.key == bodies[k]) {
                  crashed = true;
                  first.core().halt();
                }
              }
            });
        id = first.runtime.start(wf.name(), input);
        drive_runs(first.runtime, ticks);
        executed = first.executed;
      }
      // The restart: a new runtime on the file, once the dead runtime's lease has lapsed.
      ticks += std::chrono::duration_cast<Clock::duration>(opts.lease).count() + 1;
      SweepRuntime second(file, ticks);
      second.runtime.add(wf);
      second.core().set_body_hook(
          [&](const std::string&, const std::string& key, int, const detail::Body& body) {
            {
              std::lock_guard lock(second.mutex);
              second.executed.push_back(key);
            }
            return body();
          });
      drive_runs(second.runtime, ticks);
      const RunInfo after = second.runtime.get(id);

      CrashCase c;
      c.body = static_cast<int>(k);
      c.step = bodies[k];
      c.before_commit = before_commit;
      c.status = after.status;
      c.output = after.output;
      c.error = after.error;
      c.matches =
          after.status == sweep.expected.info.status && after.output == sweep.expected.info.output;
      std::map<std::string, int> total;
      for (const std::string& key : executed) ++total[key];
      for (const std::string& key : second.executed) ++total[key];
      for (const auto& [key, n] : total) {
        if (n > baseline[key]) c.ran_again.push_back(key);
      }
      sweep.cases.push_back(std::move(c));
    }
  }
  return sweep;
}

bool CrashSweep::ok() const {
  for (const CrashCase& c : cases) {
    if (!c.matches) return false;
  }
  return true;
}

std::string CrashSweep::report() const {
  std::string text = "crash-free run: " + std::string(to_string(expected.info.status)) + ", " +
                     expected.info.output.dump() + "\n";
  for (const CrashCase& c : cases) {
    text += (c.matches ? "  ok    " : "  DIFF  ") + std::string("crash ") +
            (c.before_commit ? "before the commit of '" : "after the commit of '") + c.step +
            "' (body " + std::to_string(c.body + 1) + "): " + std::string(to_string(c.status)) +
            ", " + c.output.dump();
    if (c.error) text += " (" + c.error->type + ": " + c.error->message + ")";
    if (!c.ran_again.empty()) {
      text += "; ran again:";
      for (const std::string& key : c.ran_again) text += " " + key;
    }
    text += "\n";
  }
  return text;
}

}  // namespace durable::testing
