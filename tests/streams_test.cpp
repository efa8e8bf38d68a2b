// SPDX-License-Identifier: Apache-2.0
// Runs' streams (Step::write_stream, close_stream, Runtime::read_stream, Client::read_stream):
// each value once from the workflow function however often it replays, a step body's values
// readable before the body ends, the run's end closing them, and waits that end as soon as a
// value or the close is written, by this process or another on the same database.

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

// Writes "a", runs a step, writes "b", sleeps an hour, writes "c"; never closes.
Workflow letters_workflow() {
  return Workflow("letters", [](Step& step, const json&) -> json {
    step.write_stream("out", "a");
    step.run("work", [] { return 1; });
    step.write_stream("out", "b");
    step.sleep("rest", 1h);
    step.write_stream("out", {{"letter", "c"}});
    return 3;
  });
}

using durable::test::since;

// The failure message of a run of `wf`, which must fail.
std::string failure_of(Runtime& runtime, Workflow wf) {
  const std::string name = wf.name();
  runtime.add(std::move(wf));
  const std::string run = runtime.start(name);
  runtime.run_until_idle();
  const RunInfo info = runtime.get(run);
  CHECK(info.status == Status::failed);
  return info.error ? info.error->message : std::string();
}

}  // namespace

TEST_CASE(
    "step.write_stream from the workflow function writes each value once however often the run "
    "replays, and the run's end closes the stream (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  test::ManualClock clock;
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  runtime->add(letters_workflow());
  const std::string id = runtime->start("letters");
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::sleeping);
  CHECK(runtime->get(id).invocations >= 3);  // the first write was replayed, not written again
  StreamRead read = runtime->read_stream(id, "out");
  CHECK(read.values == std::vector<json>{"a", "b"});
  CHECK(read.next == 2);
  CHECK_FALSE(read.closed);
  // A stream the run never wrote reads as empty and open while the run goes on.
  read = runtime->read_stream(id, "other");
  CHECK(read.values.empty());
  CHECK(read.next == 0);
  CHECK_FALSE(read.closed);

  clock.advance(2h);
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::completed);
  read = runtime->read_stream(id, "out", 1);
  CHECK(read.values == std::vector<json>{"b", json{{"letter", "c"}}});
  CHECK(read.next == 3);
  CHECK(read.closed);  // the run ended
  read = runtime->read_stream(id, "out", 10);
  CHECK(read.values.empty());
  CHECK(read.next == 10);
  CHECK(read.closed);
  CHECK(runtime->read_stream(id, "other").closed);
  Client client(db);
  CHECK(client.read_stream(id, "out").values.size() == 3);

  std::vector<std::string> keys;
  for (const StepInfo& s : runtime->steps(id)) {
    if (s.kind == "stream") keys.push_back(s.id);
  }
  CHECK(keys == std::vector<std::string>{"[stream:out]", "[stream:out]#2", "[stream:out]#3"});
}

TEST_CASE(
    "a value written inside a step body is readable before the body ends, and close_stream "
    "ends the stream (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  RuntimeOptions opts = test::quiet(db);
  opts.poll_interval = 30s;  // a wake-up by polling would come far too late
  Runtime runtime(opts);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  runtime.add(Workflow("tokens", [released](Step& step, const json&) -> json {
    const int n = step.run("generate", [&] {
      for (int i = 0; i < 3; ++i) step.write_stream("tokens", "t" + std::to_string(i));
      released.wait();
      return 3;
    });
    step.close_stream("tokens");
    step.sleep("linger", 1h);  // the close, not the run's end, closes the stream
    return n;
  }));
  const std::string id = runtime.start("tokens");
  std::thread worker([&] { runtime.run_until_idle(); });

  std::vector<json> seen;
  std::size_t next = 0;
  const auto began = std::chrono::steady_clock::now();
  while (seen.size() < 3 && since(began) < 20s) {
    const StreamRead read = runtime.read_stream(id, "tokens", next, 5s);
    seen.insert(seen.end(), read.values.begin(), read.values.end());
    next = read.next;
    CHECK_FALSE(read.closed);
  }
  CHECK(seen == std::vector<json>{"t0", "t1", "t2"});
  CHECK(since(began) < 10s);
  for (const StepInfo& s : runtime.steps(id)) CHECK(s.id != "generate");  // not journaled yet
  release.set_value();
  const StreamRead last = runtime.read_stream(id, "tokens", 3, 20s);  // woken by the close
  worker.join();
  CHECK(last.values.empty());
  CHECK(last.closed);
  CHECK(since(began) < 20s);
  CHECK(runtime.get(id).status == Status::sleeping);
}

