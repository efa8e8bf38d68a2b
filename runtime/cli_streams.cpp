// SPDX-License-Identifier: Apache-2.0
#include "cli_streams.hpp"

#include <charconv>
#include <iostream>

#include "change_watch.hpp"

namespace durable::detail::cli {

namespace {

// How long one wait lasts before the command reads again (a wait ends sooner at any change).
constexpr std::chrono::seconds kFollowSlice{60};

std::size_t offset_of(const std::string& text) {
  if (text.empty()) return 0;
  std::size_t n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (error != std::errc() || end != text.data() + text.size()) {
    throw ops::BadRequest("--from must be a whole number (an offset in the stream), not '" + text +
                          "'");
  }
  return n;
}

}  // namespace

int tail_command(ops::Admin& admin, const std::string& run, const std::string& stream,
                 const std::string& from, bool as_json) {
  std::size_t next = offset_of(from);
  for (;;) {
    ChangeWatch& watch = admin.changes();
    const ChangeWatch::Mark mark = watch.mark();  // before the read: no change is missed
    const StreamRead now = admin.stream_now(run, stream, next);
    for (std::size_t i = 0; i < now.values.size(); ++i) {
      if (as_json) {
        std::cout << json{{"offset", next + i}, {"value", now.values[i]}}.dump() << '\n';
      } else {
        std::cout << now.values[i].dump() << '\n';
      }
    }
    std::cout.flush();
    next = now.next;
    if (now.closed) return 0;
    if (!now.values.empty()) continue;  // more may be there already
    watch.wait(run, stream, mark, watch.deadline_after(kFollowSlice));
  }
}

}  // namespace durable::detail::cli
