// SPDX-License-Identifier: Apache-2.0
// /metrics of the workers: each live worker's in-memory counters, written by its heartbeat, as
// counters of its own; and a worker that stopped beating leaves durable_workers and those series,
// and its row is forgotten unless a run it held still needs it.

#include <doctest/doctest.h>

#include <algorithm>

#include "admin.hpp"
#include "durations.hpp"
#include "prometheus_text.hpp"
#include "store.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace worker_metrics {

Workflow two_steps(const std::string& name) {
  return Workflow(name, [](Step& step, const json&) -> json {
    step.run("a", [] { return 1; });
    return step.run("b", [] { return 2; });
  });
}

// The worker label of the one worker whose runs_completed counter is `completed`, or empty.
std::string worker_with(const test::prometheus::Scrape& metrics, double completed) {
  for (const auto& s : metrics.of("durable_worker_runs_completed_total")) {
    if (s.value == completed) return s.labels.at("worker");
  }
  return {};
}

std::set<std::string> worker_ids(const std::vector<detail::Worker>& workers) {
  std::set<std::string> ids;
  for (const detail::Worker& w : workers) ids.insert(w.id);
  return ids;
}

}  // namespace worker_metrics

TEST_CASE("metrics: each live worker's counters are exported, and only go up (on each store)") {
  using test::prometheus::Labels;
  using test::prometheus::parse;
  test::TempDir dir;
  RuntimeOptions opts = test::quiet(test::database(dir, "workers.db"));
  opts.lease = 300ms;  // a heartbeat every 100 ms
  ops::Admin admin(opts.database);
  Runtime busy(opts);
  busy.add(worker_metrics::two_steps("count"));
  auto idle = std::make_unique<Runtime>(opts);
  idle->add(worker_metrics::two_steps("other"));
  idle->run_until_idle();  // beats from now on, counting nothing
  for (int i = 0; i < 3; ++i) {
    REQUIRE(busy.wait(busy.start("count"), 10s).status == Status::completed);
  }
  std::string worker;
  REQUIRE(test::eventually([&] {
    worker = worker_metrics::worker_with(parse(admin.metrics()), 3);
    return !worker.empty();
  }));
  std::string text = admin.metrics();
  auto metrics = parse(text);
  const Labels of_busy =
      metrics.of("durable_worker_steps_total", {{"worker", worker}}).at(0).labels;
  CHECK(of_busy.at("pid") == std::to_string(::getpid()));
  CHECK(of_busy.at("host").find(' ') == std::string::npos);  // the host name, not the identity
  CHECK(metrics.value("durable_workers") == 2);
  CHECK(metrics.values("durable_worker_steps_total", "worker").size() == 2);
  CHECK(metrics.values("durable_worker_start_time_seconds", "worker").size() == 2);
  CHECK(metrics.value("durable_worker_runs_started_total", of_busy) == 3);
  CHECK(metrics.value("durable_worker_steps_total", of_busy) == busy.counters().steps);
  CHECK(metrics.sum("durable_worker_steps_total") == busy.counters().steps);  // idle: 0
  CHECK(metrics.value("durable_worker_runs_failed_total", of_busy) == 0);
  for (const char* family :
       {"durable_worker_runs_started_total", "durable_worker_steps_total",
        "durable_worker_retries_total", "durable_worker_events_sent_total",
        "durable_worker_schedule_fires_total", "durable_worker_spans_exported_total",
        "durable_worker_spans_dropped_total"}) {
    CHECK_MESSAGE(metrics.types[family] == "counter", family);
  }
  const auto checked = test::prometheus::promtool_check(text, dir.file("workers.txt"));
  const std::string& said = checked.second;
  INFO("promtool check metrics said:\n" << said << "on this scrape:\n" << text);
  CHECK(checked.first == 0);
  CHECK(said.empty());

  // More work: each scrape reads no less than the one before, up to the new count.
  busy.send_event("ping");  // counted as sent
  REQUIRE(busy.wait(busy.start("count"), 10s).status == Status::completed);
  double last = 0;
  bool never_down = true;
  REQUIRE(test::eventually([&] {
    const auto now = parse(admin.metrics()).value("durable_worker_steps_total", of_busy);
    if (!now) return false;
    never_down = never_down && *now >= last;
    last = *now;
    return *now == busy.counters().steps;
  }));
  CHECK(never_down);
  CHECK(parse(admin.metrics()).value("durable_worker_events_sent_total", of_busy) == 1);

  // A closed runtime is gone from durable_workers and from the worker series at once.
  idle.reset();
  metrics = parse(admin.metrics());
  CHECK(metrics.value("durable_workers") == 1);
  CHECK(metrics.values("durable_worker_steps_total", "worker") == std::set<std::string>{worker});
}

