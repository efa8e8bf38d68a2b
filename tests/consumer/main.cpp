#include <durable/durable.hpp>

int main() {
  durable::Runtime runtime({.database = ":memory:"});
  runtime.add(durable::Workflow("hello", [](durable::Step& step, const std::string& name) {
    return step.run("greet", [&] { return "hello, " + name; });
  }));
  const auto run = runtime.wait(runtime.start("hello", "consumer"), std::chrono::seconds(10));
  return run.output == "hello, consumer" ? 0 : 1;
}
