// SPDX-License-Identifier: Apache-2.0
#pragma once
// The replay engine: executes one invocation of a run's workflow function against its journal.
// It decides; the host (the runtime) runs step bodies on its threads and persists what the
// engine hands it. The engine does no I/O itself.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <durable/step.hpp>
#include <durable/workflow.hpp>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "decision.hpp"
#include "env.hpp"
#include "errors_internal.hpp"
#include "journal.hpp"
#include "run_model.hpp"

namespace durable::detail {

/// Where the step tool being called on this thread was called from, "file:line" (empty when
/// unknown); set by the step tools.
std::string call_site();

/// A time in a history reason ("sleep 'nap' until 2026-11-27T09:00:00.000Z"): to the ms.
std::string format_time(std::int64_t ms);

/// What an invocation ended with: journal entries to write together with the run's change.
struct Outcome {
  enum class Kind {
    step_done,    ///< new steps were journaled (completed, failed for good, or a sleep that has
                  ///< already ended): invoke again at once
    sleep,        ///< the run sleeps until wake_at_ms (a sleep, or a retry backoff)
    completed,    ///< the workflow returned `output`
    failed,       ///< the workflow threw; `error` says what
    lost,         ///< a nested step's write was refused: the run was cancelled or taken over
    wait,         ///< the run waits for an event (until wake_at_ms, kNever: no timeout) or a child
    handed_over,  ///< the outcome was handed over (decide::HandOver) before the invocation
                  ///< ended: nothing is left to write
  };
  Kind kind = Kind::failed;
  std::vector<EntryWrite> entries;
  json output;
  std::optional<ErrorInfo> error;
  std::int64_t wake_at_ms = 0;
  std::string reason;  ///< for the state history
  /// completed by step.continue_as_new: the input of the run that takes over.
  std::optional<json> successor_input;
};

/// What the engine needs from the runtime while an invocation runs: what it decides carried
/// out (src/decision.hpp), and what it reads.
class Host {
 public:
  virtual ~Host() = default;
  /// Carries out what the engine decided: runs bodies, writes, waits (see decide::).
  virtual Resolution carry_out(const Decision& decision) = 0;
  /// The runtime's clock now, in ms (read from step threads too).
  virtual std::int64_t now_ms() = 0;
  /// The world the runtime lives in: a timed step's measured time, waits and thread.
  virtual Env& env() { return Env::system(); }
  /// The sequence number of the last event stored: a wait beginning now counts later ones.
  virtual std::int64_t event_horizon() = 0;
  /// Throws Error unless a run of `workflow` with this input can be started (step.invoke).
  virtual void check_child(std::string_view workflow, const json& input) = 0;
  /// The id of a new child run (step.invoke) or sent event (step.send_event): a random one
  /// (detail::new_id); a scripted test gives its own, so its journals come out the same each
  /// time.
  virtual std::string new_id();
  /// Whether this host stopped writing, as a killed process would (the crash sweep).
  virtual bool halted() { return false; }
  /// Whether a history reason may quote an error's message. Not when a codec encodes the
  /// payloads (RuntimeOptions::codec, encryption_key_file): the history stays in the clear, so
  /// the message stays in the step's and the run's encoded error only.
  virtual bool reasons_quote_errors() { return true; }
  /// Runs a step body (attempt 1, 2, ...) and returns its result; the test kit replaces the
  /// body here (mocks, injected failures) and records which bodies ran.
  virtual json call_body(const std::string& /*key*/, int /*attempt*/, const Body& body) {
    return body();
  }
  /// Whether the run's stream is closed: a new write to it from the workflow function is
  /// refused before it is journaled.
  virtual bool stream_closed(const std::string& /*stream*/) { return false; }
  /// The progress last stored for the step, for its next attempt.
  virtual std::optional<json> load_progress(const std::string& /*key*/) { return std::nullopt; }
  /// A journaled result does not convert to the type the workflow asks for. The test kit throws
  /// its own Error here when the result is its mock's, to blame the mock rather than a change of
  /// code; returning lets the engine throw its own.
  virtual void result_not_converted(const std::string& /*key*/, const json& /*value*/,
                                    std::string_view /*type*/, const std::exception& /*error*/) {}
};

/// Settings of the engine shared by every invocation.
struct EngineConfig {
  std::size_t max_output_bytes = 4u << 20;
  /// Replay::on_recovery: after journaling, the workflow goes on in place instead of ending the
  /// invocation, and sleeps and backoffs up to resident_sleep_ms are waited out in place.
  bool resident = false;
  std::int64_t resident_sleep_ms = 1000;
  /// testing::replay and Runtime::verify: the invocation remembers the first call the journal
  /// does not hold, for the checks made after it.
  bool replay_only = false;
  /// Strict replay (RuntimeOptions::strict_replay; always under replay_only): a call the journal
  /// does not hold, or the workflow's return, while a journaled entry of the run's own is still
  /// unmet is a NonDeterminism (check_strict). False: entries are matched by id alone.
  bool strict = true;
  /// Parallel bodies are journaled as each ends (BodyTask::ended),
  /// not with the invocation's outcome: a crash re-runs only those that had not ended.
  bool write_as_ended = false;
};

class BodyScope;
class Attempt;

/// One invocation of a run: owns the Step the workflow sees and carries out its calls.
class Invocation {
 public:
  Invocation(RunState& run, const Workflow& workflow, const EngineConfig& config,
             std::int64_t now_ms, std::mt19937_64& random, Host& host);
  ~Invocation();

