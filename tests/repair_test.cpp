// SPDX-License-Identifier: Apache-2.0
// Deploying and repairing (DESIGN §8): run versions and only_own_version, Runtime::fork from a
// step, Runtime::resolve of a failed step, step.continue_as_new.

#include <doctest/doctest.h>

#include <atomic>
#include <durable/testing.hpp>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

// The input of a typed workflow (outside the anonymous namespace: its to_json goes unused).
struct Page {
  int page = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Page, page)

namespace {

// charge, then ship (which fails while `broken`), then notify; returns what ship returned.
Workflow order(const std::atomic<bool>& broken, std::atomic<int>& charges) {
  return Workflow("order", [&broken, &charges](Step& step, const json&) -> json {
    step.run("charge", [&] { return ++charges; });
    const int label = step.run("ship", [&]() -> int {
      if (broken) throw NonRetryableError("courier API rejected the address");
      return 7;
    });
    step.run("notify", [] { return true; });
    return label;
  });
}

std::vector<std::string> keys(Runtime& runtime, const std::string& run) {
  std::vector<std::string> out;
  for (const StepInfo& s : runtime.steps(run)) out.push_back(s.id);
  return out;
}

// A runtime on a store of its own with the order workflow added, shipping broken until a test
// fixes it.
struct Shop {
  test::TempDir dir;
  test::ManualClock clock;
  std::string db = test::database(dir, "db");
  std::atomic<bool> broken{true};
  std::atomic<int> charges{0};
  std::unique_ptr<Runtime> runtime = test::runtime_on(db, clock, test::quiet(db));
  Shop() { runtime->add(order(broken, charges)); }
};

std::string last_reason(const RunInfo& run) {
  return run.history.empty() ? "" : run.history.back().reason;
}

}  // namespace

TEST_CASE("versions: each run is stamped with the version of the runtime that started it, and a "
          "run of none with its first claimer's (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  const auto napping = [] {
    return Workflow("nap", [](Step& step, const json&) -> json {
      step.sleep("nap", 1h);
      return nullptr;
    });
  };
  std::string blue_run, unversioned;
  {
    RuntimeOptions opts = test::quiet(db);
    opts.version = "2026.11-blue";
    auto blue = test::runtime_on(db, clock, opts);
    blue->add(napping());
    blue_run = blue->start("nap");
    CHECK(blue->get(blue_run).version == "2026.11-blue");
  }
  {
    auto plain = test::runtime_on(db, clock, test::quiet(db));
    plain->add(napping());
    unversioned = plain->start("nap");
    CHECK(plain->get(unversioned).version.empty());
  }
  RuntimeOptions opts = test::quiet(db);
  opts.version = "2026.12-green";
  auto green = test::runtime_on(db, clock, opts);
  green->add(napping());
  green->run_until_idle();  // claims both; stamps only the one of no version
  CHECK(green->get(unversioned).version == "2026.12-green");
  CHECK(green->get(blue_run).version == "2026.11-blue");
  CHECK(green->get(blue_run).status == Status::sleeping);
}

TEST_CASE("only_own_version: a blue fleet and a green fleet on one database each finish the runs "
          "their own code began (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  std::atomic<int> blue_ran{0}, green_ran{0};
  const auto fleet = [&](const char* version, std::atomic<int>& ran) {
    RuntimeOptions opts = test::quiet(db);
    opts.version = version;
    opts.only_own_version = true;
    auto runtime = test::runtime_on(db, clock, opts);
    runtime->add(Workflow("nap", [&ran](Step& step, const json&) -> json {
      step.sleep("nap", 1h);
      return step.run("after", [&ran] { return ++ran; });
    }));
    return runtime;
  };
  auto blue = fleet("blue", blue_ran);
  auto green = fleet("green", green_ran);
  const std::string by_blue = blue->start("nap");
  const std::string by_green = green->start("nap");
  green->run_until_idle();
  CHECK(green->get(by_blue).status == Status::pending);  // blue's: green left it
  blue->run_until_idle();
  clock.advance(2h);
  green->run_until_idle();
  CHECK(green->get(by_green).status == Status::completed);
  CHECK(green->get(by_blue).status == Status::sleeping);  // due, and still left to blue
  CHECK(blue_ran == 0);
  CHECK(green_ran == 1);
  blue->run_until_idle();
  CHECK(blue->get(by_blue).status == Status::completed);
  CHECK(blue_ran == 1);
  // A run of no version (started by a runtime without one) is anyone's, stamped by its claimer.
  auto plain = test::runtime_on(db, clock, test::quiet(db));
  plain->add(Workflow("nap", [](Step&, const json&) -> json { return nullptr; }));
  const std::string loose = plain->start("nap");
  blue->run_until_idle();
  CHECK(blue->get(loose).version == "blue");
  clock.advance(2h);
  green->run_until_idle();
  CHECK(green->get(loose).status == Status::sleeping);  // now blue's
}

