// SPDX-License-Identifier: Apache-2.0
#pragma once
// The in-memory journal of one run and the replay cursor that matches step calls against it.
// No I/O: the store loads entries in, the engine appends new ones.

#include <cstdint>
#include <deque>
#include <durable/errors.hpp>
#include <durable/options.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace durable::detail {

/// run: a step body's result; sleep: a wake time; event: a wait_for_event; invoke: a child run;
/// send: an event this run sent; value: a step.now, step.uuid or step.random ({"now": ms},
/// {"uuid": text}, {"random": n}); patch: the marker of a step.patched that took the new path;
/// publish: a step.publish ({"key": k, "value": v}), kept by the store as the key's latest value;
/// receive: a step.receive of the run's mailbox ({"topic": t}; once a message came, also
/// {"message": m, "seq": n}; null: timed out); stream: a step.write_stream ({"stream": s,
/// "value": v}) or close_stream ({"stream": s, "close": true}) of the workflow function, applied
/// to the stream by the store; tags: a step.set_tags ({key: value, ...}), merged into the run's
/// tags by the store.
enum class StepKind {
  run,
  sleep,
  event,
  invoke,
  send,
  value,
  patch,
  publish,
  receive,
  stream,
  tags
};
/// completed: output journaled (or the sleep has ended); failed: failed for good; retrying: an
/// attempt failed and the next is due at wake_at; sleeping: a sleep that ends at wake_at;
/// waiting: an event wait or a receive (until wake_at, if it has a timeout) or a child run not yet
/// ended.
enum class StepState { completed, failed, retrying, sleeping, waiting };

std::string_view to_string(StepKind kind);
std::string_view to_string(StepState state);
std::optional<StepKind> step_kind_from_string(std::string_view text);
std::optional<StepState> step_state_from_string(std::string_view text);

/// One journal entry: the durable record of a step.
struct JournalEntry {
  std::string key;   ///< "charge", "charge#2"
  std::string base;  ///< the id the code used: "charge"
  StepKind kind = StepKind::run;
  StepState state = StepState::completed;
  json output;
  std::string output_text;  ///< output as JSON text, when the engine has already made it
  std::optional<ErrorInfo> error;
  int attempts = 0;
  std::optional<std::int64_t> wake_at_ms;
  int invocation = 0;                       ///< the invocation that last wrote it
  std::int64_t updated_at_ms = 0;           ///< when it was last written (as loaded)
  std::optional<std::int64_t> duration_ms;  ///< run: how long its last attempt's body took
  /// run: when its last attempt's body began (ms); it ended duration_ms later. A parallel body's
  /// entry is written some time after it ended, so updated_at_ms cannot place it.
  std::optional<std::int64_t> started_at_ms;
  /// Completed by an operator (Runtime::resolve): the reason they gave; empty otherwise.
  std::string resolved;
  bool nested = false;  ///< a step of a step body (its base holds '/'); set by the Journal
  /// Its key counts the uses of its id before it in the journal (set by the Journal): false for
  /// a parallel step journaled before a sibling called ahead of it, as they end.
  bool in_call_order = true;
};

/// What a journal entry holds, for messages: "a step.run that returned 42", "a step.sleep until
/// 2026-11-21T09:00:00Z, over".
std::string describe(const JournalEntry& entry);

/// How messages name a step: "step 'charge' of run 5f2…".
std::string step_label(std::string_view key, std::string_view run_id);

/// The journal key of the n-th use of a step id in a run: "id" for n == 1, "id#n" after.
std::string journal_key(std::string_view id, int n);

/// The entries of one run in the order they were first written, with lookups by key. Entries
/// never move once added (a deque), so pointers to them stay valid while others are appended.
/// Nested entries (keys with '/') are kept with the others but are not the workflow's own.
class Journal {
 public:
  /// Adds an entry under a key the journal does not hold yet. Entries come in the order they were
  /// written: a parallel step's when it ended, which may be before a sibling called ahead of it.
  void append(JournalEntry entry);
  /// Replaces the entry with the same key.
  void update(JournalEntry entry);
  /// An entry the store wrote joins the journal: appended when `is_new`, else in place of the
  /// entry of its key. The journal keeps the parsed output only, not its JSON text.
  void record(JournalEntry entry, bool is_new);
  JournalEntry* find(std::string_view key);
  const JournalEntry* find(std::string_view key) const;
  /// The position of the entry with this key in entries(), or nullopt.
  std::optional<std::size_t> position(std::string_view key) const;
  const std::deque<JournalEntry>& entries() const { return entries_; }
  std::size_t size() const { return entries_.size(); }
  /// Entries made by the workflow's own calls, nested ones left out.
  std::size_t top_level() const { return top_level_; }
  /// The markers of patches taken (kind patch) among them.
  std::size_t markers() const { return markers_; }
  /// How many entries were made by uses of this step id.
  int uses_of(std::string_view base) const;

