// SPDX-License-Identifier: Apache-2.0
#include "start_batch.hpp"

#include "errors_internal.hpp"

namespace durable::detail {

std::string StartBatch::create(const NewRun& run) {
  Request request{&run, {}, nullptr, false};
  std::unique_lock lock(mutex_);
  queue_.push_back(&request);
  while (!request.done) {
    if (committing_) {
      committed_.wait(lock);
    } else {
      lead(lock);
    }
  }
  if (request.error) std::rethrow_exception(request.error);
  return std::move(request.id);
}

std::size_t StartBatch::waiting() {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

// Commits every queued request in one transaction, the lock released meanwhile, and wakes their
// callers. Those who queued while it committed wake too, and one of them leads the next.
void StartBatch::lead(std::unique_lock<std::mutex>& lock) {
  std::vector<Request*> batch;
  batch.swap(queue_);
  committing_ = true;
  lock.unlock();
  std::vector<const NewRun*> runs;
  std::vector<std::string> ids;
  std::exception_ptr error;
  try {
    runs.reserve(batch.size());
    for (const Request* r : batch) runs.push_back(r->run);
    ids = commit_(runs);
    // The runs are written by now: a missing id can only be durable's bug, and says so.
    if (ids.size() != batch.size()) bug("a start's transaction returned no id for some runs");
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (error) {
      batch[i]->error = error;
    } else {
      batch[i]->id = std::move(ids[i]);
    }
    batch[i]->done = true;
  }
  committing_ = false;
  committed_.notify_all();
}

}  // namespace durable::detail
