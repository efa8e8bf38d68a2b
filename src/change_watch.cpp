// SPDX-License-Identifier: Apache-2.0
// ChangeWatch (see the contract in change_watch.hpp). Every wait, blocking or not, is a Waiter
// in one list: a blocking wait is an async wait whose callback wakes its own thread. A change
// completes the waiters of its topic (all of them for a change of unknown topic); the watch's
// thread completes those past their deadlines and reads the feed.

#include "change_watch.hpp"

#include <algorithm>
#include <exception>

#include "store.hpp"

namespace durable::detail {

struct ChangeWatch::Waiter {
  std::string topic;
  Mark since = 0;
  Deadline deadline;
  std::function<void(bool)> done;  // emptied once it is called or cancelled
};

namespace {

// How long the thread blocks on a feed that waits (PostgreSQL) before it looks at the deadlines
// of async waits again: an async wait times out at most this late.
constexpr std::chrono::milliseconds kFeedSlice{50};

}  // namespace

ChangeWatch::ChangeWatch(FeedOpener open_feed, std::chrono::milliseconds poll)
    : open_feed_(std::move(open_feed)), poll_(std::max(poll, std::chrono::milliseconds(1))) {}

ChangeWatch::~ChangeWatch() {
  Callbacks due;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    take(due, [](const Waiter&) { return true; });
  }
  wake_thread_.notify_all();
  if (thread_.joinable()) thread_.join();
  call(due, false);
}

ChangeWatch::Deadline ChangeWatch::deadline_after(std::chrono::milliseconds wait) {
  constexpr std::chrono::hours kLongest{24 * 365 * 100};
  return std::chrono::steady_clock::now() +
         std::clamp<std::chrono::milliseconds>(wait, {}, kLongest);
}

std::string ChangeWatch::topic(std::string_view run_id, std::string_view name) {
  std::string text(run_id);
  text.push_back('/');
  text += name;
  return text;
}

ChangeWatch::Mark ChangeWatch::mark() {
  std::lock_guard lock(mutex_);
  return generation_;
}

void ChangeWatch::changed(std::string_view run_id, std::string_view name) {
  Callbacks due;
  {
    std::lock_guard lock(mutex_);
    wake(topic(run_id, name), due);
  }
  call(due, true);
}

template <class Pred>
void ChangeWatch::take(Callbacks& due, const Pred& pred) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (pred(**it)) {
      due.push_back(std::move((*it)->done));
      (*it)->done = nullptr;
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void ChangeWatch::wake(const std::string& changed_topic, Callbacks& due) {
  ++generation_;
  // "RUN_ID/" (the run ended) is the prefix of each of the run's topics.
  const bool whole_run = !changed_topic.empty() && changed_topic.back() == '/';
  take(due, [&](const Waiter& w) {
    return changed_topic.empty() || w.topic == changed_topic ||
           (whole_run && w.topic.starts_with(changed_topic));
  });
}

void ChangeWatch::call(Callbacks& due, bool changed) {
  for (std::function<void(bool)>& done : due) {
    if (!done) continue;
    try {
      done(changed);
    } catch (...) {
      // A waiter's failure is its own: it must not fail the commit or thread that woke it.
    }
  }
  due.clear();
}

ChangeWatch::Handle ChangeWatch::async_wait(std::string_view run_id, std::string_view name,
                                            Mark since, Deadline deadline,
                                            std::function<void(bool)> done) {
  auto waiter = std::make_shared<Waiter>();
  waiter->topic = topic(run_id, name);
  waiter->since = since;
  waiter->deadline = deadline;
  {
    std::lock_guard lock(mutex_);
    // A change since the mark (of any topic: a mark is not per topic) wakes it at once.
    if (generation_ == since && !stopping_) {
      waiter->done = std::move(done);
      waiters_.push_back(waiter);
      start_thread();
    }
  }
  if (done) done(true);       // not queued: a change came after the mark
  wake_thread_.notify_all();  // its deadline may be the earliest
  return waiter;
}

void ChangeWatch::cancel(const Handle& waiter) {
  std::lock_guard lock(mutex_);
  waiters_.remove(waiter);
  waiter->done = nullptr;
}

bool ChangeWatch::wait(std::string_view run_id, std::string_view name, Mark since,
                       Deadline deadline) {
  struct WaitState {
    std::mutex mutex;
    std::condition_variable ended;
    std::optional<bool> changed;
  };
  auto outcome = std::make_shared<WaitState>();
  const Handle waiter = async_wait(run_id, name, since, deadline, [outcome](bool changed) {
    {
      std::lock_guard lock(outcome->mutex);
      outcome->changed = changed;
    }
    outcome->ended.notify_all();
  });
  std::unique_lock lock(outcome->mutex);
  if (!outcome->ended.wait_until(lock, deadline, [&] { return outcome->changed.has_value(); })) {
    lock.unlock();
    cancel(waiter);
    return false;
  }
  return *outcome->changed;
}

void ChangeWatch::start_thread() {
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] { run_thread(); });
}

