// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Runtime's implementation: registered workflows, the store, and the loop that claims due
// runs and executes their invocations.

#include <atomic>
#include <condition_variable>
#include <durable/runtime.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "backlog_watch.hpp"
#include "bulk.hpp"
#include "change_watch.hpp"
#include "engine.hpp"
#include "fiber_scheduler.hpp"
#include "heartbeat.hpp"
#include "log.hpp"
#include "lookahead.hpp"
#include "run_control.hpp"
#include "schedules.hpp"
#include "services.hpp"
#include "step_pool.hpp"
#include "store.hpp"
#include "telemetry.hpp"
#include "worker_counters.hpp"
#include "writer.hpp"

namespace durable::detail {

class RuntimeCore {
 public:
  explicit RuntimeCore(RuntimeOptions opts);
  ~RuntimeCore();
  RuntimeCore(const RuntimeCore&) = delete;
  RuntimeCore& operator=(const RuntimeCore&) = delete;

  void add(Workflow wf);
  std::string start(std::string_view workflow, json input, StartOptions opts);
  RunInfo get(std::string_view run_id);
  std::vector<RunInfo> list(const RunFilter& filter);
  /// Runtime::verify, of the runs in `database` (RuntimeOptions::database or another: the
  /// durable command's verify --db).
  VerifyReport verify(const RunFilter& filter, const std::string& database);
  const RuntimeOptions& options() const { return options_; }
  /// The workflow add()ed under this name, or null.
  std::shared_ptr<const Workflow> added(std::string_view name) { return find_workflow(name); }
  /// The names of the workflows add()ed, sorted.
  std::vector<std::string> added_names() { return workflow_names(); }
  /// Wakes wait(), the worker loops and serve() to look at the store now: another writer in
  /// this process (an Admin's HTTP API) made work due.
  void wake() { notify_waiters(); }
  std::vector<StepInfo> steps(std::string_view run_id);
  /// What an operator does to this runtime's runs (runtime/run_control.hpp).
  RunControl& control() { return control_; }
  /// serve()'s retention: deletes runs that ended longer ago than RuntimeOptions::retention, a
  /// batch per transaction (runtime/deadlines.cpp); returns how long to wait before the next
  /// round.
  std::chrono::milliseconds purge_expired_runs();
  /// Throws InvalidInput when the registered code of the run's workflow would not take
  /// `output` as the result of its failed step `key` (a result that does not convert, a
  /// workflow that then fails or parts from its journal); does nothing for a workflow not
  /// add()ed here. The run as read from whichever database it is in (an Admin's too).
  void check_resolution(const RecordedRun& run, const std::string& key, const json& output);
  std::size_t run_until_idle();
  RunInfo wait(std::string_view run_id, std::chrono::milliseconds timeout);
  void send_event(std::string_view name, json data);
  /// Runtime::published (src/published.hpp), waiting on changes().
  std::optional<json> published(std::string_view run_id, std::string_view key,
                                std::chrono::milliseconds wait);
  /// Runtime::read_stream (src/stream_reads.hpp), waiting on changes(); runtime_streams.cpp.
  StreamRead read_stream(std::string_view run_id, std::string_view stream, std::size_t from,
                         std::chrono::milliseconds wait);
  /// What waiters of published values (this runtime's, and an Admin's serving its HTTP API) wait
  /// on: this runtime's commits wake them at once, other processes' through the database's feed.
  const std::shared_ptr<ChangeWatch>& changes() const { return changes_; }
  void send(std::string_view run_id, std::string_view topic, json message);
  /// The schedules of this runtime's database (runtime/schedules.hpp).
  Schedules& schedules() { return schedules_; }
  void serve();  // in runtime/serve.cpp
  void stop();
  Counters counters() const { return telemetry_->counters(); }
  std::string http_url() const {
    std::lock_guard lock(serve_mutex_);
    return http_url_;
  }

