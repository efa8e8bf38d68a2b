// SPDX-License-Identifier: Apache-2.0
// ChangeWatch (src/change_watch.hpp): its contract, with a scripted feed in place of a database.

#include "change_watch.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <future>

#include "store.hpp"

using durable::detail::ChangeFeed;
using durable::detail::ChangeWatch;
using namespace std::chrono_literals;

namespace {

// A feed that waits (as PostgreSQL's does) and reports the topics the test pushes.
class ScriptedFeed final : public ChangeFeed {
 public:
  struct Script {
    std::mutex mutex;
    std::vector<std::string> topics;
    std::atomic<int> opened{0};
  };
  explicit ScriptedFeed(std::shared_ptr<Script> script) : script_(std::move(script)) {}
  bool polls() const override { return false; }
  Changes next(std::chrono::milliseconds timeout) override {
    std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(5)));
    Changes changes;
    std::lock_guard lock(script_->mutex);
    changes.topics.swap(script_->topics);
    return changes;
  }

 private:
  std::shared_ptr<Script> script_;
};

ChangeWatch::Deadline in(std::chrono::milliseconds d) {
  return std::chrono::steady_clock::now() + d;
}

}  // namespace

TEST_CASE("change watch: a change of this process wakes the waiters of its topic only") {
  ChangeWatch watch({}, 10s);
  std::atomic<int> woken_a{0}, woken_b{0};
  const auto mark = watch.mark();
  watch.async_wait("run", "a", mark, in(60s), [&](bool changed) { woken_a += changed ? 1 : 100; });
  const auto b = watch.async_wait("run", "b", mark, in(60s), [&](bool) { ++woken_b; });
  watch.changed("run", "a");
  CHECK(woken_a == 1);
  CHECK(woken_b == 0);
  watch.changed("run", "a");  // a callback is called once
  CHECK(woken_a == 1);
  watch.cancel(b);
  watch.changed("run", "b");
  CHECK(woken_b == 0);  // cancelled: never called
}

TEST_CASE("change watch: a change between the mark and the wait wakes the wait at once") {
  ChangeWatch watch({}, 10s);
  const auto mark = watch.mark();
  watch.changed("run", "a");
  const auto began = std::chrono::steady_clock::now();
  CHECK(watch.wait("run", "a", mark, in(30s)));
  CHECK(std::chrono::steady_clock::now() - began < 5s);
}

TEST_CASE("change watch: waits end at their deadlines, the blocking and the asynchronous") {
  ChangeWatch watch({}, 10s);
  auto began = std::chrono::steady_clock::now();
  CHECK_FALSE(watch.wait("run", "a", watch.mark(), in(100ms)));
  CHECK(std::chrono::steady_clock::now() - began >= 95ms);
  std::promise<bool> ended;
  began = std::chrono::steady_clock::now();
  watch.async_wait("run", "a", watch.mark(), in(100ms),
                   [&](bool changed) { ended.set_value(changed); });
  auto outcome = ended.get_future();
  REQUIRE(outcome.wait_for(10s) == std::future_status::ready);
  CHECK_FALSE(outcome.get());
  CHECK(std::chrono::steady_clock::now() - began >= 95ms);
}

TEST_CASE(
    "change watch: another process's change comes through the feed, and a feed opened after a "
    "wait began wakes it (what changed before it is not in the feed)") {
  auto script = std::make_shared<ScriptedFeed::Script>();
  ChangeWatch watch(
      [script] {
        ++script->opened;
        return std::make_unique<ScriptedFeed>(script);
      },
      10s);
  // The first wait starts the thread, which opens the feed: the waiter reads again.
  auto began = std::chrono::steady_clock::now();
  CHECK(watch.wait("run", "a", watch.mark(), in(30s)));
  CHECK(std::chrono::steady_clock::now() - began < 5s);
  CHECK(script->opened == 1);
  // From then on, a topic the feed reports wakes its waiters, long before the poll interval.
  std::promise<bool> woken;
  watch.async_wait("run", "a", watch.mark(), in(30s),
                   [&](bool changed) { woken.set_value(changed); });
  began = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(script->mutex);
    script->topics.push_back(ChangeWatch::topic("run", "a"));
  }
  auto outcome = woken.get_future();
  REQUIRE(outcome.wait_for(5s) == std::future_status::ready);
  CHECK(outcome.get());
  CHECK(std::chrono::steady_clock::now() - began < 5s);
}

TEST_CASE("change watch: its destructor ends pending asynchronous waits with false") {
  std::atomic<int> calls{0};
  bool changed = true;
  {
    ChangeWatch watch({}, 10s);
    watch.async_wait("run", "a", watch.mark(), in(60s), [&](bool c) {
      ++calls;
      changed = c;
    });
  }
  CHECK(calls == 1);
  CHECK_FALSE(changed);
}
