// SPDX-License-Identifier: Apache-2.0
// The test kit: a Runtime on ":memory:" whose clock the kit moves, and a body hook for mocks,
// injected failures and the record of the bodies that ran.

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <durable/testing.hpp>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "errors_internal.hpp"
#include "replay_check.hpp"
#include "runtime_core.hpp"
#include "serialization.hpp"

namespace durable::testing {

using detail::edit_distance;

namespace {

RuntimeOptions in_memory(RuntimeOptions opts) {
  opts.database = ":memory:";
  // Under on_recovery a short sleep would be waited out in real time: evict instead, so that it
  // passes at once like every other sleep.
  opts.resident_sleep = std::chrono::milliseconds(0);
  return opts;
}

// A test's failed runs are mostly on purpose: the kit keeps the runtime's log lines off stderr,
// unless DURABLE_TEST_LOG is set (to anything but "" or "0") to see them.
bool log_to_stderr() {
  const char* value = std::getenv("DURABLE_TEST_LOG");
  return value != nullptr && *value != '\0' && std::string_view(value) != "0";
}

// The sink of a kit's runtime: `keep` (if any), then the user's sink (if any), then stderr when
// DURABLE_TEST_LOG asks for it.
RuntimeOptions quiet(RuntimeOptions opts, std::function<void(std::string_view)> keep = {}) {
  auto user = std::move(opts.log_sink);
  opts.log_sink = [keep = std::move(keep), user = std::move(user),
                   echo = log_to_stderr()](std::string_view line) {
    if (keep) keep(line);
    if (user) user(line);
    if (echo) std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  };
  return opts;
}

// Compares the runs of digits in step keys as numbers: "fetch[2]" before "fetch[10]", "a#2"
// before "a#10". Keys equal that way (leading zeros) fall back to plain order.
bool natural_less(std::string_view a, std::string_view b) {
  const auto digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      const std::size_t a_end = std::find_if_not(a.begin() + i, a.end(), digit) - a.begin();
      const std::size_t b_end = std::find_if_not(b.begin() + j, b.end(), digit) - b.begin();
      while (i + 1 < a_end && a[i] == '0') ++i;
      while (j + 1 < b_end && b[j] == '0') ++j;
      const std::string_view x = a.substr(i, a_end - i);
      const std::string_view y = b.substr(j, b_end - j);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = a_end;
      j = b_end;
    } else if (a[i] != b[j]) {
      return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
    } else {
      ++i;
      ++j;
    }
  }
  if (a.size() - i != b.size() - j) return a.size() - i < b.size() - j;
  return a < b;
}

// The reached key a misnamed mock most likely meant: the nearest by edit distance among those
// that contain it, are contained in it, or differ by a few characters.
std::optional<std::string> closest_key(const std::string& id,
                                       const std::vector<std::string>& reached) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const std::string& key : reached) {
    const std::size_t distance = edit_distance(id, key);
    const bool related = key.find(id) != std::string::npos || id.find(key) != std::string::npos;
    if (!related && distance > std::max<std::size_t>(2, id.size() / 3)) continue;
    if (!best || distance < best_distance) {
      best = key;
      best_distance = distance;
    }
  }
  return best;
}

std::string unused_mocks_message(const std::vector<std::string>& unused,
                                 const std::vector<std::string>& reached) {
  std::string text = "TestRuntime: ";
  for (std::size_t n = 0; n < unused.size(); ++n) {
    if (n > 0) text += n + 1 == unused.size() ? " and " : ", ";
    text += "mock('" + unused[n] + "')";
    if (const auto guess = closest_key(unused[n], reached)) {
      text += " (did you mean '" + *guess + "'?)";
    }
  }
  text += unused.size() == 1 ? " matched no step: the runs ended without reaching its journal key"
                             : " matched no step: the runs ended without reaching their journal "
                               "keys";
  text += ", and the real body of a step whose mock is misnamed runs. ";
  constexpr std::size_t kListed = 30;
  if (reached.empty()) {
    text += "The runs reached no step body. ";
  } else {
    text += "The steps the runs reached: ";
    for (std::size_t n = 0; n < reached.size() && n < kListed; ++n) {
      text += (n > 0 ? ", " : "") + reached[n];
    }
    if (reached.size() > kListed) {
      text += " and " + std::to_string(reached.size() - kListed) + " more";
    }
    text += ". ";
  }
  text +=
      "A mock names a journal key (\"charge\", \"charge#2\", \"outer/inner\", "
      "\"fetch[0]\"); one for a step a test may not reach (a branch it does not take) takes "
      "MockOptions{.optional = true}";
  return text;
}

}  // namespace

