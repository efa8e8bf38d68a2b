// SPDX-License-Identifier: Apache-2.0
#pragma once
// The workload of the fault sweeps (io_fault_test.cpp on SQLite, pg/connection_fault_test.cpp on
// PostgreSQL): three orders, each with a step, a sleep, an event wait, a child run and another
// step, and a schedule that starts two runs, driven through a ManualClock as a program's actions
// in order, so that a sweep can stop it at any fault and take it up again from the start.

#include <durable/durable.hpp>
#include <set>
#include <string>

#include "support.hpp"

namespace durable::test::workload {

constexpr int kOrders = 3;

inline void add(Runtime& runtime) {
  using namespace std::chrono_literals;
  runtime.add(Workflow("order", [](Step& step, const json& input) -> json {
    const int n = input.at("n").get<int>();
    const int a = step.run("a", [&] { return n * 2; });
    step.sleep("nap", 1s);
    WaitOptions paid;
    paid.match = {{"n", n}};
    const std::optional<json> payment = step.wait_for_event("paid", "paid", paid);
    const json child = step.invoke("child", "child", {{"n", n}});
    const int b = step.run("b", [&] { return a + child.get<int>(); });
    return json{{"n", n}, {"b", b}, {"paid", payment ? payment->at("n") : json()}};
  }));
  runtime.add(Workflow("child", [](Step& step, const json& input) -> json {
    return step.run("c", [&] { return input.at("n").get<int>() + 100; });
  }));
  runtime.add(Workflow("tick", [](Step& step, const json& input) -> json {
    return step.run("t", [&] { return input; });
  }));
}

// The workload as the actions a program takes, in order. Each is safe to take again: the
// schedule and the starts are keyed, a run waits for one payment, and the clock only moves on.
inline void act(Runtime& runtime, ManualClock& clock, int action) {
  using namespace std::chrono_literals;
  if (action == 0) {
    Schedule every;
    every.id = "tick";
    every.every = 1s;
    every.count = 2;
    runtime.schedule("tick", {{"tick", true}}, every);
  } else if (action <= kOrders) {
    StartOptions keyed;
    keyed.idempotency_key = "order-" + std::to_string(action);
    runtime.start("order", {{"n", action}}, keyed);
  } else if (action == kOrders + 2 || action == kOrders + 5) {
    clock.advance(1s);
    runtime.run_until_idle();
  } else if (action == kOrders + 3) {
    for (int n = 1; n <= kOrders; ++n) runtime.send_event("paid", {{"n", n}});
  } else {
    runtime.run_until_idle();
  }
}
constexpr int kActions = kOrders + 6;

// What every run ended with, by workflow and input: the same whichever faults met the workload.
inline std::multiset<std::string> results(Runtime& runtime) {
  std::multiset<std::string> out;
  RunFilter all;
  all.limit = 1000;
  for (const RunInfo& run : runtime.list(all)) {
    out.insert(run.workflow + " " + run.input.dump() + " " + std::string(to_string(run.status)) +
               " " + run.output.dump());
  }
  return out;
}

}  // namespace durable::test::workload
