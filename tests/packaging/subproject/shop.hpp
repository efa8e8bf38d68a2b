// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <durable/durable.hpp>

namespace shop {

inline durable::Workflow checkout() {
  return durable::Workflow("checkout", [](durable::Step& step, const durable::json& order) {
    return step.run("charge", [&] { return order.value("total", 0); });
  });
}

}  // namespace shop
