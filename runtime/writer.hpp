// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one writer of a runtime's runs. Every start, every invocation's outcome, every journal
// entry written apart from one (a nested step, a parallel body that ended), every stream value
// and progress a step body writes, and the heartbeat's renewals go through one queue; so do the
// writes that are transactions of their own (claims, releases, operators' changes), each alone
// in its turn. Writes that come while a transaction is in flight wait together, and the first of
// them commits them all in the next one, the others' included (leveldb's group commit: one
// transaction, and under Durability::full one sync, for the whole group). A lone write commits
// at once. The fence that keeps a run's writes to its owner is the store's, once per write. What
// can refuse one write (a run no longer held, a closed stream) is its result, not a throw; a
// throw is the database's failure (a full disk, a lost connection) and, as in leveldb, every
// caller of the group is told it: nothing of the group was written.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "run_model.hpp"
#include "store.hpp"

namespace durable::detail {

// Journal entries written apart from an invocation's outcome: placed at the run's next journal
// positions when their transaction begins, since other entries of the run may be queued too.
struct EntriesWrite {
  RunState* run;
  std::vector<EntryWrite> entries;
  RunWrite write;  // filled in by the transaction
};

class Writer {
 public:
  /// What one caller writes, and how it came out once its group committed.
  struct Request {
    std::vector<const NewRun*> starts;
    std::vector<const RunWrite*> writes;
    std::vector<EntriesWrite*> entries;
    std::vector<const StreamValue*> stream_values;
    std::vector<const ProgressWrite*> progress;
    std::vector<const Beat*> beats;
    /// A write of its own (a claim, a release, an operator's change: a store call that is its
    /// own transaction): run alone, in its turn in the queue, with nothing else in the request.
    std::function<void(Store&)> alone;
    std::vector<std::string> ids;       ///< of the starts, in order
    std::vector<Written> written;       ///< of the writes, then of the entries, in order
    std::vector<StreamWrite> streamed;  ///< of the stream values, in order
    std::vector<bool> saved;            ///< of the progress, in order
    std::exception_ptr error;           ///< what failed the request: nothing of it was written
    bool done = false;
  };
  /// Commits a group in one transaction, filling in each request's ids and written, or runs a
  /// group of one request that is `alone`; a throw fails every request of the group.
  using Commit = std::function<void(const std::vector<Request*>& group)>;

  explicit Writer(Commit commit) : commit_(std::move(commit)) {}

  /// Returns once the request's group committed; rethrows what failed it.
  void write(Request& request);
  /// Runs `write(store)` alone, in its turn, and returns what it returned; rethrows its throw.
  template <class F>
  std::invoke_result_t<F, Store&> alone(F&& write_alone) {
    using Result = std::invoke_result_t<F, Store&>;
    Request request;
    if constexpr (std::is_void_v<Result>) {
      request.alone = [&write_alone](Store& store) { write_alone(store); };
      write(request);
    } else {
      std::optional<Result> result;
      request.alone = [&](Store& store) { result.emplace(write_alone(store)); };
      write(request);
      return std::move(*result);
    }
  }
  /// Requests queued for the next transaction (for tests).
  std::size_t waiting();

 private:
  void lead(std::unique_lock<std::mutex>& lock);

  Commit commit_;
  std::mutex mutex_;  // guards queue_, leading_ and the requests' results
  std::condition_variable committed_;
  std::vector<Request*> queue_;
  bool leading_ = false;  // a caller is committing a group
};

// What a runtime's group transaction needs besides the store.
struct GroupContext {
  std::string owner;  // the worker whose runs these are
  std::int64_t now_ms;
  // The process is crashing (the crash sweep's halt): nothing more of its runs is written (their
  // writes refused, their stream values and progress dropped), and a failure of the transaction
  // refuses them rather than report it. Starts and beats are written as ever.
  const std::atomic<bool>* halted;
};

// A Writer::Commit for a store: the group's starts and writes in one write_group(), the entries
// placed at their runs' next positions; each run's next position moves past those written, and
// a run whose entry was written with a pause asked for is marked pausing.
void commit_group(Store& store, const GroupContext& context,
                  const std::vector<Writer::Request*>& group);

}  // namespace durable::detail
