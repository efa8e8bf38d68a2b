// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the engine decides, for its host to carry out (DESIGN §11.3, decisions, not callbacks).
// The engine says what is to be run and what written; the host (the runtime, the replay check, a
// scripted test) runs and writes it, and says in a Resolution how it came out. A decision refers
// into the invocation that made it and holds only while it is carried out.
//
// At a wait point, on the run's own thread: RunBodies, WriteTransaction, and for a resident
// invocation Journal and Park; HandOver and Linger when a body was abandoned at its timeout.
// From a step body's thread, carried out before the body goes on: RunBodies of the steps nested
// in it, WriteNested, WriteStream and SaveProgress.

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "env.hpp"
#include "run_model.hpp"

namespace durable::detail {

struct Outcome;

/// How the write of one entry came out: in the store (kept), refused (the run is no longer the
/// host's to write: cancelled, taken over), or failed (error). Never throws.
using WriteDone = std::function<void(bool kept, std::exception_ptr error)>;

/// A body to run. A parallel step's entry is journaled as its body ends, from the body's thread,
/// so that a crash while its siblings run does not lose it: then, once `run` returned, `ended`
/// gives the entry (or null: nothing to journal), and the host tells `written` how its write
/// came out before the RunBodies that ran it is done.
struct BodyTask {
  std::function<void()> run;
  std::function<const EntryWrite*()> ended;  ///< empty: nothing is journaled as it ends
  WriteDone written;
};

namespace decide {

/// Run these bodies concurrently and return once all have returned (and their ended entries
/// are written).
struct RunBodies {
  std::vector<BodyTask>& bodies;
};
/// Journal a Step::transaction's entry now: its body runs in the store's transaction that
/// writes it. `done` is called before the decision is done.
struct WriteTransaction {
  const EntryWrite& write;
  WriteDone done;
};
/// A resident invocation (Replay::on_recovery) goes on in place: journal these entries now and
/// add them to the run's journal. Resolution::kept false: the invocation ends here.
struct Journal {
  std::vector<EntryWrite>& entries;
};
/// A resident invocation waits until the clock reads `wake_ms`, or the host gives up.
/// Resolution::now_ms: the time it then reads.
struct Park {
  std::int64_t wake_ms;
};
/// A body abandoned at its timeout still runs, so the invocation may not unwind yet: write its
/// outcome now and let the run go on elsewhere.
struct HandOver {
  Outcome& outcome;
};
/// Wait, holding no step thread where it can, until `done()` says true.
struct Linger {
  std::function<bool()> done;
};
/// A nested step's entry, journaled now from its body's thread. Resolution::kept false: refused.
struct WriteNested {
  const EntryWrite& write;
};
/// A step body's Step::write_stream (`value`, JSON text) or close_stream (nullopt), written now.
/// Throws Error when the stream is closed or the run is no longer the host's to write.
struct WriteStream {
  std::string stream;
  std::optional<std::string> value;
};
/// The progress a step body last reported (StepContext::heartbeat), stored for its next attempt.
struct SaveProgress {
  const std::string& key;
  int attempt;
  const json& progress;
};

}  // namespace decide

using Decision =
    std::variant<decide::RunBodies, decide::WriteTransaction, decide::Journal, decide::Park,
                 decide::HandOver, decide::Linger, decide::WriteNested, decide::WriteStream,
                 decide::SaveProgress>;

/// How a decision came out.
struct Resolution {
  bool kept = true;         ///< Journal, WriteNested: false when refused
  std::int64_t now_ms = 0;  ///< Park: the clock once it waited
};

/// The handlers of a host's carry_out, one per kind of decision, for std::visit.
template <class... F>
struct Handlers : F... {
  using F::operator()...;
};
// Clang before 17 deduces no aggregate's template arguments by itself (P1816).
template <class... F>
Handlers(F...) -> Handlers<F...>;

/// Carrying a decision out the plainest way, for hosts with no threads or store of their own:
/// runs bodies one after another on this thread, writing each ended entry with `write`.
void run_in_turn(std::vector<BodyTask>& bodies,
                 const std::function<bool(const EntryWrite&)>& write);
/// Writes one entry with `write` and tells `done` how it came out.
void write_at_once(const EntryWrite& entry, const WriteDone& done,
                   const std::function<bool(const EntryWrite&)>& write);
/// Polls `done` every 10 ms until it says true.
void linger_polling(const std::function<bool()>& done, Env& env);

}  // namespace durable::detail