  /// Calls the workflow function and returns what came of it. Never throws for anything the
  /// workflow or its steps do. Throws the host's error when the store failed under one of the
  /// workflow's calls (a read the call needed, a write made on the workflow's side): that is
  /// neither the workflow's failure nor a step's, and the run stays as the store holds it.
  Outcome execute();

  // The step tools, called through Step.
  const json* begin_run(std::string_view id, const StepOptions& opts);
  // run_new() and await() return the step's value, or nullptr when the invocation ends here (a
  // step was journaled under every_step): the caller then calls unwind() from the frame nearest
  // the workflow's, so that the unwinding crosses no frame of durable's with locals to destroy.
  // Each such frame costs the unwinder a resume, about 9,000 instructions (callgrind).
  const json* run_new(Body body);
  const json* begin_transaction(std::string_view id, const StepOptions& opts);
  const json* run_transaction(TransactionBody body);
  std::size_t start_transaction(std::string_view id, const StepOptions& opts, TransactionBody body);
  std::size_t start_step(std::string_view id, const StepOptions& opts, Body body,
                         std::optional<std::size_t> item);
  const json* await(std::size_t slot);
  /// Ends the invocation whose outcome is set (ending_): unwinds the workflow function. Inline,
  /// so that the throw comes from its caller's frame (Step::end_invocation, which has nothing to
  /// destroy) and adds none of its own.
  [[noreturn]] void unwind() { throw Unwind{}; }
  bool ready(std::size_t slot) const;
  [[noreturn]] void bad_conversion(const json& value, std::string_view type,
                                   const std::exception& error);
  void sleep_until(std::string_view id, std::int64_t wake_at_ms);
  void sleep_for(std::string_view id, std::chrono::milliseconds d) {
    sleep_until(id, now_ms_ + std::max<std::int64_t>(0, d.count()));
  }
  std::optional<json> wait_for_event(std::string_view id, std::string_view event,
                                     const WaitOptions& opts);
  void send_event(std::string_view id, std::string_view event, json data);
  /// step.receive (src/waits.cpp): the store completes it with a message, at its commit or at
  /// a later send.
  std::optional<json> receive(std::string_view id, std::string_view topic,
                              std::chrono::milliseconds timeout);
  json invoke(std::string_view id, std::string_view workflow, json input);
  void publish(std::string_view key, json value);  // in src/publish.cpp
  void set_tags(std::map<std::string, std::string> tags);  // in src/publish.cpp
  // In src/stream_writes.cpp: Step::write_stream and close_stream.
  void write_stream(std::string_view stream, json value);
  void close_stream(std::string_view stream);
  // In src/versioning.cpp: the tools that let code change under running runs.
  json now_value(std::string_view id);     ///< step.now: ms since the epoch, by the host's clock
  json uuid_value(std::string_view id);    ///< step.uuid: a version 4 UUID as text
  json random_value(std::string_view id);  ///< step.random: 64 random bits
  bool patched(std::string_view id);
  void deprecate_patch(std::string_view id);
  [[noreturn]] void continue_as_new(json input);
  /// A step call the journal does not hold, or holds as still to be retried: the code goes on
  /// past what was recorded there.
  struct NewCall {
    std::string key;                         ///< the journal key the call makes
    std::string tool;                        ///< "step.run", "step.sleep", ...
    std::string site;                        ///< "file:line" of the call, or empty
    const JournalEntry* retrying = nullptr;  ///< the entry, for a call the journal holds
  };
  /// EngineConfig::replay_only: the first such call of this invocation.
  const std::optional<NewCall>& first_new() const { return first_new_; }
  /// A call found the journal holding another kind of step under its id (the run fails).
  bool diverged() const { return diverged_.has_value(); }
  /// Where that call was made ("file:line"; empty when unknown).
  const std::string& diverged_site() const { return diverged_site_; }
  /// The cursor that matched this invocation's calls (EngineConfig::replay_only: which met what).
  const ReplayCursor& cursor() const { return cursor_; }
  std::string_view run_id() const { return run_->id; }
  std::string_view correlation_id() const { return run_->correlation_id; }
  /// Step::traceparent(): under the attempt whose body this thread runs, if it is this run's.
  std::string traceparent() const;
  bool replaying() const { return cursor_.replaying(); }