  /// The world this runtime lives in (src/env.hpp): the system's, or a test's own (the test kit's
  /// virtual clock), given before serve(), run_until_idle() or wait() start the runtime's threads
  /// and before anything waits on its changes (Error errc::misuse after).
  void set_env(std::shared_ptr<Env> env);
  Env& env() const { return *env_; }
  /// What runs a step body instead of calling it (the test kit: mocks, injected failures, a
  /// record of the bodies run); set before any run is executed. Called from step threads.
  using BodyHook = std::function<json(const std::string& run_id, const std::string& key,
                                      int attempt, const Body& body)>;
  void set_body_hook(BodyHook hook) { body_hook_ = std::move(hook); }
  /// Called when a journaled result does not convert to the type the workflow asks for, before
  /// the engine throws its own Error (the test kit throws one that blames its mock); set before
  /// any run is executed. Called from the run's thread.
  using ConversionHook =
      std::function<void(const std::string& run_id, const std::string& key, const json& value,
                         std::string_view type, const std::exception& error)>;
  void set_conversion_hook(ConversionHook hook) { conversion_hook_ = std::move(hook); }
  /// Called after each write of journal entries that was committed (the crash sweep).
  using CommitHook =
      std::function<void(const std::string& run_id, const std::vector<EntryWrite>& entries)>;
  void set_commit_hook(CommitHook hook) { commit_hook_ = std::move(hook); }
  /// The crash sweep's crash: from here on nothing more is written and no invocation or claim
  /// starts, as if the process had died at this point. Callable from any thread.
  void halt() { halted_ = true; }
  /// Waits until the spans made so far have gone to the collector (or were lost); for tests.
  void flush_spans() { telemetry_->flush(); }
  std::int64_t now_ms() const;
  std::size_t write_transactions() {
    std::lock_guard lock(store_mutex_);
    return store_->write_transactions();
  }
  const std::string& worker_id() const { return worker_.id; }
  /// The test kit's TestRuntime::save.
  void copy_database(const std::string& path) {
    std::lock_guard lock(store_mutex_);
    store_->copy_to(path);
  }

 private:
  // The worker loop (runtime/runtime_loop.cpp): admits due runs while a step thread is free, in
  // claims of at most `batch`, and executes them on fibers until none is left and none is due,
  // or the deadline passed.
  std::size_t run_due(std::optional<std::chrono::steady_clock::time_point> deadline,
                      std::size_t batch);
  /// Executes a claimed run's invocations until it sleeps, ends, is lost or yields its turn;
  /// returns how many. `let_go` is called when an invocation lets the run go before it ends
  /// (decide::HandOver: a body abandoned at its timeout keeps it), with the run written: another
  /// claim may hold it from then on.
  std::size_t drive(Claim claim, const std::function<void()>& let_go);
  /// What becomes of an invocation's outcome: counted, written and logged. Whether the run goes
  /// on at once with another invocation (its entries then still to be adopted).
  bool conclude(Claim& claim, Outcome& outcome, bool yielded);
  /// A claimed run's turn: when should_yield() next asks the store whether other runs wait. First
  /// after a fair slice, then at most every kYieldLook: a run of quick steps would otherwise count
  /// the due runs at every step once its slice is used (a query per step, about 12,000
  /// instructions under callgrind).
  struct Turn {
    explicit Turn(std::chrono::steady_clock::time_point claimed_at)
        : next_look(claimed_at + kFairSlice) {}
    std::chrono::steady_clock::time_point next_look;
  };
  /// Whether a run gives its turn up at this step boundary: it held it for a fair slice, and
  /// another run is due that this runtime could take.
  bool should_yield(Turn& turn);
  /// Hands a run back when serve() is stopping, or when it yields its turn (`yielding`).
  void hand_back(const RunState& run, bool yielding = false);
  /// How long a step body took (from the step threads): admission claims fewer runs at a time
  /// while bodies are slow, so that none waits for a thread behind another's slow body.
  void note_body(std::chrono::steady_clock::duration took);
  bool bodies_quick() const { return quick_bodies_.load() >= kQuickStreak; }
  std::size_t fail_unreadable(const Claim& claim);
  /// Whether history, logs and traces may quote an error's message: not when a codec encodes
  /// the payloads, of which the message is one.
  bool quotes_errors() const { return payloads_ == nullptr || payloads_->name() == kNoCodec; }
  /// A run this runtime cannot decode (UndecodableRun) is left to the others for a minute, and
  /// logged; the claims go on without it. set_aside() returns the runs left out now.
  void set_aside(const UndecodableRun& run);
  std::vector<std::string> set_aside();
  Written commit(const RunWrite& write);
  // Fails the runs past their deadlines (runtime/deadlines.cpp); returns how many.
  std::size_t expire_deadlines();
  /// The earliest deadline of a run that has not ended, from the last reading while it holds
  /// (store_mutex_ held).
  std::optional<std::int64_t> next_deadline();
  void forget_next_deadline() { next_deadline_.forget(); }
  /// When a run, a schedule's fire or a deadline is due next, if any is (runtime/serve.cpp).
  std::optional<std::int64_t> next_anything_due();
  // serve() was asked to stop: runs are handed back at their next step boundary.
  bool stopping() const { return serving_.load() && stop_requested_.load(); }
  // Entries a commit wrote join the run's journal in memory (their text dropped: the journal
  // keeps the parsed value only); `entries` is left empty.
  static void adopt(RunState& run, std::vector<EntryWrite>& entries);
  std::shared_ptr<const Workflow> find_workflow(std::string_view name);
  [[noreturn]] void unknown_workflow(std::string_view name);

