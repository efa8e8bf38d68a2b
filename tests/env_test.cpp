// SPDX-License-Identifier: Apache-2.0
// The Env (DESIGN §11.3): a runtime reads its clocks, waits, starts its threads and draws its
// randomness through the Env it is given, so a test can put the whole runtime on a world of its
// own. (tests/check_env.cmake holds the code to it; these hold the runtime to what it is given.)

#include "env.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "durations.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace std::chrono_literals;

namespace {

using durable::Clock;
using durable::detail::Env;

// The system's world, with a wall clock that stands at 2031-01-01 and a count of what the
// runtime asked of it.
class CountingEnv final : public Env {
 public:
  static constexpr std::int64_t kStartMs = 1'924'992'000'000;  // 2031-01-01T00:00:00Z

  Clock::time_point now() override {
    ++clock_reads;
    return Clock::time_point(std::chrono::milliseconds(kStartMs));
  }
  Steady steady_now() override {
    ++steady_reads;
    return system().steady_now();
  }
  bool wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                  Steady until) override {
    ++waits;
    return system().wait_until(cv, lock, until);
  }
  void sleep_until(Steady until) override { system().sleep_until(until); }
  std::thread start_thread(std::function<void()> body) override {
    ++threads;
    return system().start_thread(std::move(body));
  }
  std::uint64_t random() override {
    ++draws;
    return 0x00c0ffee00c0ffeeULL;
  }

  using Env::wait_until;

  std::atomic<int> clock_reads{0}, steady_reads{0}, waits{0}, threads{0}, draws{0};
};

durable::Workflow reads_the_clock() {
  return durable::Workflow("reads-the-clock", [](durable::Step& step, const durable::json&) {
    const Clock::time_point at = step.now("at");
    // Two bodies at once: they go to the step threads.
    auto a = step.start("a", [] { return 1; });
    auto b = step.start("b", [] { return 2; });
    const auto [x, y] = durable::all(a, b);
    return durable::json{{"at_ms", durable::detail::to_ms(at)}, {"sum", x + y}};
  });
}

}  // namespace

TEST_CASE("a runtime reads its time, starts its threads and draws its seeds through its Env") {
  durable::test::TempDir dir;
  auto env = std::make_shared<CountingEnv>();
  durable::RuntimeOptions options = durable::test::quiet(dir.file("env.db"));
  options.threads = 2;
  durable::Runtime runtime(options);
  durable::detail::RuntimeAccess::core(runtime).set_env(env);
  CHECK(env->draws > 0);  // the runtime's generator of retry seeds, seeded anew
  runtime.add(reads_the_clock());
  const std::string id = runtime.start("reads-the-clock", durable::json::object());

  const durable::RunInfo run = runtime.wait(id, 30s);
  REQUIRE(run.status == durable::Status::completed);
  // The time the run records and the time step.now() journals are the Env's.
  CHECK(durable::detail::to_ms(run.created_at) == CountingEnv::kStartMs);
  CHECK(run.output.at("at_ms") == CountingEnv::kStartMs);
  CHECK(run.output.at("sum") == 3);
  // The ids are the Env's too: its time, then its random bits.
  CHECK(id.substr(0, 12) == "01c03276e000");
  CHECK(id.substr(12) == "00c0ffee00c0ffee");
  // Its threads: the two step threads, the lease's heartbeat and the watch for work that other
  // processes make due. And the wait's deadline and pauses.
  CHECK(env->threads == 4);
  CHECK(env->steady_reads > 0);
  CHECK(env->clock_reads > 0);
}

TEST_CASE("a runtime's Env is given before its threads start: after, it is a bug") {
  durable::test::TempDir dir;
  durable::Runtime runtime(durable::test::quiet(dir.file("late.db")));
  runtime.add(reads_the_clock());
  runtime.start("reads-the-clock", durable::json::object());
  runtime.run_until_idle();  // the step threads have started
  auto& core = durable::detail::RuntimeAccess::core(runtime);
  CHECK_THROWS_WITH_AS(core.set_env(std::make_shared<CountingEnv>()),
                       doctest::Contains("before its threads start"), durable::Error);
}

TEST_CASE("an Env's waits end when woken or at the deadline, and a wait without end is one") {
  Env& env = Env::system();
  std::mutex mutex;
  std::condition_variable cv;
  bool ready = false;
  {
    std::unique_lock lock(mutex);
    const auto before = env.steady_now();
    CHECK_FALSE(env.wait_for(cv, lock, 20ms, [&] { return ready; }));
    CHECK(env.steady_now() - before >= 20ms);
  }
  // milliseconds::max() would overflow a time point: it waits until woken.
  std::thread waker = env.start_thread([&] {
    env.sleep_for(10ms);
    {
      std::lock_guard lock(mutex);
      ready = true;
    }
    cv.notify_all();
  });
  {
    std::unique_lock lock(mutex);
    CHECK(env.wait_for(cv, lock, std::chrono::milliseconds::max(), [&] { return ready; }));
  }
  waker.join();
}

TEST_CASE("a manual clock's Env stands still until moved, and ids follow it") {
  durable::detail::ManualClockEnv env(Clock::time_point(std::chrono::milliseconds(1000)));
  CHECK(env.now_ms() == 1000);
  env.advance(std::chrono::seconds(2));
  CHECK(env.now_ms() == 3000);
  CHECK(env.new_id().substr(0, 12) == "000000000bb8");
  env.set(Clock::time_point(std::chrono::milliseconds(5)));
  CHECK(env.now_ms() == 5);
  CHECK(env.new_id() != env.new_id());  // the system's random bits
}
