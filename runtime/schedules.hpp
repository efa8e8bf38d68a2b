// SPDX-License-Identifier: Apache-2.0
#pragma once
// Schedules: recurring starts every interval or by a cron expression, stored in the database and
// fired by whichever runtime looks first, once per due time (Runtime::schedule, schedules,
// unschedule; serve() and the run loops fire them).

#include <chrono>
#include <cstddef>
#include <durable/info.hpp>
#include <durable/workflow.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bulk.hpp"
#include "lookahead.hpp"
#include "services.hpp"
#include "store.hpp"

namespace durable::detail {

class Schedules {
 public:
  /// What it works with: the runtime's services, and its own.
  struct Context : Services {
    /// The workflow add()ed under the name; throws UnknownWorkflow for another.
    std::function<std::shared_ptr<const Workflow>(std::string_view)> workflow;
    std::function<void(std::size_t runs)> started;  // counted
    std::chrono::milliseconds poll_interval;
    std::size_t max_output_bytes;
  };
  explicit Schedules(Context context) : c_(std::move(context)) {}

  std::string schedule(std::string_view workflow, const json& input, const Schedule& when);
  std::vector<ScheduleInfo> list();
  void unschedule(std::string_view id);
  /// Starts the runs of the schedules due now; returns how many.
  std::size_t fire();
  /// When a schedule fires next, from the last reading while it holds (the store's lock held).
  std::optional<std::int64_t> next_fire(ScheduleStore& store);
  /// The next fire time is read again at the next look (the store's lock held).
  void forget_next_fire() { next_fire_.forget(); }

 private:
  Context c_;
  Lookahead next_fire_;
};

}  // namespace durable::detail
