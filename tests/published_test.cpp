// SPDX-License-Identifier: Apache-2.0
// Published values (Step::publish, Runtime::published, Client::published): journaled at their
// place, the latest per key, and waits that end as soon as the value is written, by this process
// or another on the same database.

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "store.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

// Publishes its phase around a step and a sleep of an hour.
Workflow phases_workflow() {
  return Workflow("phases", [](Step& step, const json&) -> json {
    step.publish("phase", "started");
    step.run("work", [] { return 1; });
    step.publish("phase", "halfway");
    step.sleep("rest", 1h);
    step.publish("phase", {{"done", true}});
    return 1;
  });
}

// Waits for the event "go", then publishes its data under "answer".
Workflow answer_workflow() {
  return Workflow("answer", [](Step& step, const json&) -> json {
    const std::optional<json> go = step.wait_for_event("go", "go", {.timeout = 1h});
    step.publish("answer", go.value_or(json()).value("n", 0));
    return "answered";
  });
}

detail::PublishedValue stored_value(const std::string& db, const std::string& run,
                                    const std::string& key) {
  const detail::PublishedRead read =
      detail::open_store(db, Durability::normal, nullptr)->published(run, key);
  REQUIRE(read.values.size() == 1);
  return read.values.front();
}

using durable::test::since;

}  // namespace

TEST_CASE(
    "step.publish keeps the latest value per key, readable during and after the run, and a "
    "replay does not publish again (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  test::ManualClock clock;
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  runtime->add(phases_workflow());
  const std::string id = runtime->start("phases");
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::sleeping);
  CHECK(runtime->published(id, "phase") == json("halfway"));
  // Two writes, whatever the replays of the invocations between them: each one re-executes the
  // first publish, which the journal holds.
  CHECK(stored_value(db, id, "phase").version == 2);
  CHECK(runtime->get(id).invocations >= 4);
  CHECK_FALSE(runtime->published(id, "other").has_value());

  clock.advance(2h);
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::completed);
  CHECK(runtime->published(id, "phase") == json{{"done", true}});
  CHECK(stored_value(db, id, "phase").version == 3);
  std::vector<std::string> keys;
  for (const StepInfo& s : runtime->steps(id)) {
    if (s.kind == "publish") keys.push_back(s.id);
  }
  CHECK(keys ==
        std::vector<std::string>{"[publish:phase]", "[publish:phase]#2", "[publish:phase]#3"});
}

TEST_CASE(
    "published with a wait returns as soon as another thread of this process publishes, not at "
    "its poll (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  RuntimeOptions opts = test::quiet(db);
  opts.poll_interval = 30s;  // a wake-up by polling would come far too late
  Runtime runtime(opts);
  runtime.add(answer_workflow());
  const std::string id = runtime.start("answer");
  runtime.run_until_idle();
  REQUIRE(runtime.get(id).status == Status::waiting);

  const auto began = std::chrono::steady_clock::now();
  std::thread publisher([&] {
    std::this_thread::sleep_for(300ms);  // the wait below has begun by then
    runtime.send_event("go", {{"n", 42}});
    runtime.run_until_idle();
  });
  const std::optional<json> answer = runtime.published(id, "answer", 20s);
  const auto took = since(began);
  publisher.join();
  CHECK(answer == json(42));
  CHECK(took >= 250ms);
  CHECK(took < 5s);
}