// The watch's thread: completes the async waits past their deadlines, and reads the feed (opened
// here, so that a watch no one waits on opens no connection) while anyone waits.
void ChangeWatch::run_thread() {
  using std::chrono::steady_clock;
  std::unique_ptr<ChangeFeed> feed;
  auto next_open = steady_clock::now();
  auto next_poll = steady_clock::now() + poll_;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (waiters_.empty()) {
      wake_thread_.wait(lock, [&] { return stopping_ || !waiters_.empty(); });
      // The looks keep their beat, not restarted by the wait that ended the idle time: a change
      // made just after a wait began is then seen within a poll interval, half of one on average.
      const auto now = steady_clock::now();
      if (next_poll <= now) next_poll += ((now - next_poll) / poll_ + 1) * poll_;
      continue;
    }
    const auto now = steady_clock::now();
    Callbacks expired;
    take(expired, [&](const Waiter& w) { return w.deadline <= now; });
    auto earliest = steady_clock::time_point::max();
    for (const Handle& waiter : waiters_) earliest = std::min(earliest, waiter->deadline);
    ChangeFeed::Changes changes;
    bool failed = false;
    lock.unlock();
    call(expired, false);
    bool opened = false;
    if (!feed && open_feed_ && now >= next_open) {
      try {
        feed = open_feed_();
        // What changed before the feed began is not in it (a baseline taken now, a LISTEN
        // from now on): the waiters read again.
        opened = feed != nullptr;
      } catch (const std::exception&) {
        failed = true;  // the database is away: waits poll until it is back
      }
    }
    const bool listens = feed && !feed->polls() && !opened;
    if (listens) {
      const auto slice = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::min(earliest, now + kFeedSlice) - now);
      try {
        changes = feed->next(std::max(slice, std::chrono::milliseconds(1)));
      } catch (const std::exception&) {
        failed = true;
      }
    }
    lock.lock();
    if (opened) {
      changes.anything = true;
    } else if (!listens && !failed) {
      // A polling feed, or none: look every poll interval; a new waiter or a stop wakes this
      // early, to look at the deadlines again.
      wake_thread_.wait_until(lock, std::min(earliest, next_poll));
      if (stopping_ || steady_clock::now() < next_poll) continue;
      next_poll = steady_clock::now() + poll_;
      if (feed) {
        lock.unlock();
        try {
          changes = feed->next({});
        } catch (const std::exception&) {
          failed = true;
        }
        lock.lock();
      } else {
        changes.anything = open_feed_ != nullptr;  // no feed for now: every waiter polls
      }
    }
    if (failed) {
      feed.reset();
      next_open = steady_clock::now() + poll_;
      changes.anything = true;
    }
    Callbacks due;
    if (changes.anything) {
      wake({}, due);
    } else {
      for (const std::string& changed : changes.topics) wake(changed, due);
    }
    if (!due.empty()) {
      lock.unlock();
      call(due, true);
      lock.lock();
    }
  }
}

}  // namespace durable::detail