  // A nested step's entry (or a body's that ended away from a loop), written at once through
  // the writer with whatever else is queued; whether it was written.
  bool write_entry(RunState& run, const EntryWrite& entry);
  // One was written: it is counted and logged. A failure to log is returned, not thrown: the
  // entries are in the store all the same.
  std::exception_ptr wrote(EntriesWrite& w);

 public:
  // The writes of the runs one run_until_idle() drives on its fibers, and the entries of their
  // parallel bodies as they end on the step threads, committed together.
  class CommitGroup {
   public:
    CommitGroup(RuntimeCore& core, FiberScheduler& scheduler);
    ~CommitGroup();
    CommitGroup(const CommitGroup&) = delete;
    CommitGroup& operator=(const CommitGroup&) = delete;
    /// The group of the worker loop on this thread, if any.
    static CommitGroup* current();
    bool flush();                         // the scheduler's idle hook
    Written wait(const RunWrite& write);  // from a run's fiber
    /// From a step thread: queues the entry of a body of `run` that ended, for the next flush;
    /// `done` is called then, and `left` (counting the run's queued entries) counts it off.
    void queue(RunState& run, const EntryWrite& entry, WriteDone done,
               std::atomic<std::size_t>& left);
    /// From a run's fiber, once its bodies returned: waits until `left` is zero.
    void wait_queued(const std::atomic<std::size_t>& left);

   private:
    struct Waiter {
      const RunWrite* write;
      FiberScheduler::Handle task;
      Written written = Written::refused;
      std::exception_ptr error;
    };
    struct Queued {
      EntriesWrite write;  // the one entry
      WriteDone done;
      std::atomic<std::size_t>* left;
    };
    struct QueueWaiter {
      const std::atomic<std::size_t>* left;
      FiberScheduler::Handle task;
    };
    void report(std::vector<Queued>& queued, const std::vector<Written>& written, std::size_t from,
                std::exception_ptr error);
    RuntimeCore* core_;
    FiberScheduler* scheduler_;
    CommitGroup* outer_;
    std::vector<Waiter*> waiting_;
    std::mutex queue_mutex_;  // guards queued_: the step threads add to it
    std::vector<Queued> queued_;
    std::vector<QueueWaiter> queue_waiters_;
  };

 private:
  // The watch of the database's changes, built on the Env (again by set_env).
  void watch_changes();
  StepPool& step_pool();

  // What the engine asks of the runtime while one run's invocation runs.
  class RunHost final : public Host {
   public:
    RunHost(RuntimeCore& core, Claim& claim, Turn& turn, const std::function<void()>& let_go);
    /// A resident invocation ended to give the run's turn up (RuntimeCore::should_yield).
    bool yielded() const { return yielded_; }
    /// An invocation handed the run over: whatever it ends in is not this runtime's to write.
    bool handed_over() const { return handed_over_; }
    Resolution carry_out(const Decision& decision) override;
    std::int64_t now_ms() override { return core_->now_ms(); }
    Env& env() override { return *core_->env_; }
    std::int64_t event_horizon() override;
    json call_body(const std::string& key, int attempt, const Body& body) override;
    bool halted() override { return core_->halted_; }
    bool reasons_quote_errors() override { return core_->quotes_errors(); }
    std::optional<json> load_progress(const std::string& key) override;
    bool stream_closed(const std::string& stream) override;  // runtime_streams.cpp
    void check_child(std::string_view workflow, const json& input) override;
    void result_not_converted(const std::string& key, const json& value, std::string_view type,
                              const std::exception& error) override {
      if (core_->conversion_hook_) core_->conversion_hook_(run_->id, key, value, type, error);
    }

