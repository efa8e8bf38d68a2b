// SPDX-License-Identifier: Apache-2.0
// expect: step.run(id, fn) calls fn with no arguments
#include <durable/durable.hpp>

durable::Workflow add("add", [](durable::Step& step, const durable::json& input) {
  return durable::json(step.run("sum", [](int x) { return x + 1; }));
});