TEST_CASE("only_own_version without a version, or a version that is not UTF-8, is refused") {
  test::TempDir dir;
  RuntimeOptions opts = test::quiet(dir.file("db"));
  opts.only_own_version = true;
  CHECK_THROWS_WITH_AS(Runtime{opts}, doctest::Contains("needs a RuntimeOptions::version"), Error);
  opts.only_own_version = false;
  opts.version = "v\xff";
  CHECK_THROWS_WITH_AS(Runtime{opts}, doctest::Contains("RuntimeOptions::version"), Error);
}

TEST_CASE("fork: a failed run runs again from its failed step on fixed code, its earlier steps "
          "copied, not run again, the original left as it was (on each store)") {
  Shop shop;
  StartOptions start;
  start.correlation_id = "order-17";
  const std::string failed = shop.runtime->start("order", {{"sku", "B-2"}}, start);
  shop.runtime->run_until_idle();
  REQUIRE(shop.runtime->get(failed).status == Status::failed);
  const RunInfo before = shop.runtime->get(failed);

  shop.broken = false;  // the fix is deployed
  const std::string fork = shop.runtime->fork(failed, "ship");
  RunInfo forked = shop.runtime->get(fork);
  CHECK(forked.forked_from == failed);
  CHECK(forked.workflow == "order");
  CHECK(forked.input == json{{"sku", "B-2"}});
  CHECK(forked.correlation_id == "order-17");
  CHECK(forked.status == Status::pending);
  CHECK(last_reason(forked).find("forked from run " + failed + " at step 'ship' (1 journal entry "
                                 "copied)") != std::string::npos);
  CHECK(keys(*shop.runtime, fork) == std::vector<std::string>{"charge"});
  shop.runtime->run_until_idle();
  forked = shop.runtime->get(fork);
  CHECK(forked.status == Status::completed);
  CHECK(forked.output == 7);
  CHECK(shop.charges == 1);  // charged once, by the original: the fork's charge is the copy
  CHECK(shop.runtime->steps(fork).front().output == 1);
  const RunInfo after = shop.runtime->get(failed);
  CHECK(after.status == Status::failed);
  CHECK(after.history.size() == before.history.size());

  // A completed run forks from its first step: everything runs again.
  const std::string again = shop.runtime->fork(fork, "charge");
  CHECK(keys(*shop.runtime, again).empty());
  shop.runtime->run_until_idle();
  CHECK(shop.runtime->get(again).status == Status::completed);
  CHECK(shop.charges == 2);
}