   private:
    // What carry_out does for each kind of decision.
    void run_bodies(std::vector<BodyTask>& bodies);
    void journal_ended(BodyTask& task);
    bool write_nested(const EntryWrite& entry);
    void write_transaction(const EntryWrite& entry, const WriteDone& done);
    bool journal_now(std::vector<EntryWrite>& entries);
    std::int64_t park_until(std::int64_t wake_ms);
    void save_progress(const std::string& key, int attempt, const json& progress);
    // runtime_streams.cpp: a step body's writes to the run's streams.
    void write_stream_now(const std::string& stream, const std::optional<std::string>& value);
    void hand_over(Outcome& outcome);
    void linger(const std::function<bool()>& done);

    RuntimeCore* core_;
    Claim* claim_;
    RunState* run_;
    Turn* turn_;
    const std::function<void()>* let_go_;
    bool yielded_ = false;
    bool handed_over_ = false;
    // While the run's fiber waits for a batch of bodies: the loop's group that commits their
    // entries as they end, and how many of those it has yet to commit.
    CommitGroup* group_ = nullptr;
    std::atomic<std::size_t> queued_{0};
  };

  class Admission;  // the worker loop's claims (runtime/runtime_loop.cpp)
  // While serve() runs: its wake-up and the admin API's address, forgotten as it returns.
  class Served {
   public:
    Served(RuntimeCore& core, std::function<void()> wake);
    ~Served();
    Served(const Served&) = delete;
    Served& operator=(const Served&) = delete;
    void set_url(std::string url) const;

   private:
    RuntimeCore& core_;
  };

  static constexpr std::size_t kClaimBatch = 64;  // runs claimed per transaction
  static constexpr std::int64_t kMinPause = 10;   // ms: the shortest sleep of wait()
  // A run that held its claim this long gives its turn up at a step boundary to a run due
  // before it (runs due earlier go first; a run of quick steps is not cut up).
  static constexpr std::chrono::milliseconds kFairSlice{100};
  // After the slice, how often a run asks again whether to give its turn up.
  static constexpr std::chrono::milliseconds kYieldLook{5};
  // Bodies in a row that ended within kQuickBody before admission claims whole batches again.
  static constexpr int kQuickStreak = 4;
  static constexpr std::chrono::milliseconds kQuickBody{5};
  static constexpr std::chrono::seconds kSetAside{60};  // an undecodable run is left this long
  RunWrite write_for(const RunState& run, const Outcome& outcome, std::int64_t& lease_until_ms);
  std::vector<std::string> dead_owners();
  std::vector<std::string> workflow_names();

  RuntimeOptions options_;
  std::shared_ptr<Env> env_;  // first: every member after it may use it
  EngineConfig engine_config_;
  Worker worker_;

  // Guards store_ and random_: the reads take it; every write goes through writer_, which takes
  // it while it commits.
  std::mutex store_mutex_;
  std::unique_ptr<Store> store_;
  /// A read of the store under its lock, for the parts below.
  WithStore reads() {
    return [this](const std::function<void(Store&)>& use) {
      std::lock_guard lock(store_mutex_);
      use(*store_);
    };
  }
  /// What the parts below work with (runtime/services.hpp).
  Services services() {
    return {writer_, reads(), logger_, env_, [this] { notify_waiters(); }};
  }
  std::shared_ptr<ChangeWatch> changes_;      // see changes()
  std::shared_ptr<const Payloads> payloads_;  // options_.codec and encryption_key_file
  // The one writer of this runtime's runs (runtime/writer.hpp): starts, invocations' outcomes,
  // journal entries, step bodies' stream values and progress, and beats, from any thread; those
  // that come together commit in one transaction.
  Writer writer_{[this](const std::vector<Writer::Request*>& group) {
    std::lock_guard lock(store_mutex_);
    commit_group(*store_, {worker_.id, now_ms(), &halted_}, group);
  }};
  std::mt19937_64 random_{env_->random()};
  std::int64_t next_owner_scan_ms_ = 0;
  // The earliest deadline of a run that has not ended, as last read (runtime/deadlines.cpp).
  Lookahead next_deadline_;
  std::vector<std::string> dead_owners_;  // found by the last look
  std::set<std::string> executing_;       // runs this runtime claimed and has not yet let go
  std::map<std::string, std::chrono::steady_clock::time_point> set_aside_;  // until when

