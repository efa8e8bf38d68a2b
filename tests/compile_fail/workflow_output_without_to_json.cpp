// SPDX-License-Identifier: Apache-2.0
// expect: a workflow's result type needs to_json
#include <durable/durable.hpp>

struct Receipt {
  int total;
};

durable::Workflow bill("bill", [](durable::Step&, const durable::json&) { return Receipt{3}; });
