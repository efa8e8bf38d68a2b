// The test kit: a Runtime on ":memory:" whose clock the kit moves, and a body hook for mocks,
// injected failures and the record of the bodies that ran.

#include <atomic>
#include <durable/testing.hpp>
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

// Executes what is due, then moves the clock to the next sleep, backoff or delayed start and
// goes on, until every run is terminal or waits for something only the test brings (an event,
// a child that is itself blocked, a schedule's next time).
void TestRuntime::drive() {
  Runtime& runtime = state_->runtime;
  for (;;) {
    runtime.run_until_idle();
    std::optional<Clock::time_point> next;
    for (const Status status : {Status::sleeping, Status::pending}) {
      for (const RunInfo& run : runtime.list({.status = status, .limit = SIZE_MAX})) {
        if (run.wake_at && (!next || *run.wake_at < *next)) next = run.wake_at;
      }
    }
    // Nothing ahead, or a run due now that no claim took (a workflow not added, or at its
    // concurrency limit): blocked until the test does something.
    if (!next || *next <= now()) return;
    state_->ticks = next->time_since_epoch().count();
  }
}

}  // namespace durable::testing
