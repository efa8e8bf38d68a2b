// SPDX-License-Identifier: Apache-2.0
#pragma once
// The rules a replay holds a workflow's calls to, against the journal of its run: a call meets
// an entry of its own kind (else the run diverged), strict replay (no new call while an entry of
// the run's own is unmet), and the ids of patches kept apart from the ids of steps. Each breach
// is a NonDeterminism, or an Error for a misused id; a divergence, once met, fails the run
// whatever the workflow does next.

#include <optional>
#include <string>
#include <string_view>

#include "errors_internal.hpp"
#include "journal.hpp"
#include "run_model.hpp"

namespace durable::detail {

struct EngineConfig;

/// A step call the journal does not hold, or holds as still to be retried: the code goes on
/// past what was recorded there.
struct NewCall {
  std::string key;                         ///< the journal key the call makes
  std::string tool;                        ///< "step.run", "step.sleep", ...
  std::string site;                        ///< "file:line" of the call, or empty
  const JournalEntry* retrying = nullptr;  ///< the entry, for a call the journal holds
};

/// How messages name a new call: "step.run('charge#2') (at orders.cpp:41)".
std::string call_text(const NewCall& call);

class ReplayRules {
 public:
  /// `run`, `cursor` and `config` are the invocation's and outlive these rules.
  ReplayRules(const RunState& run, const ReplayCursor& cursor, const EngineConfig& config)
      : run_(run), cursor_(cursor), config_(config) {}

  /// A call the journal does not hold (or holds as retrying: `retrying`) is about to go on: its
  /// id may not be a patch's, and under strict replay every entry of the run's own must have been
  /// met before it. A parallel step's check waits for check_parallel(), so that siblings
  /// journaled in another order than called are met first.
  void note_new(std::string_view key, std::string_view tool, const JournalEntry* retrying);
  /// The check a new parallel step left for its wait point, before any body runs.
  void check_parallel();
  /// Strict replay before the workflow's ending: its return of `output`, or (null) its
  /// continue_as_new.
  void check_end(const json* output);
  /// A call found the journal holding another kind of step under its id.
  [[noreturn]] void diverge(const JournalEntry& entry, std::string_view tool);
  /// The run met `error`: it fails whatever the code does next, with this error as thrown.
  [[noreturn]] void diverge_with(const NonDeterminism& error, std::string key);
  /// The same, met in a step body (a nested call): recorded, for its thread to throw.
  void diverged_in_body(const NonDeterminism& error, std::string key);
  /// A patch call (step.patched, deprecate_patch) whose id a step of this run holds: an Error.
  void refuse_step_id(std::string_view id, std::string_view tool) const;
  /// A step call with a patch's id, found by diverge(): an Error.
  [[noreturn]] void patch_id_taken(std::string_view id, std::string_view tool) const;

  /// The divergence met, if any, and where its call was made ("file:line"; empty when unknown).
  const std::optional<ErrorInfo>& diverged() const { return diverged_; }
  const std::string& diverged_site() const { return diverged_site_; }
  /// EngineConfig::replay_only: the first new call of this invocation.
  const std::optional<NewCall>& first_new() const { return first_new_; }

 private:
  void check_strict(const NewCall& call);
  [[noreturn]] void diverge_strictly(const JournalEntry& missed, std::string what);
  // A new step call whose id a patch marker of this run holds.
  void refuse_patch_id(std::string_view key, std::string_view tool) const;

  const RunState& run_;
  const ReplayCursor& cursor_;
  const EngineConfig& config_;
  std::optional<ErrorInfo> diverged_;    // NonDeterminism met: the run fails whatever follows
  std::string diverged_site_;            // the call that met it
  std::optional<NewCall> first_new_;     // replay_only: the first call past the journal
  std::optional<NewCall> parallel_new_;  // a new parallel step not yet checked (check_parallel)
};

}  // namespace durable::detail