TEST_CASE(
    "metrics: a worker that stopped beating leaves durable_workers, and its row is "
    "forgotten unless a running run still names it (on each store)") {
  using test::prometheus::parse;
  test::TempDir dir;
  const std::string db = test::database(dir, "dead.db");
  const auto store = detail::open_store(db, Durability::normal, nullptr);
  const std::int64_t now = detail::to_ms(Clock::now());
  const std::int64_t hour_ago = now - 3'600'000;
  const std::string host = "gone-host boot:0 pid:[1]";  // no live runtime's host
  const auto ghost = [&](const char* id) { return detail::Worker{id, host, 4242, 7}; };
  const std::string counted = R"({"runs_started": 5, "steps": 50})";
  // Silent for an hour, holding nothing: killed, say, on a host that is gone.
  store->register_worker(ghost("long-dead"), hour_ago);
  store->touch_worker(ghost("long-dead"), hour_ago, 30'000, counted);
  // Silent for an hour as well, but still holding a running run (its lease set long).
  store->register_worker(ghost("dead-holder"), hour_ago);
  store->touch_worker(ghost("dead-holder"), hour_ago, 30'000, counted);
  detail::NewRun run;
  run.id = "held";
  run.workflow = "elsewhere";  // no live worker has it: nobody takes the run over
  run.correlation_id = "held";
  run.input = "{}";
  run.now_ms = run.due_ms = hour_ago;
  store->create_run(run);
  detail::ClaimRequest claim;
  claim.owner = "dead-holder";
  claim.workflows = {"elsewhere"};
  claim.now_ms = hour_ago;
  claim.lease_ms = 2 * 3'600'000;
  claim.limit = 1;
  REQUIRE(store->claim(claim).runs.size() == 1);
  // Silent for three leases: dead to durable_workers, not yet forgotten (kForgetLeases).
  store->register_worker(ghost("recent"), now - 90'000);
  store->touch_worker(ghost("recent"), now - 90'000, 30'000, counted);

  ops::Admin admin(db);
  auto metrics = parse(admin.metrics());
  CHECK(metrics.value("durable_workers") == 0);
  CHECK(metrics.of("durable_worker_steps_total").empty());
  CHECK(metrics.of("durable_worker_start_time_seconds").empty());

  {
    // A live worker's heartbeat forgets the long-dead one, whatever its host.
    Runtime live(test::quiet(db));
    live.run_until_idle();
    REQUIRE(test::eventually([&] {
      return worker_metrics::worker_ids(store->workers_on(host)) ==
             std::set<std::string>{"dead-holder", "recent"};
    }));
    metrics = parse(admin.metrics());
    CHECK(metrics.value("durable_workers") == 1);
    const std::set<std::string> exported = metrics.values("durable_worker_steps_total", "worker");
    CHECK(exported.size() == 1);
    CHECK_FALSE(exported.contains("dead-holder"));
    CHECK_FALSE(exported.contains("recent"));
    // The held run still tells who holds it (and a claimer on its host could take it over).
    CHECK(store->get_run("held", false)->worker == "gone-host:4242");

    // Seen from two leases on, the live runtime has stopped beating as well.
    detail::ManualClockEnv two_leases_on(Clock::now() + 2 * RuntimeOptions{}.lease + 1s);
    ops::Admin later(db, {}, &two_leases_on);
    metrics = parse(later.metrics());
    CHECK(metrics.value("durable_workers") == 0);
    CHECK(metrics.of("durable_worker_steps_total").empty());
  }

  // Once its run is no longer running, the holder is forgotten too.
  CHECK(store->release("held", "dead-holder", now, "handed back"));
  CHECK(store->forget_dead_workers(now) == 1);
  CHECK(worker_metrics::worker_ids(store->workers_on(host)) == std::set<std::string>{"recent"});

  // A forgotten worker that beats again (it was only stalled) is registered anew, and live.
  store->touch_worker(ghost("long-dead"), now, 30'000, counted);
  CHECK(worker_metrics::worker_ids(store->workers_on(host)) ==
        std::set<std::string>{"long-dead", "recent"});
  metrics = parse(admin.metrics());
  CHECK(metrics.value("durable_workers") == 1);
  CHECK(metrics.value("durable_worker_steps_total",
                      {{"worker", "long-dead"}, {"host", "gone-host"}, {"pid", "4242"}}) == 50);
}
