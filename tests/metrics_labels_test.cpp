// SPDX-License-Identifier: Apache-2.0
// /metrics by workflow and step: the labels, their escaping, and their caps (the busiest values
// kept, the rest summed into `_other`, so that sums over a family stay the database's totals).

#include <doctest/doctest.h>

#include "admin.hpp"
#include "metrics.hpp"
#include "prometheus_text.hpp"
#include "stores.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

TEST_CASE("metrics: label values are escaped as the text format says") {
  CHECK(ops::escape_label_value("plain") == "plain");
  CHECK(ops::escape_label_value("a\\b") == "a\\\\b");
  CHECK(ops::escape_label_value("say \"hi\"") == "say \\\"hi\\\"");
  CHECK(ops::escape_label_value("two\nlines") == "two\\nlines");
  CHECK(ops::escape_label_value("tab\tstays") == "tab\tstays");
}

TEST_CASE("metrics: a step's label is the id the code wrote, without map indexes or repeats") {
  CHECK(ops::step_label("charge") == "charge");
  CHECK(ops::step_label("item[3]") == "item");
  CHECK(ops::step_label("outer/item[12]/inner") == "outer/item/inner");
  CHECK(ops::step_label("outer#2/inner") == "outer/inner");
  CHECK(ops::step_label("v1.2:x-y_z") == "v1.2:x-y_z");
}

TEST_CASE(
    "metrics: runs, step figures and durations are labelled by workflow and step (on each "
    "store)") {
  using test::prometheus::Labels;
  using test::prometheus::parse;
  test::TempDir dir;
  const RuntimeOptions opts = test::quiet(test::database(dir, "labels.db"));
  const std::string odd = "say \"hi\" \\ to\nall";  // every character the format escapes
  {
    Runtime runtime(opts);
    runtime.add(Workflow("orders", [](Step& step, const json&) -> json {
      for (int i = 0; i < 3; ++i) step.run("charge", [] { return 1; });  // charge, charge#2, #3
      step.map("item", std::vector<int>{1, 2, 3, 4}, [](int n) { return n; });
      step.run("outer", [&step] { return step.run("inner", [] { return 2; }); });
      return "ok";
    }));
    runtime.add(Workflow(odd, [](Step& step, const json&) -> json {
      return step.run("greet", [] { return "hi"; });
    }));
    for (int i = 0; i < 2; ++i) {
      REQUIRE(runtime.wait(runtime.start("orders"), 10s).status == Status::completed);
    }
    REQUIRE(runtime.wait(runtime.start(odd), 10s).status == Status::completed);
  }
  ops::Admin admin(opts.database);
  const std::string text = admin.metrics();
  const auto metrics = parse(text);

  CHECK(metrics.value("durable_runs", {{"workflow", "orders"}, {"status", "completed"}}) == 2);
  CHECK(metrics.value("durable_runs", {{"workflow", "orders"}, {"status", "failed"}}) == 0);
  CHECK(metrics.value("durable_runs", {{"workflow", odd}, {"status", "completed"}}) == 1);
  CHECK(metrics.value("durable_steps", {{"workflow", "orders"}}) == 2 * 9);
  CHECK(metrics.value("durable_steps", {{"workflow", odd}}) == 1);
  CHECK(metrics.values("durable_runs", "workflow") == std::set<std::string>{"orders", odd});

  // The histogram by step id: a loop's uses and a map's items are one step each.
  const std::string count = "durable_step_duration_seconds_count";
  CHECK(metrics.values(count, "step") ==
        std::set<std::string>{"charge", "item", "outer", "outer/inner", "greet"});
  CHECK(metrics.value(count, {{"workflow", "orders"}, {"step", "charge"}}) == 6);
  CHECK(metrics.value(count, {{"workflow", "orders"}, {"step", "item"}}) == 8);
  CHECK(metrics.value(count, {{"workflow", "orders"}, {"step", "outer/inner"}}) == 2);
  CHECK(metrics.value(count, {{"workflow", odd}, {"step", "greet"}}) == 1);
  const Labels charge = {{"workflow", "orders"}, {"step", "charge"}, {"le", "+Inf"}};
  CHECK(metrics.value("durable_step_duration_seconds_bucket", charge) == 6);
  CHECK(
      metrics
          .of("durable_step_duration_seconds_bucket", {{"workflow", "orders"}, {"step", "charge"}})
          .size() == 15);  // 14 bounds and +Inf
  CHECK(metrics.sum(count) == metrics.sum("durable_steps"));

  // The odd name is written escaped, and the whole scrape is valid.
  CHECK(test::has(text, "workflow=\"say \\\"hi\\\" \\\\ to\\nall\""));
  // Not structured bindings: doctest's messages capture them, which clang 14 cannot.
  const auto checked = test::prometheus::promtool_check(text, dir.file("labels.txt"));
  const int code = checked.first;
  const std::string& said = checked.second;
  INFO("promtool check metrics said:\n" << said << "on this scrape:\n" << text);
  CHECK(code == 0);
  CHECK(said.empty());
}