 private:
  // A workflow function's write or close of a stream (`did` says which, for the log).
  void journal_stream(std::string_view stream, json output, std::string_view did);
  friend class BodyScope;

  // A step whose body is to run at the next wait point.
  struct Pending {
    std::string key, base;
    StepOptions options;
    int attempt = 1;
    bool is_new = true;
    std::int64_t due_ms = 0;  // a retry not due before this time
    Body body;
    std::size_t slot = 0;
    std::optional<EntryWrite> result;             // filled by the body's run
    std::optional<std::int64_t> postponed_until;  // a nested step's retry holds the body back
    bool lost = false;                            // a nested write was refused
    bool written = false;            // journaled by its step thread as it ended (parallel steps)
    std::exception_ptr write_error;  // that write failed
    TransactionBody transaction;     // a Step::transaction: run by the store, not a step thread
  };
  // A started step as the workflow sees it through its Future.
  struct Slot {
    const JournalEntry* entry = nullptr;  // journaled: the value or the failure
    std::optional<ErrorInfo> failure;     // failed for good in this invocation, not yet written
  };

  // Called first by every step tool of the workflow (not of a body): refuses calls where they
  // may not be made, and ends the invocation at a step call that follows steps failed for good
  // in this invocation.
  void before_step_call();
  [[noreturn]] void end(Outcome outcome);
  // The store failed under a call of the workflow's: unwinds the workflow, and execute() throws
  // `error` whatever the workflow does with the unwinding.
  [[noreturn]] void store_failed(std::exception_ptr error);
  [[noreturn]] void diverge(const JournalEntry& entry, std::string_view tool);
  // Strict replay, the one rule (EngineConfig::strict): before a call the journal does not hold
  // runs, every entry of the run's own the journal held must have been met by a call. A parallel
  // step (start, map) is checked at the wait point that would run its body, so that siblings
  // journaled in another order than called are met first.
  void check_strict(const NewCall& call);
  // The same before the workflow's ending: its return of `output`, or (null) its
  // continue_as_new.
  void check_strict_end(const json* output);
  [[noreturn]] void diverge_strictly(const JournalEntry& missed, std::string what);
  [[noreturn]] void diverge_with(const NonDeterminism& error, std::string key);
  // A new step call whose id a patch marker of this run holds: an Error (a patch's id is its own).
  void refuse_patch_id(std::string_view key, std::string_view tool) const;
  [[noreturn]] void patch_id_taken(std::string_view id, std::string_view tool) const;
  // A patch call whose id a step of this run holds: an Error, as above.
  void refuse_step_id(std::string_view id, std::string_view tool) const;
  // A call the journal holds nothing for, so it journals `entry` (completed) before it returns.
  void journal_completed(JournalEntry entry, std::string reason);
  // step.now, uuid, random: the value journaled under `id` as {tool: value}, made by `make` at
  // the first call and given back by every replay.
  json value(std::string_view id, std::string_view tool, const std::function<json()>& make);
  // The generator the run's retry jitter uses, under the lock that bodies on several threads
  // share.
  std::uint64_t random_bits();
  // Runs every pending body (a wait point). False when the invocation must end because something
  // was journaled: ending_ then holds its outcome, and the caller unwinds.
  [[nodiscard]] bool settle();
  // settle(), unwinding at once where it ends the invocation.
  void flush() {
    if (!settle()) unwind();
  }
  struct Round;
  void run_due();
  Round fold();
  void name_outcome(Round& round) const;
  void run_body(Pending& pending);
  WriteDone when_written(Pending& pending);
  BodyTask task_of(Pending& pending, bool journal_as_ended);
  // A Step::transaction's attempt: its body runs in the store's transaction that journals it.
  void write_transaction(Pending& pending);
  EntryWrite attempt_failed(const Pending& pending, std::exception_ptr error);
  EntryWrite output_entry(const Pending& pending, json output);
  JournalEntry entry_of(const Pending& pending) const;
  std::size_t add_pending(ReplayCursor::Match match, std::string base, const StepOptions& opts,
                          Body body, JournalEntry* retrying);
  const RetryPolicy& policy_of(const StepOptions& opts) const;
  bool stays_resident(const Outcome& outcome) const;
  // The journal entry of a call reached with `kind`, after the checks every such call makes;
  // null for a call the journal does not hold yet. Runs the started steps first.
  JournalEntry* begin_special(std::string_view id, StepKind kind, std::string_view tool,
                              ReplayCursor::Match& match);
  // The same for a call journaled under a base durable made (publish, streams, tags: ids.hpp).
  // `refuse_new`, if given, throws for a new call it refuses, before the call counts as made.
  JournalEntry* begin_internal(std::string_view base, StepKind kind, std::string_view tool,
                               ReplayCursor::Match& match,
                               const std::function<void()>& refuse_new = {});
  JournalEntry* begin_at(ReplayCursor::Match& match, StepKind kind, std::string_view tool,
                         const std::function<void()>& refuse_new);
  JournalEntry new_entry(ReplayCursor::Match& match, std::string_view id, StepKind kind) const;
  [[noreturn]] void wait_on(const JournalEntry& entry, std::string reason,
                            std::optional<EntryWrite> write);
  void journal_in_place(std::vector<EntryWrite>& entries);
  void park_in_place(std::int64_t wake_ms);
  Outcome evicted(std::int64_t wake_ms) const;
  std::string step_label(std::string_view key) const;
  std::string retry_text(const JournalEntry& e, const StepOptions& opts) const;
  /// An error as a history reason quotes it: its type, and its message's first line when the
  /// host lets reasons quote errors.
  std::string reason_error(const ErrorInfo& e) const;
  Outcome final_outcome(Outcome outcome);
  void note_new(std::string_view key, std::string_view tool, const JournalEntry* retrying);
  // A nested step call from a body running on a step thread; null when not inside a body of
  // this invocation.
  BodyScope* scope() const;

