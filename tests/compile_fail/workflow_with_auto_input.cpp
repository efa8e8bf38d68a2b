// SPDX-License-Identifier: Apache-2.0
// expect: a workflow function's types must be readable
#include <durable/durable.hpp>

durable::Workflow greet("greet", [](durable::Step& step, const auto& input) {
  return step.run("hello", [&] { return input.dump(); });
});