TEST_CASE(
    "metrics: past the caps the busiest workflows and steps keep their label, the rest sum "
    "into _other (on each store)") {
  using test::prometheus::parse;
  test::TempDir dir;
  const RuntimeOptions opts = test::quiet(test::database(dir, "caps.db"));
  ops::Admin admin(opts.database);
  // More workflows than the cap, one run each, none executed; "zz-busy" is last by name but has
  // the most runs, so it keeps its label.
  const std::size_t workflows = ops::kMaxWorkflowLabels + 5;
  for (std::size_t i = 0; i < workflows; ++i) {
    const std::string name = "w" + std::string(i < 10 ? "0" : "") + std::to_string(i);
    admin.start({.workflow = name, .queue_unknown = true});
  }
  for (int i = 0; i < 3; ++i) admin.start({.workflow = "zz-busy", .queue_unknown = true});
  // More steps than the cap in one workflow; "s99" is last by name but used most.
  constexpr std::size_t steps = ops::kMaxStepLabels + 5;
  {
    Runtime runtime(opts);
    runtime.add(Workflow("zz-busy", [](Step& step, const json&) -> json {
      for (std::size_t i = 0; i < steps; ++i) {
        step.run("s" + std::string(i < 10 ? "0" : "") + std::to_string(i), [] { return 1; });
      }
      for (int i = 0; i < 3; ++i) step.run("s99", [] { return 1; });
      return "ok";
    }));
    REQUIRE(test::eventually([&] {
      runtime.run_until_idle();
      return admin.stats().at("counts").at("completed") == 3;
    }));
  }
  const std::string text = admin.metrics();
  const auto metrics = parse(text);
  const std::set<std::string> labelled = metrics.values("durable_runs", "workflow");
  CHECK(labelled.size() == ops::kMaxWorkflowLabels);
  CHECK(labelled.contains("zz-busy"));
  CHECK(labelled.contains("_other"));
  CHECK(labelled.contains("w00"));  // ties go by name: the first ones stay
  CHECK_FALSE(labelled.contains("w24"));
  // Folded, not dropped: the sums are the database's.
  CHECK(metrics.sum("durable_runs") == static_cast<double>(workflows + 3));
  CHECK(metrics.sum("durable_runs", {{"workflow", "_other"}}) ==
        static_cast<double>(workflows - (ops::kMaxWorkflowLabels - 2)));
  for (const char* family : {"durable_steps", "durable_step_attempts_failed",
                             "durable_step_retries", "durable_steps_failed"}) {
    CHECK_MESSAGE(metrics.values(family, "workflow") == labelled, family);
  }

  const std::string count = "durable_step_duration_seconds_count";
  const std::set<std::string> step_labels = metrics.values(count, "step");
  CHECK(step_labels.size() == ops::kMaxStepLabels);
  CHECK(step_labels.contains("s99"));
  CHECK(step_labels.contains("_other"));
  CHECK_FALSE(step_labels.contains("s24"));
  const double entries = 3.0 * static_cast<double>(steps + 3);
  CHECK(metrics.sum(count) == entries);
  CHECK(metrics.sum("durable_step_duration_seconds_bucket", {{"le", "+Inf"}}) == entries);
  CHECK(metrics.value("durable_steps", {{"workflow", "zz-busy"}}) == entries);
  CHECK(metrics.value(count, {{"workflow", "zz-busy"}, {"step", "s99"}}) == 9);
  CHECK(metrics.value(count, {{"workflow", "zz-busy"}, {"step", "_other"}}) ==
        3.0 * static_cast<double>(steps - (ops::kMaxStepLabels - 2)));
}
