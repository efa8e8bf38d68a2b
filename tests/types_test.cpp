// SPDX-License-Identifier: Apache-2.0
// The types a workflow may use: std::optional step results, inputs and outputs (null or a value,
// which Debian's nlohmann cannot convert on its own), and workflows that take no input.

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "stores.hpp"
#include "support.hpp"

using namespace durable;

namespace {
struct Lookup {
  std::string name;
  std::optional<int> age;
};
void to_json(json& j, const Lookup& l) { j = json{{"name", l.name}}; }
void from_json(const json& j, Lookup& l) { j.at("name").get_to(l.name); }
}  // namespace

TEST_CASE(
    "std::optional step results round-trip through the journal, empty and not (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  std::vector<std::string> seen;  // what each invocation got back, replays included
  int bodies = 0;
  runtime.add(Workflow("optional", [&](Step& step, const json&) -> json {
    const std::optional<int> none = step.run("none", [&]() -> std::optional<int> {
      ++bodies;
      return std::nullopt;
    });
    const std::optional<int> some = step.run("some", [&]() -> std::optional<int> {
      ++bodies;
      return 42;
    });
    auto later = step.start("later", [&] { return std::optional<std::string>("x"); });
    const std::vector<std::optional<int>> items = step.map(
        "items", std::vector<int>{0, 1},
        [](int i) -> std::optional<int> { return i == 0 ? std::nullopt : std::optional<int>(i); });
    seen.push_back((none ? "value" : "empty") + std::string(" ") + std::to_string(some.value()) +
                   " " + later.get().value() + " " + (items[0] ? "value" : "empty") + " " +
                   std::to_string(items[1].value()));
    return nullptr;
  }));
  const std::string id = runtime.start("optional");
  runtime.run_until_idle();
  REQUIRE(runtime.get(id).status == Status::completed);
  CHECK(bodies == 2);  // each body ran once; the later invocations read the journal
  REQUIRE(!seen.empty());
  for (const std::string& s : seen) CHECK(s == "empty 42 x empty 1");
  CHECK(runtime.steps(id).at(0).output.is_null());
  CHECK(runtime.steps(id).at(1).output == 42);
}

TEST_CASE("a workflow's input and output may be std::optional (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("maybe", [](Step&, const std::optional<int>& n) -> std::optional<int> {
    if (!n) return std::nullopt;
    return *n * 2;
  }));
  const std::string doubled = runtime.start("maybe", 21);
  const std::string empty = runtime.start("maybe", nullptr);
  runtime.run_until_idle();
  CHECK(runtime.get(doubled).output == 42);
  CHECK(runtime.get(empty).output.is_null());
  CHECK_THROWS_AS(runtime.start("maybe", "text"), InvalidInput);
}

TEST_CASE("a workflow may take no input, and refuses one given (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  int runs = 0;
  runtime.add(Workflow("nightly", [&](Step& step) {
    ++runs;
    return step.run("report", [] { return Lookup{"nightly", 3}; });
  }));
  const std::string by_default = runtime.start("nightly");
  const std::string with_null = runtime.start("nightly", nullptr);
  runtime.run_until_idle();
  CHECK(runtime.get(by_default).status == Status::completed);
  CHECK(runtime.get(by_default).output == json{{"name", "nightly"}});
  CHECK(runtime.get(with_null).status == Status::completed);
  CHECK(runs > 0);
  try {
    runtime.start("nightly", json{{"day", "monday"}});
    FAIL("an input given to a workflow that takes none was accepted");
  } catch (const InvalidInput& e) {
    const std::string what = e.what();
    CHECK(what.find("workflow 'nightly' takes no input") != std::string::npos);
    CHECK(what.find(R"({"day":"monday"})") != std::string::npos);
  }
  CHECK(runtime.list({}).size() == 2);  // the refused start stored nothing
}

TEST_CASE("a workflow with no input and no result (on each store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  int calls = 0;
  runtime.add(Workflow("tick", [&](Step& step) { step.run("count", [&] { ++calls; }); }));
  const std::string id = runtime.start("tick");
  runtime.run_until_idle();
  CHECK(runtime.get(id).status == Status::completed);
  CHECK(runtime.get(id).output.is_null());
  CHECK(calls == 1);
}

TEST_CASE(
    "a workflow may take its json input by rvalue and return a view into its input (on each "
    "store)") {
  test::TempDir dir;
  Runtime runtime({.database = test::database(dir, "db")});
  runtime.add(Workflow("take", [](Step&, json&& in) -> json { return std::move(in["x"]); }));
  runtime.add(Workflow("view", [](Step&, const std::string& text) -> std::string_view {
    return std::string_view(text).substr(0, 5);  // valid while the decoded input lives
  }));
  const std::string take = runtime.start("take", json{{"x", 7}});
  const std::string view = runtime.start("view", std::string(100, 'v'));
  runtime.run_until_idle();
  CHECK(runtime.get(take).output == 7);
  CHECK(runtime.get(view).output == "vvvvv");
}