TEST_CASE("fork refuses a step the run never reached, an unknown run and a run that has not "
          "ended, writing nothing (on each store)") {
  Shop shop;
  shop.runtime->add(Workflow("nap", [](Step& step, const json&) -> json {
    step.sleep("nap", 1h);
    return nullptr;
  }));
  shop.runtime->add(Workflow("outer", [](Step& step, const json&) -> json {
    return step.run("outer", [&step] { return step.run("inner", [] { return 1; }); });
  }));
  const std::string failed = shop.runtime->start("order");
  const std::string sleeping = shop.runtime->start("nap");
  const std::string nesting = shop.runtime->start("outer");
  shop.runtime->run_until_idle();
  REQUIRE(shop.runtime->get(nesting).status == Status::completed);
  const std::size_t runs = shop.runtime->list().size();
  CHECK_THROWS_WITH_AS(shop.runtime->fork(nesting, "outer/inner"),
                       doctest::Contains("is nested in a step body; fork from the step that "
                                         "contains it"),
                       Error);
  CHECK_THROWS_WITH_AS(shop.runtime->fork(failed, "notify"),
                       doctest::Contains("has no step 'notify' in its journal (it never reached "
                                         "it); its steps: charge, ship"),
                       NotFound);
  CHECK_THROWS_AS(shop.runtime->fork("no-such-run", "charge"), NotFound);
  CHECK_THROWS_WITH_AS(shop.runtime->fork(sleeping, "nap"),
                       doctest::Contains("is sleeping; only a run that ended"), Error);
  CHECK(shop.runtime->list().size() == runs);
}

TEST_CASE("resolve: an operator completes a failed step by hand, the reason kept on the step and "
          "in the history, and the run goes on from there (on each store)") {
  Shop shop;
  const std::string id = shop.runtime->start("order");
  shop.runtime->run_until_idle();
  REQUIRE(shop.runtime->get(id).status == Status::failed);

  shop.runtime->resolve(id, "ship", 99, "shipped by hand, label 99 (ticket OPS-12)");
  RunInfo run = shop.runtime->get(id);
  CHECK(run.status == Status::pending);
  CHECK(last_reason(run) == "step 'ship' resolved by hand: shipped by hand, label 99 (ticket "
                            "OPS-12)");
  shop.runtime->run_until_idle();
  run = shop.runtime->get(id);
  CHECK(run.status == Status::completed);
  CHECK(run.output == 99);
  CHECK(shop.charges == 1);
  const std::vector<StepInfo> steps = shop.runtime->steps(id);
  REQUIRE(steps.size() == 3);
  CHECK(steps[1].status == "completed");
  CHECK(steps[1].output == 99);
  CHECK(steps[1].resolved == "shipped by hand, label 99 (ticket OPS-12)");
  CHECK(steps[0].resolved.empty());
}

TEST_CASE("resolve refuses an output the step's call cannot take, a step that did not fail, an "
          "unknown step or run, writing nothing (on each store)") {
  Shop shop;
  const std::string id = shop.runtime->start("order");
  shop.runtime->run_until_idle();
  const auto snapshot = [&] {
    json state = json::array();
    for (const StepInfo& s : shop.runtime->steps(id)) state.push_back({s.id, s.status, s.output});
    const RunInfo run = shop.runtime->get(id);
    return json{to_string(run.status), run.history.size(), state};
  };
  const json before = snapshot();
  // ship returns int: a string does not convert.
  const std::string refused = "resolve of step 'ship' of run " + id + " refused, nothing written";
  CHECK_THROWS_WITH_AS(shop.runtime->resolve(id, "ship", "label-99", "by hand"),
                       doctest::Contains(refused.c_str()), InvalidInput);
  const std::string completed = "step 'charge' of run " + id + " is completed";
  CHECK_THROWS_WITH_AS(shop.runtime->resolve(id, "charge", 5, "r"),
                       doctest::Contains(completed.c_str()), Error);
  CHECK_THROWS_WITH_AS(shop.runtime->resolve(id, "notify", true, "r"),
                       doctest::Contains("has no step 'notify'"), NotFound);
  CHECK_THROWS_AS(shop.runtime->resolve("no-such-run", "ship", 1, "r"), NotFound);
  json deep = json::array();
  for (int i = 0; i < 600; ++i) deep = json::array({deep});
  CHECK_THROWS_WITH_AS(shop.runtime->resolve(id, "ship", deep, "r"),
                       doctest::Contains("cannot be stored"), Error);
  CHECK(snapshot() == before);
}

