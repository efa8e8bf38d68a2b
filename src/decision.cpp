// SPDX-License-Identifier: Apache-2.0
#include "decision.hpp"

namespace durable::detail {

void run_in_turn(std::vector<BodyTask>& bodies,
                 const std::function<bool(const EntryWrite&)>& write) {
  for (BodyTask& task : bodies) {
    task.run();
    if (!task.ended) continue;
    if (const EntryWrite* entry = task.ended()) write_at_once(*entry, task.written, write);
  }
}

void write_at_once(const EntryWrite& entry, const WriteDone& done,
                   const std::function<bool(const EntryWrite&)>& write) {
  bool kept = false;
  try {
    kept = write(entry);
  } catch (...) {
    done(false, std::current_exception());
    return;
  }
  done(kept, nullptr);
}

void linger_polling(const std::function<bool()>& done, Env& env) {
  while (!done()) env.sleep_for(std::chrono::milliseconds(10));
}

}  // namespace durable::detail
