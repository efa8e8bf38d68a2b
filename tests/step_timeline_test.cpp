// SPDX-License-Identifier: Apache-2.0
// The journal records when each run step's last attempt began, so that a timeline can place it:
// a parallel body's entry is written some time after the body ended, with others, and its
// updated_at says when the write happened, not when the body ran.

#include <SQLiteCpp/SQLiteCpp.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>

#include "admin.hpp"
#include "durations.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

std::int64_t ms_of(Clock::time_point t) { return detail::to_ms(t); }

struct Span {
  std::int64_t start, end;
};

// The most spans that hold one instant; a span holds [start, end).
std::size_t most_at_once(const std::vector<Span>& spans) {
  std::size_t most = 0;
  for (const Span& at : spans) {
    const auto n = std::count_if(spans.begin(), spans.end(), [&](const Span& s) {
      return s.start <= at.start && at.start < s.end;
    });
    most = std::max(most, static_cast<std::size_t>(n));
  }
  return most;
}

}  // namespace

TEST_CASE("each parallel item's journal entry records its own start and end (on each store)") {
  test::TempDir dir;
  RuntimeOptions opts = test::quiet(test::database(dir, "timeline.db"));
  opts.threads = 2;
  Runtime runtime(opts);
  std::mutex mutex;
  std::set<std::thread::id> threads;  // that ran a body: each ran its bodies one after another
  runtime.add(Workflow("resize", [&](Step& step, const json&) -> json {
    const std::vector<int> items = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    return step.map("image", items, [&](int item) {
      {
        std::lock_guard lock(mutex);
        threads.insert(std::this_thread::get_id());
      }
      std::this_thread::sleep_for(40ms);  // the work being timed
      return item;
    });
  }));
  const std::string id = runtime.start("resize");
  REQUIRE(runtime.wait(id, 30s).status == Status::completed);
  REQUIRE(threads.size() < 9);  // the items ran a few at a time, in waves

  const RunInfo run = runtime.get(id);
  std::vector<Span> spans;
  for (const StepInfo& s : runtime.steps(id)) {
    REQUIRE_MESSAGE(s.started_at.has_value(), s.id);
    REQUIRE(s.duration.has_value());
    const Span span{ms_of(*s.started_at), ms_of(*s.started_at) + s.duration->count()};
    CHECK(s.duration->count() >= 40);
    CHECK(span.start >= ms_of(run.created_at));
    CHECK(span.end <= ms_of(s.updated_at));  // journaled once it ended, not before
    spans.push_back(span);
  }
  REQUIRE(spans.size() == 9);
  // Each item's own span: no more of them at once than threads ran them, and the first wave
  // ended before the last one began, rather than all ending together.
  CHECK(most_at_once(spans) <= threads.size());
  const auto earliest_end = std::min_element(spans.begin(), spans.end(), [](auto& a, auto& b) {
                              return a.end < b.end;
                            })->end;
  const auto latest_start = std::max_element(spans.begin(), spans.end(), [](auto& a, auto& b) {
                              return a.start < b.start;
                            })->start;
  CHECK(earliest_end <= latest_start);

  // The API gives the start beside the duration.
  ops::Admin admin(opts.database);
  const json shown = admin.steps(id).at("steps");
  REQUIRE(shown.size() == 9);
  for (const StepInfo& s : runtime.steps(id)) {
    const auto it =
        std::find_if(shown.begin(), shown.end(), [&](const json& j) { return j.at("id") == s.id; });
    REQUIRE(it != shown.end());
    CHECK(it->at("started_at") == detail::utc_text(ms_of(*s.started_at)));
    CHECK(it->at("duration_ms") == s.duration->count());
  }
}

TEST_CASE("a retried step's entry records when its last attempt began") {
  test::TempDir dir;
  const std::string db = dir.file("retried.db");
  test::ManualClock clock;
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  int attempts = 0;
  runtime->add(Workflow("call", [&](Step& step, const json&) -> json {
    return step.run("call",
                    [&] {
                      if (++attempts == 1) {
                        clock.advance(250ms);
                        throw std::runtime_error("503 from the service");
                      }
                      clock.advance(100ms);
                      return 1;
                    },
                    {.retry = test::exact_policy(2, 1000ms)});
  }));
  const std::int64_t began = ms_of(clock.now());
  const std::string id = runtime->start("call");
  runtime->run_until_idle();  // the first attempt fails; the next is due a second after
  REQUIRE(runtime->get(id).status == Status::sleeping);
  std::vector<StepInfo> steps = runtime->steps(id);
  REQUIRE(steps.size() == 1);
  CHECK(ms_of(*steps[0].started_at) == began);
  CHECK(steps[0].duration->count() == 250);

  clock.advance(1000ms);
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::completed);
  steps = runtime->steps(id);
  CHECK(ms_of(*steps[0].started_at) == began + 1250);  // the second attempt's start
  CHECK(steps[0].duration->count() == 100);
  CHECK(steps[0].attempts == 2);
  runtime.reset();

  // An entry journaled before the start was recorded has none, and the API leaves it out.
  SQLite::Database(db, SQLite::OPEN_READWRITE).exec("UPDATE steps SET started_at = NULL");
  ops::Admin admin(db);
  const json step = admin.steps(id).at("steps").at(0);
  CHECK_FALSE(step.contains("started_at"));
  CHECK(step.at("duration_ms") == 100);
}