TEST_CASE("step.continue_as_new: a poller that loops forever keeps a short journal, one run after "
          "another with the same correlation id (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  runtime->add(Workflow("poller", [](Step& step, const json& input) -> json {
    const int round = input.value("round", 0);
    step.run("poll", [] { return "nothing new"; });
    if (round == 3) return "stopped after round 3";
    step.sleep("pause", 1min);
    step.continue_as_new({{"round", round + 1}});
  }));
  StartOptions start;
  start.correlation_id = "inbox-poller";
  std::string id = runtime->start("poller", {{"round", 0}}, start);
  std::vector<std::string> line{id};
  for (int i = 0; i < 6; ++i) {
    runtime->run_until_idle();
    clock.advance(2min);
  }
  for (;;) {
    const RunInfo run = runtime->get(line.back());
    if (run.continued_as.empty()) break;
    CHECK(run.status == Status::completed);
    CHECK(run.output.is_null());
    CHECK(keys(*runtime, run.id) == std::vector<std::string>{"poll", "pause"});
    line.push_back(run.continued_as);
  }
  REQUIRE(line.size() == 4);
  const RunInfo last = runtime->get(line.back());
  CHECK(last.status == Status::completed);
  CHECK(last.output == "stopped after round 3");
  CHECK(last.input == json{{"round", 3}});
  CHECK(last.correlation_id == "inbox-poller");
  CHECK(keys(*runtime, last.id) == std::vector<std::string>{"poll"});
  RunFilter by_correlation;
  by_correlation.correlation_id = "inbox-poller";
  CHECK(runtime->list(by_correlation).size() == 4);
}

TEST_CASE("step.continue_as_new in a child run: the parent gets the result of the last run of the "
          "line (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  auto runtime = test::runtime_on(db, clock, test::quiet(db));
  runtime->add(Workflow("count", [](Step& step, const json& input) -> json {
    const int n = input.value("n", 0);
    step.run("tick", [] { return 1; });
    if (n < 2) step.continue_as_new({{"n", n + 1}});
    return n;
  }));
  runtime->add(Workflow("parent", [](Step& step, const json&) -> json {
    return step.invoke("count", "count", {{"n", 0}});
  }));
  const std::string id = runtime->start("parent");
  for (int i = 0; i < 5; ++i) runtime->run_until_idle();
  const RunInfo parent = runtime->get(id);
  CHECK(parent.status == Status::completed);
  CHECK(parent.output == 2);
}

TEST_CASE("step.continue_as_new refuses an input too large or of the wrong type, and inside a step "
          "body, starting nothing (on each store)") {
  test::TempDir dir;
  test::ManualClock clock;
  const std::string db = test::database(dir, "db");
  RuntimeOptions opts = test::quiet(db);
  opts.max_output_bytes = 1000;
  auto runtime = test::runtime_on(db, clock, opts);
  runtime->add(Workflow("huge", [](Step& step, const json&) -> json {
    step.continue_as_new({{"blob", std::string(2000, 'x')}});
  }));
  runtime->add(Workflow("typed", [](Step& step, const Page&) -> int {
    step.continue_as_new({{"page", "two"}});
  }));
  runtime->add(Workflow("in-body", [](Step& step, const json&) -> json {
    return step.run("body", [&step] {
      step.continue_as_new(json::object());
      return 0;
    });
  }));
  const std::string huge = runtime->start("huge");
  const std::string typed = runtime->start("typed", {{"page", 1}});
  const std::string in_body = runtime->start("in-body");
  runtime->run_until_idle();
  const RunInfo a = runtime->get(huge);
  CHECK(a.status == Status::failed);
  CHECK(a.error->message.find("the input of step.continue_as_new in run " + huge) !=
        std::string::npos);
  CHECK(a.error->message.find("the limit is") != std::string::npos);
  const RunInfo b = runtime->get(typed);
  CHECK(b.status == Status::failed);
  CHECK(b.error->type == "durable::InvalidInput");
  const RunInfo c = runtime->get(in_body);
  CHECK(c.status == Status::failed);
  CHECK(c.error->message.find("step.continue_as_new") != std::string::npos);
  for (const RunInfo& r : {a, b, c}) CHECK(r.continued_as.empty());
  CHECK(runtime->list().size() == 3);  // nothing started
}
