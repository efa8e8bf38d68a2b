// SPDX-License-Identifier: Apache-2.0
// durable::Client: starting runs by name, events, reads, cancel and retry on a database served by
// others, and wait() that only watches, in this process and across processes.

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>

#include "stores.hpp"
#include "support.hpp"
#include "worker_workflows.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

using test::Serving;

RuntimeOptions options_on(const std::string& db) {
  return {.database = db, .poll_interval = 20ms, .log_level = LogLevel::off};
}

// "greet": one step; the output is "hello NAME".
Workflow greet_workflow(std::atomic<int>* bodies = nullptr) {
  return Workflow("greet", [bodies](Step& step, const json& input) -> json {
    return step.run("say", [&] {
      if (bodies != nullptr) ++*bodies;
      return "hello " + input.value("name", std::string("nobody"));
    });
  });
}

// "flaky": its step fails for good while *failing is set.
Workflow flaky_workflow(std::atomic<bool>* failing) {
  return Workflow("flaky", [failing](Step& step, const json&) -> json {
    return step.run("call", [failing] {
      if (*failing) throw NonRetryableError("the service said no");
      return 7;
    });
  });
}

// What a callable threw, as text; empty when it threw nothing.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

json wrapped(int depth) {
  json value = 1;
  for (int i = 0; i < depth; ++i) value = json::array({value});
  return value;
}

bool ended(Status status) {
  return status == Status::completed || status == Status::failed || status == Status::cancelled;
}

}  // namespace

TEST_CASE(
    "a client starts a run of a workflow its process never added, and a runtime serves it (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Client client(db);
  const std::string id = client.start("greet", {{"name", "ann"}});
  CHECK(client.get(id).status == Status::pending);
  CHECK(client.get(id).history.back().reason.find("no worker has registered") != std::string::npos);

  Runtime runtime(options_on(db));
  runtime.add(greet_workflow());
  runtime.run_until_idle();
  const RunInfo run = client.get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output == "hello ann");
  CHECK(run.workflow == "greet");
  const std::vector<StepInfo> steps = client.steps(id);
  REQUIRE(steps.size() == 1);
  CHECK(steps[0].id == "say");
  CHECK(steps[0].output == "hello ann");

  // Once a worker has registered the workflow, a start is not flagged.
  const std::string second = client.start("greet");
  CHECK(client.get(second).history.back().reason.find("no worker") == std::string::npos);
}

TEST_CASE(
    "a client start honours the idempotency key, the correlation id and a delayed start (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Client client(db);
  const std::string first = client.start("greet", json::object(), {.idempotency_key = "order-1"});
  CHECK(client.start("greet", json::object(), {.idempotency_key = "order-1"}) == first);
  CHECK(client.list({.workflow = "greet"}).size() == 1);

  const std::string traced = client.start("greet", json::object(), {.correlation_id = "trace-9"});
  CHECK(client.get(traced).correlation_id == "trace-9");
  const std::vector<RunInfo> of_trace = client.list({.correlation_id = "trace-9"});
  REQUIRE(of_trace.size() == 1);
  CHECK(of_trace[0].id == traced);

  const auto later = Clock::now() + 1h;
  const std::string delayed = client.start("greet", json::object(), {.at = later});
  REQUIRE(client.get(delayed).wake_at.has_value());
  CHECK(*client.get(delayed).wake_at >= later - 1ms);

  Runtime runtime(options_on(db));
  runtime.add(greet_workflow());
  runtime.run_until_idle();
  CHECK(client.get(first).status == Status::completed);
  CHECK(client.get(traced).status == Status::completed);
  CHECK(client.get(delayed).status == Status::pending);
  CHECK(client.list({.status = Status::completed}).size() == 2);
}

TEST_CASE(
    "client wait returns the run once a runtime of this process serving it ends it (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  std::atomic<bool> release{false};
  Runtime runtime(options_on(db));
  runtime.add(Workflow("gated", [&release](Step& step, const json&) -> json {
    return step.run("gate", [&release] {
      while (!release) std::this_thread::sleep_for(1ms);
      return "through";
    });
  }));
  Serving serving(runtime);
  Client client(db);
  const std::string id = client.start("gated");
  std::thread opener([&] {
    // Opens the gate once the run is executing, so that wait() is watching when it ends.
    const auto give_up = std::chrono::steady_clock::now() + 60s;
    while (client.get(id).status != Status::running && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(1ms);
    }
    release = true;
  });
  const auto began = std::chrono::steady_clock::now();
  const RunInfo run = client.wait(id, 60s);
  const auto took = std::chrono::steady_clock::now() - began;
  opener.join();
  CHECK(run.status == Status::completed);
  CHECK(run.output == "through");
  CHECK(took < 30s);  // came back at the end, not at the timeout
}

