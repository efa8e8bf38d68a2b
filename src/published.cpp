// SPDX-License-Identifier: Apache-2.0
#include "published.hpp"

#include <algorithm>

#include "ids.hpp"
#include "run_requests.hpp"
#include "serialization.hpp"

namespace durable::detail {

ChangeWatch::Deadline published_deadline(std::chrono::milliseconds wait) {
  return std::chrono::steady_clock::now() +
         std::clamp<std::chrono::milliseconds>(wait, {}, kLongestPublishedWait);
}

std::optional<json> wait_published(ChangeWatch& watch, std::string_view run_id,
                                   std::string_view key, std::chrono::milliseconds wait,
                                   const std::function<PublishedRead()>& read,
                                   std::string_view who) {
  check_published_key(key, who);
  const ChangeWatch::Deadline deadline = published_deadline(wait);
  for (;;) {
    const ChangeWatch::Mark mark = watch.mark();  // before the read: no change is missed
    const PublishedRead found = read();
    if (!found.run_found) throw no_such_run(run_id);
    if (!found.values.empty()) return json::parse(found.values.front().value);
    if (found.run_ended || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    watch.wait(run_id, key, mark, deadline);
  }
}

}  // namespace durable::detail