TEST_CASE("published with a wait returns as soon as another process publishes (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));  // poll_interval: its default, 200 ms
  Client client(db);
  const std::string id = client.start("publisher", {{"delay_ms", 500}, {"value", "ready"}});
  const auto began = std::chrono::steady_clock::now();
  const pid_t worker = ::fork();
  REQUIRE(worker >= 0);
  if (worker == 0) {
    ::execl(DURABLE_PUBLISH_WORKER, DURABLE_PUBLISH_WORKER, db.c_str(), id.c_str(),
            static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::optional<json> phase = runtime.published(id, "phase", 60s);
  const auto took = since(began);
  int status = 0;
  REQUIRE(::waitpid(worker, &status, 0) == worker);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(phase == json("ready"));
  CHECK(took >= 450ms);
  CHECK(took < 20s);  // not the end of the wait
  // A Client wakes the same way.
  const std::string second = client.start("publisher", {{"delay_ms", 300}, {"value", 2}});
  const pid_t again = ::fork();
  REQUIRE(again >= 0);
  if (again == 0) {
    ::execl(DURABLE_PUBLISH_WORKER, DURABLE_PUBLISH_WORKER, db.c_str(), second.c_str(),
            static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto client_began = std::chrono::steady_clock::now();
  CHECK(client.published(second, "phase", 60s) == json(2));
  CHECK(since(client_began) < 20s);
  REQUIRE(::waitpid(again, &status, 0) == again);
}

TEST_CASE(
    "a wait for a value ends with nullopt at its deadline, and at once for a run that ended "
    "without it (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));
  runtime.add(answer_workflow());
  runtime.add(Workflow("quiet", [](Step&, const json&) -> json { return 0; }));
  const std::string waiting = runtime.start("answer");
  runtime.run_until_idle();
  auto began = std::chrono::steady_clock::now();
  CHECK_FALSE(runtime.published(waiting, "answer", 300ms).has_value());
  CHECK(since(began) >= 290ms);
  CHECK(since(began) < 10s);

  const std::string ended = runtime.start("quiet");
  runtime.run_until_idle();
  REQUIRE(runtime.get(ended).status == Status::completed);
  began = std::chrono::steady_clock::now();
  CHECK_FALSE(runtime.published(ended, "answer", 30s).has_value());
  CHECK(since(began) < 10s);
}

TEST_CASE("published refuses bad keys, unknown runs and oversized values (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  RuntimeOptions opts = test::quiet(db);
  opts.max_output_bytes = 1000;
  Runtime runtime(opts);
  runtime.add(answer_workflow());
  const std::string id = runtime.start("answer");
  CHECK_THROWS_AS(runtime.published("no-such-run", "phase"), NotFound);
  CHECK_THROWS_AS(runtime.published("no-such-run", "phase", 50ms), NotFound);
  Client client(db);
  CHECK_THROWS_AS(client.published("no-such-run", "phase"), NotFound);
  for (const std::string& bad :
       {std::string(), std::string(201, 'k'), std::string("a/b"), std::string("a\nb")}) {
    CHECK_THROWS_AS(runtime.published(id, bad), Error);
    CHECK_THROWS_AS(client.published(id, bad), Error);
  }
  CHECK_NOTHROW(runtime.published(id, std::string(200, 'k')));
  CHECK_NOTHROW(runtime.published(id, "a#b [c] d:e"));

  // From workflow code: the same keys fail the run with a message naming the key's fault.
  const auto publishing = [](std::string key, json value) {
    return Workflow("bad-" + std::to_string(key.size()) + value.dump().substr(0, 3),
                    [key, value](Step& step, const json&) -> json {
                      step.publish(key, value);
                      return 0;
                    });
  };
  const auto failure_of = [&](Workflow wf) {
    const std::string name = wf.name();
    runtime.add(std::move(wf));
    const std::string run = runtime.start(name);
    runtime.run_until_idle();
    const RunInfo info = runtime.get(run);
    CHECK(info.status == Status::failed);
    CHECK(runtime.steps(run).empty());  // nothing journaled
    return info.error ? info.error->message : std::string();
  };
  CHECK(test::has(failure_of(publishing("", 1)), "must not be empty"));
  CHECK(test::has(failure_of(publishing("x/y", 1)), "contains '/'"));
  CHECK(test::has(failure_of(publishing(std::string(201, 'k'), 1)), "the limit is 200"));
  CHECK(test::has(failure_of(publishing("tab\t", 1)), "control character"));
  CHECK(test::has(failure_of(publishing("big", std::string(2000, 'x'))), "max_output_bytes"));
}

TEST_CASE("step.publish inside a step body is refused with a clear error (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));
  runtime.add(Workflow("inner", [](Step& step, const json&) -> json {
    return step.run("body", [&] {
      step.publish("phase", 1);
      return 0;
    });
  }));
  const std::string id = runtime.start("inner");
  runtime.run_until_idle();
  const RunInfo run = runtime.get(id);
  CHECK(run.status == Status::failed);
  REQUIRE(run.error.has_value());
  CHECK(test::has(run.error->message, "step.publish('phase') was called inside the body of"));
  CHECK_FALSE(runtime.published(id, "phase").has_value());
}

TEST_CASE(
    "a fork keeps the values its copied journal published, as of the step it forks from (on "
    "each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  test::ManualClock clock;
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  runtime->add(phases_workflow());
  const std::string id = runtime->start("phases");
  runtime->run_until_idle();
  clock.advance(2h);
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::completed);

  const std::string forked = runtime->fork(id, "rest");
  CHECK(runtime->published(forked, "phase") == json("halfway"));
  CHECK(stored_value(db, forked, "phase").version == 2);
  runtime->run_until_idle();
  clock.advance(2h);
  runtime->run_until_idle();
  REQUIRE(runtime->get(forked).status == Status::completed);
  CHECK(runtime->published(forked, "phase") == json{{"done", true}});
  CHECK(stored_value(db, forked, "phase").version == 3);
  CHECK(runtime->published(id, "phase") == json{{"done", true}});  // the original's, unchanged
}
