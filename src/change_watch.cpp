// SPDX-License-Identifier: Apache-2.0
// ChangeWatch (see the contract in change_watch.hpp). Every wait, blocking or not, is a Waiter
// in one list: a blocking wait is an async wait whose callback wakes its own thread. A change
// completes the waiters of its topic (all of them for a change of unknown topic); the watch's
// thread completes those past their deadlines and reads the feed.

#include "change_watch.hpp"

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>

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

ChangeWatch::ChangeWatch(FeedOpener open_feed, std::chrono::milliseconds poll, Env& env)
    : open_feed_(std::move(open_feed)),
      poll_(std::max(poll, std::chrono::milliseconds(1))),
      env_(env) {}

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
  return env_.steady_now() + std::clamp<std::chrono::milliseconds>(wait, {}, kLongest);
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
  if (!env_.wait_until(outcome->ended, lock, deadline,
                       [&] { return outcome->changed.has_value(); })) {
    lock.unlock();
    cancel(waiter);
    return false;
  }
  return *outcome->changed;
}

void ChangeWatch::start_thread() {
  if (started_) return;
  started_ = true;
  thread_ = env_.start_thread([this] { run_thread(); });
}

// The watch thread's reading of the database's feed, with no lock held. The feed is opened on
// that thread while anyone waits (a watch no one waits on opens no connection), and again a
// poll interval after it failed; while it is away, every waiter reads again once a poll
// interval.
class ChangeWatch::FeedReader {
 public:
  using Changes = ChangeFeed::Changes;
  FeedReader(const FeedOpener& open, std::chrono::milliseconds poll, Env& env)
      : open_(open),
        poll_(poll),
        env_(env),
        next_open_(env.steady_now()),
        next_poll_(next_open_ + poll) {}

  // Opens the feed when there is none and it is time to try, or reads a LISTEN feed's
  // notifications until `until` (a slice at most). Nothing when the feed polls or is away.
  std::optional<Changes> open_or_listen(Deadline until) {
    const auto now = env_.steady_now();
    if (!feed_ && open_ && now >= next_open_) {
      try {
        feed_ = open_();
      } catch (const std::exception&) {
        return failed();  // the database is away: waits poll until it is back
      }
      // What changed before the feed began is not in it (a baseline taken now, a LISTEN from
      // now on): the waiters read again.
      if (feed_) return Changes{true, {}};
    }
    if (!feed_ || feed_->polls()) return std::nullopt;
    const auto slice =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::min(until, now + kFeedSlice) - now);
    try {
      return feed_->next(std::max(slice, std::chrono::milliseconds(1)));
    } catch (const std::exception&) {
      return failed();
    }
  }

  // A polling feed, or none, is looked at every poll interval.
  Deadline next_poll() const { return next_poll_; }
  // Whether that time has come; if so, the next is a poll interval from now.
  bool poll_due() {
    const auto now = env_.steady_now();
    if (now < next_poll_) return false;
    next_poll_ = now + poll_;
    return true;
  }
  Changes poll() {
    if (!feed_) return Changes{open_ != nullptr, {}};  // no feed for now: every waiter polls
    try {
      return feed_->next({});
    } catch (const std::exception&) {
      return failed();
    }
  }

  // After an idle time: the looks keep their beat, not restarted by the wait that ended it. A
  // change made just after a wait began is then seen within a poll interval, half of one on
  // average.
  void keep_beat() {
    const auto now = env_.steady_now();
    if (next_poll_ <= now) next_poll_ += ((now - next_poll_) / poll_ + 1) * poll_;
  }

 private:
  Changes failed() {
    feed_.reset();
    next_open_ = env_.steady_now() + poll_;
    return Changes{true, {}};
  }

  const FeedOpener& open_;
  std::chrono::milliseconds poll_;
  Env& env_;
  std::unique_ptr<ChangeFeed> feed_;
  Deadline next_open_;
  Deadline next_poll_;
};

// The watch's thread: completes the async waits past their deadlines, and reads the feed while
// anyone waits.
void ChangeWatch::run_thread() {
  FeedReader reader(open_feed_, poll_, env_);
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (waiters_.empty()) {
      wake_thread_.wait(lock, [&] { return stopping_ || !waiters_.empty(); });
      reader.keep_beat();
      continue;
    }
    const Deadline earliest = expire(lock);
    if (const std::optional<ChangeFeed::Changes> changes = look(lock, reader, earliest)) {
      announce(lock, *changes);
    }
  }
}

// Calls back the waiters past their deadlines, the lock let go meanwhile; returns the earliest
// deadline of those left.
ChangeWatch::Deadline ChangeWatch::expire(std::unique_lock<std::mutex>& lock) {
  const auto now = env_.steady_now();
  Callbacks expired;
  take(expired, [&](const Waiter& w) { return w.deadline <= now; });
  auto earliest = Deadline::max();
  for (const Handle& waiter : waiters_) earliest = std::min(earliest, waiter->deadline);
  lock.unlock();
  call(expired, false);
  lock.lock();
  return earliest;
}

// One look for changes: the feed opened now, a LISTEN feed's notifications, or the look of a
// polling feed (or of none) once its poll interval has passed; a new waiter or a stop wakes
// that wait early, to look at the deadlines again. Nothing when there was no look.
std::optional<ChangeFeed::Changes> ChangeWatch::look(std::unique_lock<std::mutex>& lock,
                                                     FeedReader& reader, Deadline earliest) {
  lock.unlock();
  std::optional<ChangeFeed::Changes> seen = reader.open_or_listen(earliest);
  lock.lock();
  if (seen) return seen;
  env_.wait_until(wake_thread_, lock, std::min(earliest, reader.next_poll()));
  if (stopping_ || !reader.poll_due()) return std::nullopt;
  lock.unlock();
  seen = reader.poll();
  lock.lock();
  return seen;
}

// Wakes the waiters of what changed, their callbacks called with the lock let go.
void ChangeWatch::announce(std::unique_lock<std::mutex>& lock, const ChangeFeed::Changes& changes) {
  Callbacks due;
  if (changes.anything) {
    wake({}, due);
  } else {
    for (const std::string& changed : changes.topics) wake(changed, due);
  }
  if (due.empty()) return;
  lock.unlock();
  call(due, true);
  lock.lock();
}

}  // namespace durable::detail