struct TestRuntime::State {
  explicit State(RuntimeOptions opts)
      : runtime(in_memory(quiet(std::move(opts), [this](std::string_view line) {
          std::lock_guard lock(log_mutex);
          logs.emplace_back(line);
        }))) {}

  // Before the runtime: its sink writes here from the runtime's threads.
  mutable std::mutex log_mutex;
  std::vector<std::string> logs;

  Runtime runtime;
  // The virtual clock, from the real time of construction.
  std::shared_ptr<detail::ManualClockEnv> clock =
      std::make_shared<detail::ManualClockEnv>(detail::Env::system().now());

  struct Failure {
    std::string message;
    int times = -1;
  };
  mutable std::mutex mutex;  // the members below; bodies run on the step threads
  std::map<std::string, std::pair<json, MockOptions>, std::less<>> mocks;
  std::map<std::string, Failure, std::less<>> failures;
  std::map<std::pair<std::string, std::string>, int> failed;  // (run, key): injected so far
  std::map<std::string, std::vector<std::string>, std::less<>> executed;
  // The keys of the bodies the runs called, mocked or not, each once in the order first called:
  // a mock's key among them names a real step.
  std::vector<std::string> reached;
  std::set<std::string, std::less<>> reached_set;
  std::set<std::string, std::less<>> reported;                   // mocks already reported unused
  std::set<std::pair<std::string, std::string>> mocked_results;  // (run, key) a mock gave

  json call(const std::string& run_id, const std::string& key, const detail::Body& body) {
    {
      std::lock_guard lock(mutex);
      if (reached_set.insert(key).second) reached.push_back(key);
      if (const auto mock = mocks.find(key); mock != mocks.end()) {
        mocked_results.emplace(run_id, key);
        return mock->second.first;
      }
      executed[run_id].push_back(key);
      if (const auto failure = failures.find(key); failure != failures.end()) {
        int& so_far = failed[{run_id, key}];
        if (failure->second.times < 0 || so_far < failure->second.times) {
          ++so_far;
          // The application's own failure, as TestRuntime::fail was given it: an Error with
          // no code of durable's, as the step body would throw it.
          const Error injected(failure->second.message);
          throw injected;
        }
      }
    }
    return body();
  }

  // A mock's value that does not convert is the test's mistake, not a journal written by older
  // code: say so instead of the engine's advice for changed code.
  void not_converted(const std::string& run_id, const std::string& key, const json& value,
                     std::string_view type, const std::exception& error) {
    {
      std::lock_guard lock(mutex);
      if (!mocked_results.contains({run_id, key})) return;
    }
    throw Error(errc::type_mismatch,
                "step '" + key + "' of run " + run_id + ": the value of mock('" + key + "'), " +
                    detail::shortened_dump(value) + " (JSON " + value.type_name() +
                    "), does not convert to the step's result type " + std::string(type) + ": " +
                    error.what() + ". Give mock('" + key + "') a value that converts to " +
                    std::string(type));
  }
};

TestRuntime::TestRuntime(RuntimeOptions opts) : state_(std::make_unique<State>(std::move(opts))) {
  detail::RuntimeCore& core = detail::RuntimeAccess::core(state_->runtime);
  State* state = state_.get();
  core.set_env(state->clock);
  core.set_body_hook([state](const std::string& run_id, const std::string& key, int,
                             const detail::Body& body) { return state->call(run_id, key, body); });
  core.set_conversion_hook([state](const std::string& run_id, const std::string& key,
                                   const json& value, std::string_view type,
                                   const std::exception& error) {
    state->not_converted(run_id, key, value, type, error);
  });
}

