// SPDX-License-Identifier: Apache-2.0
// expect: the undo takes the step's result (const R&) or nothing
#include <durable/durable.hpp>
#include <string>

durable::Workflow order("order", [](durable::Step& step, const durable::json&) {
  durable::Saga saga(step);
  saga.run(
      "charge", [] { return 42; }, [](const std::string& payment) { (void)payment; });
  return durable::json(true);
});
