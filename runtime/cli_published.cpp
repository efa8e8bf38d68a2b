// SPDX-License-Identifier: Apache-2.0
#include "cli_published.hpp"

#include <charconv>
#include <iostream>

#include "change_watch.hpp"

namespace durable::detail::cli {

namespace {

std::chrono::milliseconds wait_of(const std::string& text) {
  if (text.empty()) return {};
  std::int64_t ms = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), ms);
  if (error != std::errc() || end != text.data() + text.size() || ms < 0) {
    throw ops::BadRequest("--wait must be a whole number of milliseconds, not '" + text + "'");
  }
  return std::chrono::milliseconds(ms);
}

}  // namespace

int published_command(ops::Admin& admin, const std::string& run, const std::string& key,
                      const std::string& wait_ms, bool as_json) {
  const std::chrono::milliseconds wait = wait_of(wait_ms);
  using Answer = std::optional<ops::Admin::PublishedNow>;  // empty: wait for a change
  const ops::Admin::PublishedNow now = admin.changes().read_until_changed(
      run, key, admin.changes().deadline_after(wait), [&](bool last) {
        ops::Admin::PublishedNow read = admin.published_now(run, key);
        return read.value || read.ended || last ? Answer(std::move(read)) : Answer();
      });
  if (now.value) {
    if (as_json) {
      std::cout << json{{"published", true}, {"value", *now.value}}.dump(2) << '\n';
    } else {
      std::cout << now.value->dump() << '\n';
    }
    return 0;
  }
  if (as_json) std::cout << json{{"published", false}}.dump(2) << '\n';
  std::cerr << "durable: run " << run << " has published no value under '" << key << "'"
            << (now.ended          ? " and has ended"
                : wait.count() > 0 ? " within the wait"
                                   : "")
            << '\n';
  return 1;
}

}  // namespace durable::detail::cli