TestRuntime::~TestRuntime() = default;

void TestRuntime::add(Workflow wf) { state_->runtime.add(std::move(wf)); }

void TestRuntime::mock(std::string_view step_id, json output, MockOptions opts) {
  std::lock_guard lock(state_->mutex);
  state_->mocks.insert_or_assign(std::string(step_id), std::pair{std::move(output), opts});
  state_->reported.erase(std::string(step_id));
}

void TestRuntime::fail(std::string_view step_id, std::string message, int times) {
  if (times == 0 || times < -1) {
    throw Error(errc::invalid_argument, "TestRuntime::fail('" + std::string(step_id) +
                                            "'): times must be -1 (always) or 1 or more, not " +
                                            std::to_string(times));
  }
  std::lock_guard lock(state_->mutex);
  state_->failures.insert_or_assign(std::string(step_id),
                                    State::Failure{std::move(message), times});
}

RunResult TestRuntime::run(std::string_view workflow, json input, StartOptions opts) {
  const std::string id = state_->runtime.start(workflow, std::move(input), std::move(opts));
  drive();
  check_mocks();
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
  check_mocks();
}

void TestRuntime::advance(std::chrono::milliseconds d) {
  if (d.count() < 0)
    throw Error(errc::invalid_argument, "TestRuntime::advance: the clock does not go back");
  state_->clock->advance(std::chrono::duration_cast<Clock::duration>(d));
  drive();
  check_mocks();
}

Clock::time_point TestRuntime::now() const { return state_->clock->now(); }

Runtime& TestRuntime::runtime() { return state_->runtime; }

std::vector<std::string> TestRuntime::logs() const {
  std::lock_guard lock(state_->log_mutex);
  return state_->logs;
}

// Checked once no run is in flight, so that a mock of a step after an event wait or a sleep is
// not reported while the run has yet to get there. Each unused mock is reported once.
void TestRuntime::check_mocks() {
  if (state_->runtime.list({.limit = 1}).empty()) return;  // no run yet: advance() before run()
  for (const Status status :
       {Status::pending, Status::running, Status::sleeping, Status::waiting}) {
    if (!state_->runtime.list({.status = status, .limit = 1}).empty()) return;
  }
  std::lock_guard lock(state_->mutex);
  std::vector<std::string> unused;
  for (const auto& [key, mock] : state_->mocks) {
    if (mock.second.optional || state_->reached_set.contains(key)) continue;
    if (state_->reported.insert(key).second) unused.push_back(key);
  }
  if (!unused.empty()) throw Error(errc::misuse, unused_mocks_message(unused, state_->reached));
}

void TestRuntime::save(const std::string& path) const {
  detail::RuntimeAccess::core(state_->runtime).copy_database(path);
}

namespace {

// Executes what is due, then moves the clock to the next sleep, backoff or delayed start and
// goes on, until every run is terminal or waits for something only the test brings (an event,
// a child that is itself blocked, a schedule's next time).
void drive_runs(Runtime& runtime, detail::ManualClockEnv& clock) {
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
    if (!next || *next <= clock.now()) return;
    clock.set(*next);
  }
}

// A fresh directory under the system's temporary one, removed with its files at the end.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "durable-testing-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr)
      throw Error(errc::database, "durable::testing: cannot make a temp dir");
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
  SweepRuntime(RuntimeOptions opts, const std::shared_ptr<detail::ManualClockEnv>& clock)
      : runtime(std::move(opts)) {
    core().set_env(clock);
  }
  detail::RuntimeCore& core() { return detail::RuntimeAccess::core(runtime); }
  std::mutex mutex;
  std::vector<std::string> executed;
  Runtime runtime;  // last: the bodies still in flight as it closes use the members above
};

}  // namespace

void TestRuntime::drive() { drive_runs(state_->runtime, *state_->clock); }