TEST_CASE(
    "client wait executes nothing: a due run stays pending and its body never runs (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  std::atomic<int> bodies{0};
  Runtime runtime(options_on(db));  // has the workflow, but never asked to execute anything
  runtime.add(greet_workflow(&bodies));
  Client client(db);
  const std::string id = client.start("greet", {{"name", "bo"}});
  const RunInfo run = client.wait(id, 300ms);
  CHECK(run.status == Status::pending);
  CHECK(run.invocations == 0);
  CHECK(run.worker.empty());
  CHECK(bodies == 0);
  CHECK(client.steps(id).empty());

  // A Runtime's wait, by contrast, executes the work.
  CHECK(runtime.wait(id, 60s).status == Status::completed);
  CHECK(bodies == 1);
}

TEST_CASE(
    "client wait returns the unfinished run as it is when the timeout passes (on each store)") {
  test::TempDir dir;
  Client client(test::database(dir, "db"));
  const std::string id = client.start("nobody-serves-this", {{"x", 1}});
  const RunInfo run = client.wait(id, 50ms);
  CHECK(run.id == id);
  CHECK(run.status == Status::pending);
  CHECK(run.input == json{{"x", 1}});
  CHECK_FALSE(run.history.empty());
  CHECK(client.wait(id, 0ms).status == Status::pending);
  CHECK(client.wait(id, -5ms).status == Status::pending);
}

TEST_CASE(
    "client wait wakes when another thread cancels the run through the same client (on each "
    "store)") {
  test::TempDir dir;
  Client client(test::database(dir, "db"));
  const std::string id = client.start("nobody-serves-this");
  std::atomic<bool> waiting{false};
  RunInfo run;
  std::chrono::steady_clock::duration took{};
  std::thread waiter([&] {
    waiting = true;
    const auto began = std::chrono::steady_clock::now();
    run = client.wait(id, 60s);
    took = std::chrono::steady_clock::now() - began;
  });
  while (!waiting) std::this_thread::sleep_for(1ms);
  // The waiter is about to watch, or watching: either way the cancel must end its wait.
  std::this_thread::sleep_for(20ms);
  client.cancel(id, "not needed");
  waiter.join();
  CHECK(run.status == Status::cancelled);
  CHECK(took < 30s);
}

TEST_CASE("client calls on an unknown run id throw NotFound (on each store)") {
  test::TempDir dir;
  Client client(test::database(dir, "db"));
  CHECK_THROWS_AS(client.get("no-such-run"), NotFound);
  CHECK_THROWS_AS(client.steps("no-such-run"), NotFound);
  CHECK_THROWS_AS(client.cancel("no-such-run"), NotFound);
  CHECK_THROWS_AS(client.retry("no-such-run"), NotFound);
  CHECK_THROWS_AS(client.wait("no-such-run", 10ms), NotFound);
  CHECK(error_of([&] { client.get("no-such-run"); }) ==
        "[durable.not_found] no run with id 'no-such-run'");
}

TEST_CASE(
    "a client refuses bad input with the same errors as a runtime, and writes nothing (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(options_on(db));
  runtime.add(greet_workflow());
  Client client(db);
  const json too_deep = wrapped(100);
  const json too_large = std::string(5u << 20, 'x');
  const json not_a_number = std::nan("");

  for (const json& bad : {too_deep, too_large, not_a_number}) {
    const std::string from_client = error_of([&] { client.start("greet", bad); });
    CHECK_FALSE(from_client.empty());
    CHECK(from_client == error_of([&] { runtime.start("greet", bad); }));
    const std::string event_error = error_of([&] { client.send_event("tick", bad); });
    CHECK(test::has(event_error, "the data of event 'tick'"));
    CHECK(event_error == error_of([&] { runtime.send_event("tick", bad); }));
  }
  CHECK(test::has(error_of([&] { client.start("greet", too_large); }), "max_output_bytes"));
  CHECK(error_of([&] { client.send_event("", {}); }) ==
        "[durable.invalid_argument] an event needs a name");
  CHECK(error_of([&] { client.send_event("", {}); }) ==
        error_of([&] { runtime.send_event("", {}); }));
  CHECK(error_of([&] { client.start(""); }) ==
        "[durable.invalid_argument] a run needs a workflow name");
  CHECK_THROWS_AS(client.start(""), Error);
  CHECK(client.list().empty());
  CHECK_THROWS_AS(Client(":memory:"), Error);
  CHECK_THROWS_AS(Client(""), Error);
}

