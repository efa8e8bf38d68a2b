// SPDX-License-Identifier: Apache-2.0
// The lifecycle's table (lifecycle.hpp): every change of a run's status is one of its rows.
#include "lifecycle.hpp"

#include <array>

#include "errors_internal.hpp"

namespace durable::detail {

namespace {

using enum Status;
constexpr Statuses kNone{};

// A row each: the move, its name, the statuses it leaves and enters, whether only the run's
// owner may make it, and its history line.
constexpr std::array<MoveRule, 17> kTable{{
    {Move::start, "start", kNone, {pending, paused}, false, "started"},
    {Move::claim, "claim", {pending, sleeping, waiting}, {running}, false, "claimed"},
    {Move::take_over, "take over", {running}, {running}, false, "taken over"},
    {Move::suspend, "suspend", {running}, {sleeping, waiting}, true, "suspended"},
    {Move::end, "end", {running}, {completed, failed}, true, "ended"},
    {Move::release, "release", {running}, {pending, paused}, true, "released"},
    {Move::yield, "yield", {running}, {pending, paused}, true, ""},
    {Move::pause, "pause", {pending, sleeping, waiting}, {paused}, false, "paused"},
    {Move::pause_at_boundary,
     "pause at a boundary",
     {running},
     {paused},
     true,
     "paused at a step boundary, as asked"},
    {Move::pause_orphaned,
     "pause an orphan",
     {running},
     {paused},
     false,
     "paused, as asked: its worker died before it reached a step boundary"},
    {Move::resume, "resume", {paused}, {pending, sleeping, waiting}, false, "resumed"},
    {Move::wake, "wake", {waiting}, {pending}, false, "woken"},
    {Move::cancel, "cancel", kUnended, {cancelled}, false, "cancelled"},
    {Move::expire, "expire", kUnended, {failed}, false, "its deadline passed"},
    {Move::quarantine, "quarantine", kLive, {failed}, false, "quarantined"},
    {Move::close, "close", {failed}, {cancelled}, false, "cancelled"},
    {Move::requeue, "requeue", {failed, pending, sleeping}, {pending}, false, "requeued"},
}};

constexpr bool rows_in_order() {
  for (std::size_t i = 0; i < kTable.size(); ++i) {
    if (static_cast<std::size_t>(kTable[i].move) != i) return false;
  }
  return true;
}
static_assert(rows_in_order(), "kTable holds one row per Move, in the enum's order");

// The statuses in the order of a run's life, which Statuses::sql() keeps: the partial indexes'
// predicates (sqlite_schema.cpp) spell their sets in it, and SQLite matches them verbatim.
constexpr std::array<Status, 8> kAll{pending,   sleeping, waiting,   running,
                                     completed, failed,   cancelled, paused};

template <typename Each>
std::string joined(const Statuses& set, std::string_view between, std::string_view last,
                   Each each) {
  std::string out;
  std::size_t left = 0;
  for (Status s : kAll) left += set.has(s) ? 1 : 0;
  for (Status s : kAll) {
    if (!set.has(s)) continue;
    out += each(s);
    --left;
    if (left > 1) out += between;
    if (left == 1) out += last;
  }
  return out;
}

}  // namespace

std::string Statuses::sql() const {
  return "(" +
         joined(*this, " OR ", " OR ",
                [](Status s) { return "status = '" + std::string(to_string(s)) + "'"; }) +
         ")";
}

std::string Statuses::names() const {
  return joined(*this, ", ", " or ", [](Status s) { return std::string(to_string(s)); });
}

const MoveRule& rule(Move move) { return kTable[static_cast<std::size_t>(move)]; }

bool allowed(Move move, std::optional<Status> from, Status to) {
  const MoveRule& row = rule(move);
  if (!row.to.has(to)) return false;
  return from ? row.from.has(*from) : row.from.empty();
}

void check_move(Move move, std::optional<Status> from, Status to, std::string_view run_id) {
  if (allowed(move, from, to)) return;
  const MoveRule& row = rule(move);
  bug("run " + std::string(run_id) + ": '" + std::string(row.name) + "' cannot take a run " +
      (from ? "that is " + std::string(to_string(*from)) : std::string("that does not exist")) +
      " to " + std::string(to_string(to)) + " (it takes " +
      (row.from.empty() ? std::string("a new run") : row.from.names()) + " to " + row.to.names() +
      ")");
}

}  // namespace durable::detail