namespace {

// Where a case of the sweep crashes: as the nth body of step `key` finishes here (an outer step
// finishes after its nested ones), whatever order parallel bodies start and end in; before
// that body's commit, or just after it.
struct CrashPoint {
  std::string key;
  int nth = 0;
  bool before_commit = true;
};

// The crash of one case: a body hook and a commit hook that halt the runtime at the point, as a
// killed process stops writing. Declared before the runtime its hooks run in, so that it
// outlives the bodies still in flight as that runtime closes.
class Crasher {
 public:
  explicit Crasher(CrashPoint point) : point_(std::move(point)) {}

  void arm(SweepRuntime& runtime) {
    runtime_ = &runtime;
    runtime.core().set_body_hook(
        [this](const std::string&, const std::string& key, int, const detail::Body& body) {
          return run(key, body);
        });
    runtime.core().set_commit_hook(
        [this](const std::string&, const std::vector<detail::EntryWrite>& entries) {
          committed(entries);
        });
  }

 private:
  json run(const std::string& key, const detail::Body& body) {
    if (crashed_) return json();  // a body still in flight dies with the process
    {
      std::lock_guard lock(runtime_->mutex);
      runtime_->executed.push_back(key);
    }
    // A failed attempt is a body of the sweep too: count it, then let it throw.
    std::exception_ptr failure;
    json out;
    try {
      out = body();
    } catch (...) {
      failure = std::current_exception();
    }
    if (finished(key)) {
      finished_point_ = true;
      if (point_.before_commit) crash();
    }
    if (failure) std::rethrow_exception(failure);
    return out;
  }

  // Whether the body that finished is the point's.
  bool finished(const std::string& key) {
    if (key != point_.key) return false;
    std::lock_guard lock(runtime_->mutex);
    return ++finished_[key] == point_.nth;
  }

  void committed(const std::vector<detail::EntryWrite>& entries) {
    if (point_.before_commit || crashed_ || !finished_point_) return;
    for (const detail::EntryWrite& w : entries) {
      if (w.entry.key == point_.key) crash();
    }
  }

  void crash() {
    crashed_ = true;
    runtime_->core().halt();
  }

  CrashPoint point_;
  SweepRuntime* runtime_ = nullptr;
  std::map<std::string, int> finished_;  // bodies finished, per key
  std::atomic<bool> finished_point_{false};
  std::atomic<bool> crashed_{false};
};

// The first life of a case's run on `file`: started and driven until the crash. Returns the
// run's id; the bodies it ran go to `executed`.
std::string run_until_crash(const Workflow& wf, const json& input, const RuntimeOptions& file,
                            const std::shared_ptr<detail::ManualClockEnv>& clock, CrashPoint point,
                            std::vector<std::string>& executed) {
  Crasher crasher(std::move(point));
  SweepRuntime first(file, clock);
  first.runtime.add(wf);
  crasher.arm(first);
  const std::string id = first.runtime.start(wf.name(), input);
  drive_runs(first.runtime, *clock);
  executed = first.executed;
  return id;
}

// The restart: a new runtime on the file, driven until the run ends. Returns the run as it
// ended; the bodies it ran go to `executed`.
RunInfo restart(const Workflow& wf, const RuntimeOptions& file,
                const std::shared_ptr<detail::ManualClockEnv>& clock, const std::string& id,
                std::vector<std::string>& executed) {
  SweepRuntime second(file, clock);
  second.runtime.add(wf);
  second.core().set_body_hook(
      [&](const std::string&, const std::string& key, int, const detail::Body& body) {
        {
          std::lock_guard lock(second.mutex);
          second.executed.push_back(key);
        }
        return body();
      });
  drive_runs(second.runtime, *clock);
  executed = second.executed;
  return second.runtime.get(id);
}

// The bodies that ran more often, across crash and restart, than in the crash-free run.
std::vector<std::string> ran_again(const std::vector<std::string>& expected,
                                   const std::vector<std::string>& first,
                                   const std::vector<std::string>& second) {
  std::map<std::string, int> baseline, total;
  for (const std::string& key : expected) ++baseline[key];
  for (const std::vector<std::string>* bodies : {&first, &second}) {
    for (const std::string& key : *bodies) ++total[key];
  }
  std::vector<std::string> again;
  for (const auto& [key, n] : total) {
    if (n > baseline[key]) again.push_back(key);
  }
  std::sort(again.begin(), again.end(), natural_less);
  return again;
}

// One case of the sweep, on a fresh file: the crash at body k, then the restart.
CrashCase crash_case(const Workflow& wf, const json& input, const RuntimeOptions& opts,
                     const RunResult& expected, std::size_t k, bool before_commit) {
  const std::vector<std::string>& bodies = expected.executed;
  ScratchDir dir;
  RuntimeOptions file = quiet(opts);
  file.database = dir.file("sweep.db");
  const auto clock = std::make_shared<detail::ManualClockEnv>(detail::Env::system().now());
  // Body k is the n-th body of its step key in the crash-free run's list.
  const auto nth = static_cast<int>(std::count(bodies.begin(), bodies.begin() + k + 1, bodies[k]));
  std::vector<std::string> first, second;
  const std::string id =
      run_until_crash(wf, input, file, clock, {bodies[k], nth, before_commit}, first);
  // Once the dead runtime's lease has lapsed.
  clock->advance(std::chrono::duration_cast<Clock::duration>(opts.lease) + Clock::duration(1));
  const RunInfo after = restart(wf, file, clock, id, second);
  CrashCase c;
  c.body = static_cast<int>(k);
  c.step = bodies[k];
  c.before_commit = before_commit;
  c.status = after.status;
  c.output = after.output;
  c.error = after.error;
  c.matches = after.status == expected.info.status && after.output == expected.info.output;
  c.ran_again = ran_again(bodies, first, second);
  return c;
}

}  // namespace

