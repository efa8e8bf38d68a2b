// SPDX-License-Identifier: Apache-2.0
// expect: a step's result type needs to_json and from_json
#include <durable/durable.hpp>

namespace shop {
struct Order {
  int id;
};
}  // namespace shop

durable::Workflow checkout("checkout", [](durable::Step& step, const durable::json&) {
  shop::Order order = step.run("load", [] { return shop::Order{1}; });
  return durable::json(order.id);
});
