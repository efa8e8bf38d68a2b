// SPDX-License-Identifier: Apache-2.0
#include "published.hpp"

#include <algorithm>

#include "ids.hpp"
#include "run_requests.hpp"
#include "serialization.hpp"

namespace durable::detail {

std::optional<json> wait_published(ChangeWatch& watch, std::string_view run_id,
                                   std::string_view key, std::chrono::milliseconds wait,
                                   const std::function<PublishedRead()>& read,
                                   std::string_view who) {
  check_published_key(key, who);
  using Answer = std::optional<std::optional<json>>;  // empty: wait for a change
  return watch.read_until_changed(run_id, key, watch.deadline_after(wait), [&](bool last) {
    const PublishedRead found = read();
    if (!found.run_found) throw no_such_run(run_id);
    if (!found.values.empty()) return Answer(std::in_place, json::parse(found.values[0].value));
    if (found.run_ended || last) return Answer(std::in_place);  // none
    return Answer();
  });
}

}  // namespace durable::detail
