// SPDX-License-Identifier: Apache-2.0
#pragma once
// The replay engine: executes one invocation of a run's workflow function against its journal.
// It decides; the host (the runtime) runs step bodies on its threads and persists what the
// engine hands it. The engine does no I/O itself.

#include <algorithm>
#include <chrono>
#include <cstdint>
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
#include "pending_steps.hpp"
#include "replay_rules.hpp"
#include "run_model.hpp"
#include "step_results.hpp"

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
  /// unmet is a NonDeterminism (ReplayRules). False: entries are matched by id alone.
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
  /// The rules its calls were held to: which diverged, where, and (EngineConfig::replay_only)
  /// the first new call.
  const ReplayRules& rules() const { return rules_; }
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
  // A call the journal holds nothing for, so it journals `entry` (completed) before it returns.
  void journal_completed(JournalEntry entry, std::string reason);
  // step.now, uuid, random: the value journaled under `id` as {tool: value}, made by `make` at
  // the first call and given back by every replay.
  json value(std::string_view id, std::string_view tool, const std::function<json()>& make);
  // Runs every pending body (a wait point). False when the invocation must end because something
  // was journaled: ending_ then holds its outcome, and the caller unwinds.
  [[nodiscard]] bool settle();
  // settle(), unwinding at once where it ends the invocation.
  void flush() {
    if (!settle()) unwind();
  }
  std::size_t add_pending(ReplayCursor::Match match, std::string base, const StepOptions& opts,
                          Body body, JournalEntry* retrying);
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
  Outcome outcome_of(PendingSteps::Round& round);
  // A nested step call from a body running on a step thread; null when not inside a body of
  // this invocation.
  BodyScope* scope() const;

  RunState* run_;
  const Workflow* workflow_;
  const EngineConfig* config_;
  std::int64_t now_ms_;
  Host* host_;
  Step step_;
  ReplayCursor cursor_;
  ReplayRules rules_;  // after cursor_, which it reads
  StepResults results_;
  std::mutex nested_mutex_;  // the journal, while bodies run nested steps
  PendingSteps pending_;
  std::vector<Slot> slots_;
  std::string_view last_key_;            // the step whose journaled result run() is converting
  std::optional<Outcome> ending_;        // set when the runtime's unwinding began
  bool swallowed_ = false;               // a step call came after the unwinding began
  std::exception_ptr store_error_;       // set by store_failed(): execute() throws it
  std::vector<EntryWrite> failed_;       // steps failed for good here, not yet in an outcome
  std::map<std::string, bool, std::less<>> patches_;  // step.patched: each id's answer, by its
                                                      // first call in this invocation
  // Ends the invocation of a settle() that left bodies abandoned (at their timeout) running:
  // hands `outcome` over and lingers until they return; false, for the caller to unwind.
  [[nodiscard]] bool hand_over(Outcome outcome);
};

}  // namespace durable::detail