  std::once_flag pool_started_;
  std::unique_ptr<StepPool> pool_;  // step threads, from the first run executed

  std::mutex workflows_mutex_;
  std::map<std::string, std::shared_ptr<const Workflow>, std::less<>> workflows_;

  Logger logger_;
  // Counters, log lines and spans of what commits wrote: made once the payloads are known
  // (whether its lines may quote an error).
  std::optional<Telemetry> telemetry_;
  RunControl control_{{services(),
                       [this](const std::string& run_id) { changes_->changed(run_id, ""); },
                       [this](const RecordedRun& run, const std::string& key, const json& output) {
                         check_resolution(run, key, output);
                       },
                       options_.max_output_bytes}};
  Schedules schedules_{{services(),
                        [this](std::string_view name) {
                          std::shared_ptr<const Workflow> wf = find_workflow(name);
                          if (!wf) unknown_workflow(name);
                          return wf;
                        },
                        [this](std::size_t runs) {
                          telemetry_->fired(runs);
                          telemetry_->started(runs);
                        },
                        options_.poll_interval, options_.max_output_bytes}};
  BodyHook body_hook_;
  ConversionHook conversion_hook_;
  CommitHook commit_hook_;
  std::atomic<bool> halted_{false};
  /// After a commit of the run's entries (and its end, when `ended`): wakes this process's
  /// waiters of what it changed (published values, streams) at once.
  void committed(const std::string& run_id, const std::vector<EntryWrite>* entries,
                 bool ended = false) {
    if (ended) changes_->changed(run_id, "");  // its streams are closed
    if (entries == nullptr) return;
    for (const EntryWrite& e : *entries) {
      if (!e.is_new) continue;
      if (e.entry.kind == StepKind::publish) {
        changes_->changed(run_id, e.entry.output.value("key", ""));
      } else if (e.entry.kind == StepKind::stream) {
        changes_->changed(run_id, e.entry.output.value("stream", ""));
      }
    }
    if (commit_hook_) commit_hook_(run_id, *entries);
  }
  std::atomic<bool> serving_{false};
  std::atomic<bool> stop_requested_{false};
  mutable std::mutex serve_mutex_;  // guards serve_wake_ and http_url_
  std::string http_url_;
  std::function<void()> serve_wake_;  // while serving: makes the loop look for work now
  BacklogWatch backlog_{reads(), logger_, env_, options_};

  // Bodies in a row that ended within kQuickBody. None at first: a fresh runtime claims a run per
  // free thread until its bodies prove quick.
  std::atomic<int> quick_bodies_{0};
  // The due time of a run the last claim left although due (-1: none): runs held do not give
  // their turns up for it.
  std::atomic<std::int64_t> unclaimable_due_ms_{-1};
  struct Loop {
    FiberScheduler* scheduler;
    Admission* admission;
    bool operator==(const Loop&) const = default;
  };
  std::mutex loops_mutex_;   // guards loops_
  std::vector<Loop> loops_;  // the worker loops running now (run_due)
  void wake_loops();         // they look at the store at their next idle moment

  void notify_waiters();
  std::uint64_t wake_generation();
  std::mutex wake_mutex_;  // wait() sleeps on wake_ until a start, retry or cancel
  std::condition_variable wake_;
  std::uint64_t wake_generation_ = 0;  // counts starts, retries and cancels
  // Last: its threads use the members above (stopped first by ~RuntimeCore all the same).
  Heartbeat heartbeat_{{writer_, logger_, env_, worker_, [this] { return halted_.load(); },
                        [this] {
                          std::lock_guard lock(store_mutex_);  // guards executing_ too
                          return std::vector<std::string>(executing_.begin(), executing_.end());
                        },
                        [this] { return counters_json(counters()); }, [this] { notify_waiters(); },
                        options_.lease, options_.database}};
};

/// Reaches into a Runtime: for the tests (its clock, its hooks) and for durable::cli_main (its
/// workflows and options).
struct RuntimeAccess {
  static RuntimeCore& core(Runtime& runtime) { return *runtime.core_; }
};

}  // namespace durable::detail
