// SPDX-License-Identifier: Apache-2.0
#pragma once
// Group commit for starts. Threads that start runs at the same moment share one transaction,
// and so, under Durability::full, one sync: the first caller commits whatever is queued, its own
// run included, while the callers that come meanwhile queue for the next transaction. A lone
// caller commits at once, as before. Each call returns once its own run is committed.

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "store.hpp"

namespace durable::detail {

class StartBatch {
 public:
  /// Commits the runs in one transaction; returns their ids, in order (an idempotency key that
  /// names an earlier run gives that run's id). Nothing is written when it throws.
  using Commit = std::function<std::vector<std::string>(const std::vector<const NewRun*>&)>;

  explicit StartBatch(Commit commit) : commit_(std::move(commit)) {}

  /// The run's id once its transaction committed; throws what the commit threw.
  std::string create(const NewRun& run);
  /// Starts queued for the next transaction (for tests).
  std::size_t waiting();

 private:
  struct Request {
    const NewRun* run;
    std::string id;
    std::exception_ptr error;
    bool done = false;
  };
  void lead(std::unique_lock<std::mutex>& lock);

  Commit commit_;
  std::mutex mutex_;  // guards queue_, committing_ and the requests' results
  std::condition_variable committed_;
  std::vector<Request*> queue_;
  bool committing_ = false;
};

}  // namespace durable::detail
