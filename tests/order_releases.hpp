// SPDX-License-Identifier: Apache-2.0
#pragma once
// Two releases of an order workflow, for the tests of deploying: release 2 renamed the step
// "ship" to "ship-courier", which a run past it on release 1 cannot replay. Shipping fails for
// good for the sku "broken". Shared by the tests
// and the application that embeds the durable command (cli_app.cpp).

#include <chrono>
#include <durable/durable.hpp>
#include <string>

namespace durable::test {

struct Order {
  std::string sku;
  int quantity = 1;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Order, sku, quantity)

inline Workflow order_release(int release) {
  return Workflow("order", [release](Step& step, const Order& in) -> int {
    step.run("charge", [&] { return in.quantity * 10; });
    step.sleep("warehouse", std::chrono::hours(1));
    const int label = step.run(release == 1 ? "ship" : "ship-courier", [&] {
      if (in.sku == "broken") throw NonRetryableError("the courier refused the parcel");
      return 7;
    });
    step.sleep("follow-up", std::chrono::hours(1));
    return label;
  });
}

}  // namespace durable::test
