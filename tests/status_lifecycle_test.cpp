// SPDX-License-Identifier: Apache-2.0
// The lifecycle of a run (src/lifecycle.hpp): its table of moves, and the one writer of
// runs.status that applies them (src/store/lifecycle.cpp).
#include <doctest/doctest.h>

#include "lifecycle.hpp"
#include "store.hpp"
#include "store_support.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using detail::Move;

namespace {

constexpr Status kAll[] = {Status::pending,   Status::sleeping, Status::waiting,   Status::running,
                           Status::completed, Status::failed,   Status::cancelled, Status::paused};
constexpr Move kMoves[] = {Move::start,          Move::claim,  Move::take_over,
                           Move::suspend,        Move::end,    Move::release,
                           Move::yield,          Move::pause,  Move::pause_at_boundary,
                           Move::pause_orphaned, Move::resume, Move::wake,
                           Move::cancel,         Move::expire, Move::quarantine,
                           Move::close,          Move::requeue};

// The moves that may take a run from `from` to `to`.
std::vector<std::string_view> moves(std::optional<Status> from, Status to) {
  std::vector<std::string_view> found;
  for (Move move : kMoves) {
    if (detail::allowed(move, from, to)) found.push_back(detail::rule(move).name);
  }
  return found;
}

}  // namespace

TEST_CASE(
    "the lifecycle: a run that completed or was cancelled never changes again, a failed "
    "one only by a retry or a close, and only its owner takes it out of running") {
  for (Status to : kAll) {
    CHECK(moves(Status::completed, to).empty());
    CHECK(moves(Status::cancelled, to).empty());
  }
  CHECK(moves(Status::failed, Status::pending) == std::vector<std::string_view>{"requeue"});
  CHECK(moves(Status::failed, Status::cancelled) == std::vector<std::string_view>{"close"});
  // Out of running, only by its owner (a fenced move), but for what ends a run from outside it
  // (cancel, expire, quarantine) and a pause whose owner died.
  for (Move move : kMoves) {
    const detail::MoveRule& row = detail::rule(move);
    if (!row.from.has(Status::running) || row.fenced) continue;
    const bool outside = move == Move::cancel || move == Move::expire || move == Move::quarantine ||
                         move == Move::take_over || move == Move::pause_orphaned;
    CHECK_MESSAGE(outside, row.name);
  }
  // A new run is pending, or paused with its workflow; nothing else makes one.
  CHECK(moves(std::nullopt, Status::pending) == std::vector<std::string_view>{"start"});
  CHECK(moves(std::nullopt, Status::running).empty());
  CHECK(detail::ended(Status::failed));
  CHECK_FALSE(detail::ended(Status::paused));
}

TEST_CASE("the lifecycle: a move it does not hold is durable's bug, named") {
  CHECK_NOTHROW(detail::check_move(Move::end, Status::running, Status::completed, "r1"));
  try {
    detail::check_move(Move::end, Status::pending, Status::completed, "r1");
    FAIL("an end of a pending run was let through");
  } catch (const Error& e) {
    CHECK(test::has(e.what(), "a bug in durable"));
    CHECK(test::has(e.what(),
                    "run r1: 'end' cannot take a run that is pending to completed "
                    "(it takes running to completed or failed)"));
  }
  CHECK_THROWS_AS(detail::check_move(Move::wake, Status::waiting, Status::running, "r1"), Error);
  CHECK_THROWS_AS(detail::check_move(Move::claim, std::nullopt, Status::running, "r1"), Error);
}

TEST_CASE("the lifecycle's status sets are the partial indexes' predicates, word for word") {
  // SQLite uses a partial index only for a query that repeats its predicate (sqlite_schema.cpp).
  CHECK(detail::kLive.sql() ==
        "(status = 'pending' OR status = 'sleeping' OR status = 'waiting' OR status = 'running')");
  CHECK(detail::kEnded.sql() ==
        "(status = 'completed' OR status = 'failed' OR status = 'cancelled')");
  CHECK(detail::kUnended.sql() ==
        "(status = 'pending' OR status = 'sleeping' OR status = 'waiting' OR status = 'running' "
        "OR status = 'paused')");
  CHECK(detail::kUnended.names() == "pending, sleeping, waiting, running or paused");
}

TEST_CASE(
    "a run asked to pause and handed back by its owner is paused, and its history says "
    "paused (on each store)") {
  test::TempDir dir;
  const auto store =
      detail::open_store(test::database(dir, "lifecycle.db"), Durability::normal, nullptr);
  store->create_run(test::new_run("r1"));
  detail::ClaimRequest request = test::claim_of_w("A", 2);
  REQUIRE(store->claim(request).runs.size() == 1);
  REQUIRE(store->pause("r1", 3) == Status::running);  // marked: pausing
  CHECK_FALSE(store->release("r1", "B", 4, "handed back: its runtime was stopped"));
  REQUIRE(store->release("r1", "A", 4, "handed back: its runtime was stopped"));
  const std::optional<RunInfo> run = store->get_run("r1", true);
  REQUIRE(run);
  CHECK(run->status == Status::paused);
  REQUIRE_FALSE(run->history.empty());
  CHECK(run->history.back().status == Status::paused);
  CHECK(run->history.back().reason == "handed back: its runtime was stopped");
  // A turn given up (no reason) changes the status and writes no line.
  REQUIRE(store->resume("r1", 5) == Status::paused);
  request.now_ms = 6;
  REQUIRE(store->claim(request).runs.size() == 1);
  const std::size_t lines = store->get_run("r1", true)->history.size();
  REQUIRE(store->release("r1", "A", 7, ""));
  CHECK(store->get_run("r1", true)->status == Status::pending);
  CHECK(store->get_run("r1", true)->history.size() == lines);
}