TEST_CASE(
    "client cancel with a reason closes a failed run, and cancels a pending one (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  std::atomic<bool> failing{true};
  Runtime runtime(options_on(db));
  runtime.add(flaky_workflow(&failing));
  runtime.add(greet_workflow());
  Client client(db);
  const std::string failed = client.start("flaky");
  runtime.run_until_idle();
  REQUIRE(client.get(failed).status == Status::failed);

  client.cancel(failed, "the service is gone for good");
  const RunInfo closed = client.get(failed);
  CHECK(closed.status == Status::cancelled);
  CHECK(test::has(closed.history.back().reason, "the service is gone for good"));
  REQUIRE(closed.error.has_value());
  CHECK(closed.error->message == "the service said no");
  CHECK_THROWS_AS(client.retry(failed), Error);

  const std::string pending = client.start("greet");
  client.cancel(pending);
  CHECK(runtime.run_until_idle() == 0);
  CHECK(client.get(pending).status == Status::cancelled);
  CHECK(client.steps(pending).empty());

  // A completed run is left as it is.
  const std::string done = client.start("greet");
  runtime.run_until_idle();
  client.cancel(done, "too late");
  CHECK(client.get(done).status == Status::completed);
}

TEST_CASE(
    "client retry queues a failed run again, and refuses one that is not failed (on each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  std::atomic<bool> failing{true};
  Runtime runtime(options_on(db));
  runtime.add(flaky_workflow(&failing));
  Client client(db);
  const std::string id = client.start("flaky");
  runtime.run_until_idle();
  REQUIRE(client.get(id).status == Status::failed);
  CHECK(client.steps(id).at(0).status == "failed");

  failing = false;
  client.retry(id);
  CHECK(client.get(id).status == Status::pending);
  runtime.run_until_idle();
  const RunInfo run = client.get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output == 7);
  CHECK_THROWS_AS(client.retry(id), Error);
}

TEST_CASE(
    "client send_event starts the runs it triggers and wakes the runs waiting for it (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db");
  Runtime runtime(options_on(db));
  runtime.add(Workflow(
      "on_paid", [](Step&, const json& input) -> json { return input.at("data").at("order"); },
      {.events = {"order.paid"}}));
  runtime.add(Workflow("approval", [](Step& step, const json& input) -> json {
    const auto approval = step.wait_for_event(
        "approved", "order.approved", {.timeout = 1h, .match = {{"order", input.at("order")}}});
    return approval ? approval->at("by") : json("timed out");
  }));
  Client client(db);
  const std::string waiting = client.start("approval", {{"order", 7}});
  runtime.run_until_idle();
  REQUIRE(client.get(waiting).status == Status::waiting);

  client.send_event("order.paid", {{"order", 42}});
  client.send_event("order.approved", {{"order", 7}, {"by", "ann"}});
  runtime.run_until_idle();
  const std::vector<RunInfo> triggered = client.list({.workflow = "on_paid"});
  REQUIRE(triggered.size() == 1);
  CHECK(triggered[0].status == Status::completed);
  CHECK(triggered[0].output == 42);
  CHECK(client.get(waiting).status == Status::completed);
  CHECK(client.get(waiting).output == "ann");
}

TEST_CASE(
    "a client in a second process starts runs by name and awaits each, served by the first (on "
    "each store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db"), log = dir.file("bodies");
  Runtime runtime(options_on(db));
  runtime.add(test::job_workflow(log));
  Serving serving(runtime);

  const std::string command = std::string(DURABLE_CLIENT_WORKER) + " " + db + " 5";
  const auto [status, out] = test::run_shell(command);
  CHECK(status == 0);

  std::istringstream lines(out);
  std::string id, state, output;
  int runs = 0;
  while (lines >> id >> state >> output) {
    ++runs;
    CHECK(state == "completed");
    CHECK(output == "45");
    CHECK(runtime.get(id).status == Status::completed);
  }
  CHECK(runs == 5);
  CHECK(runtime.list({.status = Status::completed, .workflow = "job"}).size() == 5);
}

TEST_CASE(
    "a client awaits runs that a serving process executes, each as soon as it ends (on each "
    "store)") {
  test::TempDir dir;
  const std::string db = test::database(dir, "db"), log = dir.file("bodies");
  Client client(db);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(client.start("job", {{"i", i}}));
  const pid_t worker = ::fork();
  REQUIRE(worker >= 0);
  if (worker == 0) {
    if (std::freopen("/dev/null", "w", stdout) == nullptr) _exit(126);
    ::execl(DURABLE_SERVE_WORKER, DURABLE_SERVE_WORKER, db.c_str(), log.c_str(),
            static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto began = std::chrono::steady_clock::now();
  std::vector<RunInfo> runs;
  for (const std::string& id : ids) runs.push_back(client.wait(id, 60s));
  const auto took = std::chrono::steady_clock::now() - began;
  ::kill(worker, SIGTERM);
  int status = 0;
  REQUIRE(::waitpid(worker, &status, 0) == worker);
  CHECK(WIFEXITED(status));
  for (const RunInfo& run : runs) {
    CHECK(ended(run.status));
    CHECK(run.status == Status::completed);
    CHECK(run.output == 45);
  }
  CHECK(took < 30s);
}
