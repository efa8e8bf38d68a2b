// SPDX-License-Identifier: Apache-2.0
// A run's lifecycle: its statuses, the transitions between them and the history line each
// writes. The table is lifecycle.cpp's; RunLifecycle::change_status (src/store/lifecycle.cpp) is
// the one writer of runs.status, and checks every change against it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "durable/options.hpp"

namespace durable::detail {

/// A set of statuses.
class Statuses {
 public:
  constexpr Statuses(std::initializer_list<Status> statuses) {
    for (Status s : statuses) bits_ |= bit(s);
  }
  constexpr bool has(Status status) const { return (bits_ & bit(status)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  /// As an SQL predicate on the column `status`: "(status = 'a' OR status = 'b')", in the order
  /// of a run's life (pending, sleeping, waiting, running, completed, failed, cancelled,
  /// paused), the partial indexes' own. Not an IN list: SQLite uses a partial index only for a
  /// query whose terms include its predicate verbatim, and evaluates an IN list of more than
  /// two values through a temporary table it builds at every execution (docs/performance.md).
  std::string sql() const;
  /// "pending, sleeping or waiting", for messages.
  std::string names() const;

 private:
  static constexpr std::uint8_t bit(Status s) {
    return static_cast<std::uint8_t>(1U << static_cast<unsigned>(s));
  }
  std::uint8_t bits_ = 0;
};

/// The statuses of a run that has ended: completed, failed or cancelled (what wait() waits for;
/// a failed run may still be retried).
inline constexpr Statuses kEnded{Status::completed, Status::failed, Status::cancelled};
/// A run that has not ended and is not paused: a worker may claim or hold it.
inline constexpr Statuses kLive{Status::pending, Status::sleeping, Status::waiting,
                                Status::running};
/// A run that has not ended.
inline constexpr Statuses kUnended{Status::pending, Status::sleeping, Status::waiting,
                                   Status::running, Status::paused};

/// Whether a run with this status has ended.
constexpr bool ended(Status status) { return kEnded.has(status); }

/// Why a run's status changes: a row of the lifecycle's table each.
enum class Move : std::uint8_t {
  start,              // made: pending, or paused when its workflow is paused
  claim,              // a worker takes a run that is due
  take_over,          // a worker takes a running run whose owner died or whose lease lapsed
  suspend,            // the owner journals a sleep or a wait
  end,                // the owner journals the run's end
  release,            // the owner hands the run back (it stops, a body outlived its timeout)
  yield,              // the owner gives its turn up (fair share): no history line
  pause,              // an operator pauses a run no worker holds
  pause_at_boundary,  // the owner reaches a step boundary of a run asked to pause
  pause_orphaned,     // a run asked to pause whose owner died before a boundary
  resume,             // an operator resumes a paused run where it was
  wake,               // what a waiting run waited for came
  cancel,             // an operator, or its parent's end, cancels a run
  expire,             // its deadline passed
  quarantine,         // its workers died too often holding it
  close,              // an operator cancels a failed run: closed, its error kept
  requeue,            // retry, or a step resolved by hand: due again
};

/// A row of the table: the statuses it leaves and enters, whether only the run's owner may
/// make it (the ownership fence: running under that owner), and its history line's default
/// (empty: the change is not recorded in the history).
struct MoveRule {
  Move move;
  std::string_view name;
  Statuses from;  // empty for start: a run that did not exist
  Statuses to;
  bool fenced;
  std::string_view history;
};

/// The row of `move`.
const MoveRule& rule(Move move);

/// Whether `from` → `to` is a change that `move` may make (`from` none: a new run).
bool allowed(Move move, std::optional<Status> from, Status to);

/// Throws durable's bug error, naming the run and the move, where allowed() is false:
/// an illegal change is a defect in durable, never a user's mistake.
void check_move(Move move, std::optional<Status> from, Status to, std::string_view run_id);

}  // namespace durable::detail