CrashSweep crash_sweep(const Workflow& wf, json input, RuntimeOptions opts) {
  opts.resident_sleep = std::chrono::milliseconds(0);
  CrashSweep sweep;
  {
    TestRuntime clean(opts);  // quiet on its own
    clean.add(wf);
    sweep.expected = clean.run(wf.name(), input);
  }
  for (std::size_t k = 0; k < sweep.expected.executed.size(); ++k) {
    for (const bool before_commit : {true, false}) {
      sweep.cases.push_back(crash_case(wf, input, opts, sweep.expected, k, before_commit));
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

RunResult check_determinism(const Workflow& wf, json input, RuntimeOptions opts) {
  ScratchDir scratch;
  const std::string file = scratch.file("run.db");
  const auto payloads =
      std::make_shared<const detail::Payloads>(opts.codec, opts.encryption_key_file);
  RunResult result;
  {
    TestRuntime kit(std::move(opts));
    kit.add(wf);
    result = kit.run(wf.name(), std::move(input));
    kit.save(file);
  }
  const std::string lint = "check_determinism of workflow '" + wf.name() + "': ";
  if (result.info.error && result.info.error->type == "durable::NonDeterminism") {
    throw NonDeterminism(lint + "run " + result.info.id +
                         " failed: " + std::string(detail::without_id(result.info.error->message)));
  }
  const std::unique_ptr<detail::Store> copy = detail::open_store_read_only(file, payloads);
  const std::optional<detail::RecordedRun> run = copy->recorded_run(result.info.id);
  if (!run) detail::bug("check_determinism: the run it made is not in its copy");
  for (int replay = 1; replay <= 2; ++replay) {
    const std::optional<Divergence> divergence = detail::check_replay(wf, run->info, run->journal);
    if (!divergence) continue;
    throw NonDeterminism(lint + "replay " + std::to_string(replay) + " of run " + result.info.id +
                         " parts from its journal" +
                         (divergence->step.empty() ? "" : " at step '" + divergence->step + "'") +
                         (divergence->where.empty() ? "" : " (" + divergence->where + ")") + ": " +
                         std::string(detail::without_id(divergence->message)));
  }
  return result;
}

}  // namespace durable::testing
