#pragma once
// The replay engine: executes one invocation of a run's workflow function against its journal
// and says what came of it. It does no I/O; the runtime persists the outcome.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <durable/step.hpp>
#include <durable/workflow.hpp>
#include <optional>
#include <random>
#include <string>

#include "journal.hpp"

namespace durable::detail {

/// What one run is, as the engine needs it across its invocations.
struct RunState {
  std::string id, workflow, correlation_id;
  json input;
  int invocations = 0;  ///< invocations made so far, this one not included
  Journal journal;
};

/// What an invocation ended with. `entry`, when set, is a journal entry to write (new, or an
/// update of the entry with its key) together with the run's change.
struct Outcome {
  enum class Kind {
    step_done,  ///< a new step was journaled (completed, failed for good, or a sleep that
                ///< has already ended): invoke again at once
    sleep,      ///< the run sleeps until wake_at_ms (a sleep, or a retry backoff)
    completed,  ///< the workflow returned `output`
    failed,     ///< the workflow threw; `error` says what
  };
  Kind kind = Kind::failed;
  std::optional<JournalEntry> entry;
  bool entry_is_new = false;
  json output;
  std::optional<ErrorInfo> error;
  std::int64_t wake_at_ms = 0;
  std::string reason;  ///< for the state history
};

/// Settings of the engine shared by every invocation.
struct EngineConfig {
  std::size_t max_output_bytes = 4u << 20;
};

/// One invocation of a run: owns the Step the workflow sees and carries out its calls.
class Invocation {
 public:
  Invocation(RunState& run, const Workflow& workflow, const EngineConfig& config,
             std::int64_t now_ms, std::mt19937_64& random);

  /// Calls the workflow function and returns what came of it. Never throws for anything the
  /// workflow or its steps do.
  Outcome execute();

  // The step tools, called through Step.
  const json* begin_run(std::string_view id, const StepOptions& opts);
  const json& finish_run(json output);
  [[noreturn]] void fail_run(std::exception_ptr error);
  [[noreturn]] void bad_conversion(const json& value, std::string_view type,
                                   const std::exception& error);
  void sleep_until(std::string_view id, std::int64_t wake_at_ms);
  void sleep_for(std::string_view id, std::chrono::milliseconds d) {
    sleep_until(id, now_ms_ + std::max<std::int64_t>(0, d.count()));
  }
  std::string_view run_id() const { return run_->id; }
  std::string_view correlation_id() const { return run_->correlation_id; }
  bool replaying() const { return cursor_.replaying(); }

 private:
  struct Body {  // the step whose body is running
    std::string key, base;
    const StepOptions* options;
    int attempt;
    bool is_new;
  };

  // Called first by every step tool: refuses calls where they may not be made, and ends the
  // invocation at a step call that follows a step failed for good in this invocation.
  void before_step_call(std::string_view tool, std::string_view id);
  [[noreturn]] void end(Outcome outcome);
  // Journals the body's step as failed for good and throws StepFailed into the workflow.
  [[noreturn]] void fail_for_good(JournalEntry entry, bool is_new, std::string reason);
  // Fails the run with NonDeterminism, however the workflow handles the exception.
  [[noreturn]] void diverge(const JournalEntry& entry, std::string_view tool);
  // Takes the body's state out as it ends; its journal entry before the outcome is known.
  Body end_body();
  JournalEntry entry_of(const Body& body) const;
  const RetryPolicy& policy_of(const StepOptions& opts) const;
  std::string step_label(std::string_view key) const;
  Outcome final_outcome(Outcome outcome);

  RunState* run_;
  const Workflow* workflow_;
  const EngineConfig* config_;
  std::int64_t now_ms_;
  std::mt19937_64* random_;
  Step step_;
  ReplayCursor cursor_;
  std::optional<Body> body_;
  std::string_view last_key_;           // the step whose journaled result run() is converting
  std::optional<Outcome> ending_;       // set when the runtime's unwinding began
  bool swallowed_ = false;              // a step call came after the unwinding began
  std::optional<Outcome> failed_step_;  // a step failed for good here, not yet in an outcome
  std::optional<ErrorInfo> diverged_;   // NonDeterminism met: the run fails whatever follows
};

}  // namespace durable::detail
