// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the parts of a runtime (RunControl, Schedules) work with, all of the runtime's and
// outliving them: its one writer, a read of its store, its logger, its Env and its wake.

#include <functional>
#include <memory>

#include "bulk.hpp"
#include "env.hpp"
#include "log.hpp"
#include "writer.hpp"

namespace durable::detail {

struct Services {
  Writer& writer;
  WithStore read;  // a read of the store, under its lock
  Logger& logger;
  const std::shared_ptr<Env>& env;  // the runtime's, as it is when asked
  std::function<void()> wake;       // the runtime's loops and waiters look again
};

}  // namespace durable::detail
