// SPDX-License-Identifier: Apache-2.0
// expect: durable::all takes no Future<void>
#include <durable/durable.hpp>

durable::Workflow fan_out("fan-out", [](durable::Step& step, const durable::json&) {
  auto count = step.start("count", [] { return 1; });
  auto notify = step.start("notify", [] {});
  auto [n, nothing] = durable::all(count, notify);
  return durable::json(n);
});
