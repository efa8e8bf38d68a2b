// SPDX-License-Identifier: Apache-2.0
#pragma once
// ChangeWatch: waiting for a named thing of a run to change (a published value's key; a run's
// stream next), without polling the store in a loop. Whoever reads a run's value from the store
// and finds nothing new waits here, and reads again once woken.
//
// Contract:
//  - Topics: (run id, name). A change is announced by the process that committed it, at once
//    (changed(), after the commit), and from other processes by a ChangeFeed (store.hpp): on
//    PostgreSQL a NOTIFY sent in the committing transaction (LISTENed to on one connection of
//    the watch's own), on SQLite the file's data_version looked at every poll interval (any
//    change there wakes every waiter: it says something changed, not what).
//  - A change of (run id, "") says the run ended: it wakes every waiter of the run.
//  - A waiter takes a mark() BEFORE it reads the store, and waits with that mark: a change
//    announced between the mark and the wait wakes it at once, so no change is missed. Wake-ups
//    may be spurious (another topic's change, an SQLite change of anything): the waiter reads
//    again and, finding nothing new, waits again with a fresh mark.
//  - wait() blocks the calling thread until a change, or the deadline. async_wait() holds no
//    thread and no database connection while it waits: its callback is called once, with true
//    for a change or false at the deadline, on the thread that announced the change (a committing
//    thread, the watch's thread) or the caller's own when the change came before; it must be
//    quick (post the real work elsewhere) and must not call back into the watch under a lock
//    it holds. cancel() stops a pending async wait; its callback is then never called, unless it
//    was already being called.
//  - One thread per watch, started at the first wait: it reads the feed and times out async
//    waits. A feed that fails (a broken connection) is opened again after a poll interval;
//    meanwhile every waiter is woken each poll interval, so waits degrade to polling.
//  - Thread-safe. The destructor ends the thread; pending async waits are called with false.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "change_feed.hpp"
#include "env.hpp"

namespace durable::detail {

class ChangeWatch {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  using FeedOpener = std::function<std::unique_ptr<ChangeFeed>()>;
  /// `open_feed` (may be empty: no other process writes) is called on the watch's thread;
  /// `poll` is how often a polling feed is looked at (RuntimeOptions::poll_interval); `env`
  /// outlives the watch.
  ChangeWatch(FeedOpener open_feed, std::chrono::milliseconds poll, Env& env = Env::system());
  ~ChangeWatch();
  ChangeWatch(const ChangeWatch&) = delete;
  ChangeWatch& operator=(const ChangeWatch&) = delete;

  using Mark = std::uint64_t;
  /// Taken before reading the store; see the contract above.
  Mark mark();
  /// This process committed a change of (run_id, name): wakes its waiters now.
  void changed(std::string_view run_id, std::string_view name);
  /// Blocks until a change of (run_id, name) since `since`, or the deadline; true for a change
  /// (maybe spurious).
  bool wait(std::string_view run_id, std::string_view name, Mark since, Deadline deadline);

  struct Waiter;
  using Handle = std::shared_ptr<Waiter>;
  /// Calls `done` once: true after a change since `since`, false at the deadline.
  Handle async_wait(std::string_view run_id, std::string_view name, Mark since, Deadline deadline,
                    std::function<void(bool)> done);
  void cancel(const Handle& waiter);

  /// "RUN_ID/NAME": a topic as feeds announce it (run ids hold no '/').
  static std::string topic(std::string_view run_id, std::string_view name);
  /// The deadline of a wait of `wait` from now: none when zero or negative, and a century at
  /// most (milliseconds::max() would overflow a time point).
  Deadline deadline_after(std::chrono::milliseconds wait);

  /// The loop of a blocking read that waits: calls `read(last)` after a mark, and returns the
  /// answer it gives (a std::optional holding one), or waits for a change of (run_id, name) and
  /// reads again. `last` is true once the deadline has passed: `read` must answer then.
  template <class Read>
  auto read_until_changed(std::string_view run_id, std::string_view name, Deadline deadline,
                          Read read) {
    for (;;) {
      const Mark since = mark();  // before the read: no change is missed
      if (auto answer = read(env_.steady_now() >= deadline)) return *answer;
      wait(run_id, name, since, deadline);
    }
  }

 private:
  class FeedReader;
  void start_thread();
  void run_thread();
  Deadline expire(std::unique_lock<std::mutex>& lock);
  std::optional<ChangeFeed::Changes> look(std::unique_lock<std::mutex>& lock, FeedReader& reader,
                                          Deadline earliest);
  void announce(std::unique_lock<std::mutex>& lock, const ChangeFeed::Changes& changes);
  /// Wakes the waiters of `topic`, or all of them when it is empty (lock held); the callbacks
  /// to call once the lock is let go are added to `due`.
  using Callbacks = std::vector<std::function<void(bool)>>;
  void wake(const std::string& topic, Callbacks& due);
  /// Takes the waiters `pred` picks off the list, their callbacks into `due` (lock held).
  template <class Pred>
  void take(Callbacks& due, const Pred& pred);
  static void call(Callbacks& due, bool changed);

  FeedOpener open_feed_;
  std::chrono::milliseconds poll_;
  Env& env_;
  std::mutex mutex_;
  std::condition_variable wake_thread_;
  std::list<Handle> waiters_;
  Mark generation_ = 0;  // counts the changes announced
  bool started_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace durable::detail
