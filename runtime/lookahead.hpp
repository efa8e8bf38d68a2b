// SPDX-License-Identifier: Apache-2.0
#pragma once
// A time read from the store (the next fire time of any schedule, the earliest deadline of a
// run) and until when that reading is used: the runtime's own changes and each pass of
// run_until_idle(), wait() or serve() read it afresh, and other processes' changes are seen
// after poll_interval, as their runs are. Not thread-safe: its owner guards it (with the
// store's lock).

#include <chrono>
#include <cstdint>
#include <optional>

#include "env.hpp"

namespace durable::detail {

struct Lookahead {
  std::optional<std::int64_t> ms;  // the time read; none: nothing is coming
  std::chrono::steady_clock::time_point known_until{};
  // The time, read again with `read` once poll_interval passed or the time came.
  template <class Read>
  std::optional<std::int64_t> get(Env& env, std::chrono::milliseconds poll, Read&& read) {
    const std::int64_t now_ms = env.now_ms();
    const auto now = env.steady_now();
    if (now >= known_until || (ms && *ms <= now_ms)) {
      ms = read();
      known_until = now + poll;
    }
    return ms;
  }
  void forget() { known_until = {}; }
};

}  // namespace durable::detail
