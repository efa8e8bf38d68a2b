// SPDX-License-Identifier: Apache-2.0
#pragma once
// A short busy wait for a hand-off between threads that is expected within microseconds.

#include <chrono>
#include <thread>

namespace durable::detail {

/// Polls `ready` until it returns true or `budget` has passed; returns its last answer. Gives
/// the core up between polls, so a thread it waits for that shares the core still runs.
template <typename Ready>
bool spin_until(std::chrono::microseconds budget, Ready ready) {
  const auto until = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= until) return ready();
    std::this_thread::yield();
  }
}

}  // namespace durable::detail
