// SPDX-License-Identifier: Apache-2.0
#include <durable/durable.hpp>
#include <durable/testing.hpp>

int main() {
  durable::Runtime runtime({.database = ":memory:"});
  runtime.add(durable::Workflow("hello", [](durable::Step& step, const std::string& name) {
    return step.run("greet", [&] { return "hello, " + name; });
  }));
  const auto run = runtime.wait(runtime.start("hello", "consumer"), std::chrono::seconds(10));

  // durable::testing, from the durable::testing target: the hour's sleep passes at once.
  durable::testing::TestRuntime kit;
  kit.add(durable::Workflow("later", [](durable::Step& step, const std::string& name) {
    step.sleep("pause", std::chrono::hours(1));
    return step.run("greet", [&] { return "later, " + name; });
  }));
  const auto tested = kit.run("later", "consumer");
  return run.output == "hello, consumer" && tested.info.output == "later, consumer" ? 0 : 1;
}
