// SPDX-License-Identifier: Apache-2.0
#pragma once
// What another process changed: the feed a ChangeWatch (src/change_watch.hpp) reads.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace durable::detail {

/// What another process changed, for a ChangeWatch (src/change_watch.hpp): on PostgreSQL the
/// NOTIFYs of Dialect::notify_change, LISTENed to; on SQLite the file's data_version, polled.
class ChangeFeed {
 public:
  virtual ~ChangeFeed() = default;
  /// Whether next() only looks (SQLite: the caller waits between looks) rather than waits.
  virtual bool polls() const = 0;
  /// The topics ("RUN_ID/NAME") changed since the last call, waiting up to `timeout` for one
  /// unless it polls; `anything` when a change of unknown topic was seen. Throws Error when the
  /// connection broke: a new feed is needed.
  struct Changes {
    bool anything = false;
    std::vector<std::string> topics;
  };
  virtual Changes next(std::chrono::milliseconds timeout) = 0;
};
/// The feed of RuntimeOptions::database; nullptr for ":memory:" (no other process writes).
std::unique_ptr<ChangeFeed> open_change_feed(const std::string& database);
std::unique_ptr<ChangeFeed> open_postgres_change_feed(const std::string& uri);

}  // namespace durable::detail