TEST_CASE("read_stream with a wait returns as soon as another process writes (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));  // poll_interval: its default, 200 ms
  Client client(db);
  const std::string id =
      client.start("publisher", {{"delay_ms", 500}, {"value", "ready"}, {"stream", true}});
  const auto began = std::chrono::steady_clock::now();
  const pid_t worker = ::fork();
  REQUIRE(worker >= 0);
  if (worker == 0) {
    ::execl(DURABLE_PUBLISH_WORKER, DURABLE_PUBLISH_WORKER, db.c_str(), id.c_str(),
            static_cast<char*>(nullptr));
    _exit(127);
  }
  const StreamRead first = runtime.read_stream(id, "out", 0, 60s);
  const auto took = since(began);
  CHECK(first.values == std::vector<json>{"ready"});
  CHECK(took >= 450ms);
  CHECK(took < 20s);  // not the end of the wait
  const StreamRead closed = client.read_stream(id, "out", first.next, 60s);
  CHECK(closed.closed);
  int status = 0;
  REQUIRE(::waitpid(worker, &status, 0) == worker);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("read_stream ends its wait at the deadline with nothing (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));
  runtime.add(letters_workflow());
  const std::string id = runtime.start("letters");
  runtime.run_until_idle();
  const auto began = std::chrono::steady_clock::now();
  const StreamRead read = runtime.read_stream(id, "out", 2, 300ms);
  CHECK(read.values.empty());
  CHECK(read.next == 2);
  CHECK_FALSE(read.closed);
  CHECK(since(began) >= 290ms);
  CHECK(since(began) < 10s);
}

TEST_CASE(
    "streams refuse bad names, unknown runs, oversized values and writes after the close, "
    "writing nothing (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  RuntimeOptions opts = test::quiet(db);
  opts.max_output_bytes = 1000;
  Runtime runtime(opts);
  runtime.add(letters_workflow());
  const std::string id = runtime.start("letters");
  Client client(db);
  CHECK_THROWS_AS(runtime.read_stream("no-such-run", "out"), NotFound);
  CHECK_THROWS_AS(runtime.read_stream("no-such-run", "out", 0, 50ms), NotFound);
  CHECK_THROWS_AS(client.read_stream("no-such-run", "out"), NotFound);
  for (const std::string& bad :
       {std::string(), std::string(201, 's'), std::string("a/b"), std::string("a\nb")}) {
    CHECK_THROWS_AS(runtime.read_stream(id, bad), Error);
    CHECK_THROWS_AS(client.read_stream(id, bad), Error);
  }
  CHECK_NOTHROW(runtime.read_stream(id, std::string(200, 's')));

  const auto writing = [](std::string name, json value) {
    return Workflow("bad-" + std::to_string(name.size()) + value.dump().substr(0, 3),
                    [name, value](Step& step, const json&) -> json {
                      step.write_stream(name, value);
                      return 0;
                    });
  };
  CHECK(test::has(failure_of(runtime, writing("", 1)), "must not be empty"));
  CHECK(test::has(failure_of(runtime, writing("x/y", 1)), "contains '/'"));
  CHECK(test::has(failure_of(runtime, writing("tab\t", 1)), "control character"));
  CHECK(test::has(failure_of(runtime, writing("big", std::string(2000, 'x'))), "max_output_bytes"));

  // A write after the close, from the workflow function or a step body: nothing written.
  runtime.add(Workflow("reopen", [](Step& step, const json&) -> json {
    step.write_stream("s", 1);
    step.close_stream("s");
    step.close_stream("s");  // closing again does nothing
    step.write_stream("s", 2);
    return 0;
  }));
  const std::string reopen = runtime.start("reopen");
  runtime.run_until_idle();
  REQUIRE(runtime.get(reopen).status == Status::failed);
  CHECK(test::has(runtime.get(reopen).error->message,
                  "step.write_stream('s'): the stream is closed"));
  CHECK(runtime.read_stream(reopen, "s").values == std::vector<json>{1});
  runtime.add(Workflow("body-reopen", [](Step& step, const json&) -> json {
    step.close_stream("s");
    return step.run("late", [&] {
      step.write_stream("s", 2);
      return 0;
    });
  }));
  const std::string body = runtime.start("body-reopen");
  runtime.run_until_idle();
  REQUIRE(runtime.get(body).status == Status::failed);  // not retried: it cannot succeed
  CHECK(test::has(runtime.get(body).error->message, "the stream is closed"));
  CHECK(runtime.read_stream(body, "s").values.empty());

  // Inside a step.transaction's body, which runs inside the store's write: refused.
  const std::string refused =
      failure_of(runtime, Workflow("in-tx", [](Step& step, const json&) -> json {
                   return step.transaction("tx", [&](Sql&) {
                     step.write_stream("s", 1);
                     return 0;
                   });
                 }));
  CHECK(test::has(refused,
                  "step.write_stream('s') was called inside the body of "
                  "step.transaction 'tx'"));
}

TEST_CASE(
    "a step body's write after its run was cancelled is refused and writes nothing (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(test::quiet(db));
  std::promise<void> entered, release;
  std::promise<std::string> refusal;
  std::shared_future<void> released = release.get_future().share();
  runtime.add(Workflow("cancelled", [&](Step& step, const json&) -> json {
    return step.run("body", [&] {
      entered.set_value();
      released.wait();
      try {
        step.write_stream("s", 1);
      } catch (const Error& e) {
        refusal.set_value(e.what());
        return 0;
      }
      refusal.set_value("");
      return 1;
    });
  }));
  const std::string id = runtime.start("cancelled");
  std::thread worker([&] { runtime.run_until_idle(); });
  entered.get_future().wait();
  runtime.cancel(id, "the test");
  release.set_value();
  const std::string message = refusal.get_future().get();
  worker.join();
  CHECK(test::has(message, "the run is no longer running in this process"));
  const StreamRead read = runtime.read_stream(id, "s");
  CHECK(read.values.empty());
  CHECK(read.closed);
}

TEST_CASE(
    "a fork's stream holds the values of the writes its copied journal holds, and goes on from "
    "there (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  test::ManualClock clock;
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  runtime->add(letters_workflow());
  const std::string id = runtime->start("letters");
  runtime->run_until_idle();
  clock.advance(2h);
  runtime->run_until_idle();
  REQUIRE(runtime->get(id).status == Status::completed);
  const std::string fork = runtime->fork(id, "rest");
  StreamRead read = runtime->read_stream(fork, "out");
  CHECK(read.values == std::vector<json>{"a", "b"});
  CHECK_FALSE(read.closed);
  runtime->run_until_idle();
  clock.advance(2h);
  runtime->run_until_idle();
  REQUIRE(runtime->get(fork).status == Status::completed);
  read = runtime->read_stream(fork, "out");
  CHECK(read.values == std::vector<json>{"a", "b", json{{"letter", "c"}}});
  CHECK(read.closed);
}

TEST_CASE(
    "a cancel in this process wakes a read of the run's stream at once, not at the poll (on "
    "each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  RuntimeOptions opts = test::quiet(db);
  opts.poll_interval = 30s;  // a wake-up by polling would come far too late
  Runtime runtime(opts);
  runtime.add(letters_workflow());
  const std::string id = runtime.start("letters");
  runtime.run_until_idle();
  REQUIRE(runtime.get(id).status == Status::sleeping);
  const auto began = std::chrono::steady_clock::now();
  std::thread canceller([&] {
    std::this_thread::sleep_for(300ms);  // the read below waits by then
    runtime.cancel(id, "the test");
  });
  const StreamRead read = runtime.read_stream(id, "out", 2, 20s);
  canceller.join();
  CHECK(read.values.empty());
  CHECK(read.closed);
  CHECK(since(began) >= 250ms);
  CHECK(since(began) < 10s);
}
