// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a run is to the engine and to the store alike: its state across invocations and the
// journal writes an invocation hands to the store. Below both: the store's interface includes
// this, not the engine.

#include <cstdint>
#include <durable/sql.hpp>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "journal.hpp"

namespace durable::detail {

/// A wake time that never comes: a wait with no timeout.
inline constexpr std::int64_t kNever = INT64_MAX;

/// What one run is, as the engine needs it across its invocations.
struct RunState {
  std::string id, workflow, correlation_id;
  /// The W3C traceparent the run joins (its caller's, or its parent's invoke step); empty: its
  /// trace id is derived from its id.
  std::string traceparent;
  std::int64_t created_at_ms = 0;
  json input;
  int invocations = 0;  ///< invocations made so far, this one not included
  /// Its tags as claimed (StartOptions::tags, and those its step.set_tags merged in since).
  std::map<std::string, std::string> tags;
  Journal journal;
  std::size_t next_seq = 0;  ///< the journal position the next new entry is written at
  /// A write of the run came back Written::pausing: its runtime's next write at a step boundary
  /// pauses it (the runtime's, not the engine's).
  bool pausing = false;
};

struct TransactionStep;

/// Thrown out of a transaction body when its host halted meanwhile (the crash sweep's crash):
/// the store's transaction ends with nothing of it written, as if the process had died in it.
struct Halted {};

/// A journal entry to write: new, or an update of the entry with its key.
struct EntryWrite {
  JournalEntry entry;
  bool is_new = true;
  /// A Step::transaction: the store runs its body in the transaction that writes the entry, and
  /// writes what it ends in instead of `entry`.
  std::shared_ptr<TransactionStep> transaction{};
  /// A nested step's write: the attempt of the body it is nested in (0: not nested), for its
  /// span's parent. Not stored.
  int outer_attempt = 0;
};

/// The body of a Step::transaction, as the store runs it: in a savepoint of the transaction that
/// writes its entry, on the store's own connection (`session`).
struct TransactionStep {
  /// Runs the body; the entry of the step completed with its result. Throws what the body threw.
  std::function<EntryWrite(SqlSession& session)> run;
  /// The entry of the attempt that threw `error`, its writes rolled back.
  std::function<EntryWrite(std::exception_ptr error)> failed;
  /// What the store wrote, once it has (set again if the transaction ran again).
  std::optional<JournalEntry> written;
  /// Why its SQL ended the store's transaction, once it has: the write is made again with
  /// this attempt failed, not run.
  std::optional<std::string> ended;
};

}  // namespace durable::detail