  RunState* run_;
  const Workflow* workflow_;
  const EngineConfig* config_;
  std::int64_t now_ms_;
  std::mt19937_64* random_;
  Host* host_;
  Step step_;
  ReplayCursor cursor_;
  std::deque<Pending> pending_;
  std::vector<Slot> slots_;
  std::string_view last_key_;            // the step whose journaled result run() is converting
  std::optional<Outcome> ending_;        // set when the runtime's unwinding began
  bool swallowed_ = false;               // a step call came after the unwinding began
  std::exception_ptr store_error_;       // set by store_failed(): execute() throws it
  std::vector<EntryWrite> failed_;       // steps failed for good here, not yet in an outcome
  std::optional<ErrorInfo> diverged_;    // NonDeterminism met: the run fails whatever follows
  std::string diverged_site_;            // the call that met it
  std::optional<NewCall> first_new_;     // replay_only: the first call past the journal
  std::optional<NewCall> parallel_new_;  // a new parallel step not yet checked (check_strict)
  std::map<std::string, bool, std::less<>> patches_;  // step.patched: each id's answer, by its
                                                      // first call in this invocation
  // Ends the invocation of a settle() that left bodies abandoned (at their timeout) running:
  // hands `outcome` over and lingers until they return; false, for the caller to unwind.
  [[nodiscard]] bool hand_over(Outcome outcome);
  void abandon(std::shared_ptr<Attempt> attempt);
  bool any_abandoned();
  // Waits until every abandoned body has returned (at once when none was abandoned).
  void linger();

  std::mutex nested_mutex_;  // the journal, while bodies run nested steps
  // The Sql objects transaction bodies were given: kept, ended, for the invocation's life, so
  // that one kept past its body's call throws instead of reaching freed memory.
  std::vector<std::unique_ptr<Sql>> sqls_;
  std::mutex abandoned_mutex_;  // abandoned_: bodies on several threads add to it
  std::vector<std::shared_ptr<Attempt>> abandoned_;  // attempts abandoned, still running
  std::mutex random_mutex_;                          // random_, used by bodies on several threads
};

}  // namespace durable::detail
