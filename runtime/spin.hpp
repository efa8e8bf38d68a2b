// SPDX-License-Identifier: Apache-2.0
#pragma once
// A short busy wait for a hand-off between threads that is expected within microseconds.

#include <chrono>
#include <thread>

#include "env.hpp"

namespace durable::detail {

/// Polls `ready` until it returns true or `budget` has passed; returns its last answer. Gives
/// the core up between polls, so a thread it waits for that shares the core still runs.
template <typename Ready>
bool spin_until(Env& env, std::chrono::microseconds budget, Ready ready) {
  const auto until = env.steady_now() + budget;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (env.steady_now() >= until) return ready();
    std::this_thread::yield();
  }
}

}  // namespace durable::detail