 private:
  std::deque<JournalEntry> entries_;
  std::size_t top_level_ = 0;
  std::size_t markers_ = 0;
  std::unordered_map<std::string, std::size_t> by_key_;
  std::unordered_map<std::string, int> uses_;
};

/// Matches the step calls of one invocation, in call order, against the journal.
///
/// Keys depend on how often an id was used before in this invocation. The common case is a
/// replay that meets the journal's entries in the order they were written; while it does
/// ("on track"), the count of earlier uses is the entry's own, and a lookup is one string
/// comparison with no allocation. The first call off that order (or an entry written out of
/// call order: parallel steps that ended in another order) switches to counting uses in a map,
/// which gives the same keys for any order.
class ReplayCursor {
 public:
  explicit ReplayCursor(Journal& journal)
      : journal_(&journal),
        unmet_(journal.top_level() - journal.markers()),
        met_(journal.size(), false) {}

  struct Match {
    JournalEntry* entry;  ///< null: the journal has no entry for this call
    std::string key;      ///< set when entry is null (a new step); else entry->key
  };
  /// The journal key and entry of the next call with this step id.
  Match next(std::string_view id) { return next(id, true); }
  /// As next(), for a base durable made itself ("id[3]" of a map) and checked already.
  Match next_internal(std::string_view base) { return next(base, false); }
  /// The patch marker under this key, or null; either way the counts of calls and uses stay as
  /// they were (a patch's id is its own, and a marker is no step the code calls).
  JournalEntry* take_marker(std::string_view key);
  /// Whether the journal, as it was when this invocation began, holds an entry of the workflow's
  /// own (no patch marker) that no call of this invocation has met: the run went further on
  /// some code than this invocation has got so far (step.patched). Unlike replaying(), new calls
  /// and the entries this invocation journaled in place change nothing here. An entry of a
  /// step the code no longer calls counts too: such a run is held to be past every patch.
  bool went_past() const { return unmet_ > 0; }
  /// Entries this invocation made were added to the journal (a resident invocation): they count
  /// as met, so later calls neither match them again nor number past them twice.
  void absorb_appended() {
    if (on_track_) position_ = journal_->size();
    fresh_.clear();
  }
  /// Whether this invocation is still re-executing journaled code: no call so far was new, and
  /// some journaled entry of the workflow's own is still ahead.
  bool replaying() const { return !reached_new_ && matched_ < journal_->top_level(); }
  /// The first of the workflow's own entries, in journal order, that the journal held when this
  /// invocation began and that no call of it has met so far; null when every one was. Patch
  /// markers are left out (a marker with no call left is a patch removed once deprecated), and
  /// so are nested entries (their bodies meet them) and the entries this invocation journaled in
  /// place. Strict replay's question (ReplayRules).
  const JournalEntry* first_unmet() const;

 private:
  Match next(std::string_view id, bool check);
  void leave_track();
  // An entry past met_ was journaled by this invocation in place: its own call's, none to meet.
  void meet(std::size_t position);

  Journal* journal_;
  std::size_t position_ = 0;  // on track: the index of the next expected entry
  std::size_t matched_ = 0;   // entries met so far in this invocation by next()
  std::size_t unmet_;         // the workflow's own entries held at the start (markers left
                              // out) that no call has met yet
  bool on_track_ = true;
  bool reached_new_ = false;  // a call found no entry: the code is past its journal
  std::vector<bool> met_;     // by position, for the entries held when the invocation began
  std::unordered_map<std::string, int> uses_;   // off track: uses so far per id
  std::unordered_map<std::string, int> fresh_;  // on track past the journal: new uses per id
};

}  // namespace durable::detail
