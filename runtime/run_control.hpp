// SPDX-License-Identifier: Apache-2.0
#pragma once
// What an operator does to a runtime's runs (Runtime's pause, resume, cancel, retry, bulk
// actions by filter, forget, fork and resolve): each a write through the runtime's one writer,
// logged, then the runtime's loops woken to look at what changed.

#include <cstddef>
#include <durable/info.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bulk.hpp"
#include "services.hpp"
#include "store.hpp"

namespace durable::detail {

class RunControl {
 public:
  /// What it works with: the runtime's services, and its own.
  struct Context : Services {
    std::function<void(const std::string& run_id)> closed;  // the run's streams are closed
    /// Throws InvalidInput when the runtime's code would not take a resolved step's output.
    std::function<void(const RecordedRun&, const std::string& key, const json& output)>
        check_resolution;
    std::size_t max_output_bytes;
  };
  explicit RunControl(Context context) : c_(std::move(context)) {}

  void cancel(std::string_view run_id, const std::string& reason);
  void retry(std::string_view run_id);
  void pause(std::string_view run_id);
  void resume(std::string_view run_id);
  std::size_t pause_workflow(std::string_view workflow);
  std::size_t resume_workflow(std::string_view workflow);
  std::vector<std::string> paused_workflows();
  /// Runtime::cancel, retry and purge of a filter (src/bulk.hpp).
  std::size_t bulk(BulkAction action, const RunFilter& filter, const std::string& reason);
  std::size_t count(const RunFilter& filter);
  /// Runtime::forget: the cancelled runs are logged and their waiters told.
  void forget(std::string_view correlation_id);
  std::vector<StepProgress> progress(std::string_view run_id);
  // An operator's repairs of a run after a bug (docs/versioning.md).
  std::string fork(std::string_view run_id, std::string_view from_step);
  void resolve(std::string_view run_id, std::string_view step_key, json output,
               const std::string& reason);
  /// The runtime's store for a bulk action: each batch a write of its own through the writer.
  WithStore bulk_store();

 private:
  std::int64_t now_ms() { return c_.env->now_ms(); }
  void log(std::string_view event, const std::string& message, json fields) {
    c_.logger.write(LogLevel::info, event, message, std::move(fields), now_ms());
  }

  Context c_;
};

}  // namespace durable::detail
