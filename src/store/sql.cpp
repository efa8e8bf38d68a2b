// SPDX-License-Identifier: Apache-2.0
#include "store/sql.hpp"

#include <mutex>

namespace durable::detail::sql {

std::string placeholders(std::size_t n) {
  std::string text;
  for (std::size_t i = 0; i < n; ++i) text += i == 0 ? "?" : ", ?";
  return text;
}

namespace {

std::mutex observer_mutex;
std::function<void(const std::string&)> observer;  // guarded by observer_mutex

}  // namespace

void observe_prepared(std::function<void(const std::string&)> with) {
  const std::lock_guard lock(observer_mutex);
  observer = std::move(with);
}

void prepared(const std::string& text) {
  const std::lock_guard lock(observer_mutex);
  if (observer) observer(text);
}

ErrorCode code_of(Fault fault) {
  switch (fault) {
    case Fault::disk_full:
      return errc::disk_full;
    case Fault::busy:
      return errc::busy;
    default:
      return errc::database;
  }
}

std::string advice(Fault fault) {
  switch (fault) {
    case Fault::disk_full:
      return " (the disk is full: free space, then retry; nothing was written by the failed "
             "operation)";
    case Fault::io:
      return " (the disk failed to read or write the file: check the system log and the disk; "
             "what was journaled before stays, and the runs go on once it can be written)";
    case Fault::connection:
      // The call's own write may have committed with its answer lost: retrying is safe for
      // durable's writes (a run's commit is fenced, a start can be keyed), which the runtime
      // makes again from what the database holds.
      return " (the connection to the database server was lost: retry once the server can be "
             "reached, which connects again; what was committed stays, and the failed call's "
             "own write was made whole or not at all)";
    default:
      return {};
  }
}

int bind_all(Query& query, int index, const std::vector<std::string>& values) {
  for (const std::string& value : values) query.bind(index++, value);
  return index;
}

}  // namespace durable::detail::sql
