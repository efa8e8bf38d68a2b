// SPDX-License-Identifier: Apache-2.0
#include "bulk.hpp"

#include <algorithm>
#include <vector>

namespace durable::detail {

namespace {

constexpr std::size_t kBatch = 500;

// The statuses `action` acts on; the filter's own status must be one of them.
std::vector<Status> statuses_of(BulkAction action, const RunFilter& filter) {
  std::vector<Status> statuses;
  switch (action) {
    case BulkAction::cancel:
      statuses = {Status::pending, Status::running, Status::sleeping,
                  Status::waiting, Status::paused,  Status::failed};
      break;
    case BulkAction::retry:
      statuses = {Status::failed};
      break;
    case BulkAction::purge:
      statuses = {Status::completed, Status::failed, Status::cancelled};
      break;
  }
  if (filter.status &&
      std::find(statuses.begin(), statuses.end(), *filter.status) == statuses.end()) {
    std::string names;
    for (const Status s : statuses) {
      names += (names.empty() ? "" : ", ") + std::string(durable::to_string(s));
    }
    throw BadFilter(std::string(to_string(action)) + " by filter takes runs that are " + names +
                "; not " + std::string(durable::to_string(*filter.status)) + " ones");
  }
  return statuses;
}

std::vector<std::string> matching(const WithStore& with_store, BulkAction action,
                                  const RunFilter& filter) {
  const std::vector<Status> statuses = statuses_of(action, filter);
  std::vector<std::string> ids;
  with_store([&](ReadStore& store) { ids = store.run_ids(filter, statuses); });
  return ids;
}

}  // namespace

const char* to_string(BulkAction action) {
  switch (action) {
    case BulkAction::cancel:
      return "cancel";
    case BulkAction::retry:
      return "retry";
    case BulkAction::purge:
      return "purge";
  }
  return "?";
}

std::size_t bulk_count(const WithStore& store, BulkAction action, const RunFilter& filter) {
  return matching(store, action, filter).size();
}

std::size_t bulk_apply(const WithStore& with_store, BulkAction action, const RunFilter& filter,
                       const std::string& reason, const std::function<std::int64_t()>& now_ms) {
  const std::vector<std::string> ids = matching(with_store, action, filter);
  std::size_t changed = 0;
  for (std::size_t from = 0; from < ids.size(); from += kBatch) {
    const auto first = ids.begin() + static_cast<std::ptrdiff_t>(from);
    const std::vector<std::string> batch(
        first, first + static_cast<std::ptrdiff_t>(std::min(kBatch, ids.size() - from)));
    with_store([&](ControlStore& store) {
      if (action == BulkAction::purge) {
        changed += store.delete_runs(batch);
        return;
      }
      for (const std::string& id : batch) {
        if (action == BulkAction::cancel) {
          const std::optional<Status> before = store.cancel(id, now_ms(), reason);
          if (before && *before != Status::completed && *before != Status::cancelled) ++changed;
        } else {
          try {
            changed += store.retry(id, now_ms()) ? 1 : 0;
          } catch (const RunStateRefused&) {
            // Retried or closed meanwhile.
          }
        }
      }
    });
  }
  return changed;
}

}  // namespace durable::detail
