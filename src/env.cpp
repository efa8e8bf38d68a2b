// SPDX-License-Identifier: Apache-2.0
#include "env.hpp"

#include <cstdio>
#include <random>

namespace durable::detail {
namespace {

// The one place the process reads its clocks, waits on them and starts threads.
class SystemEnv final : public Env {
 public:
  Clock::time_point now() override { return Clock::now(); }
  Steady steady_now() override { return std::chrono::steady_clock::now(); }
  bool wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                  Steady until) override {
    return cv.wait_until(lock, until) == std::cv_status::no_timeout;
  }
  void sleep_until(Steady until) override { std::this_thread::sleep_until(until); }
  std::thread start_thread(std::function<void()> body) override {
    return std::thread(std::move(body));
  }
  std::uint64_t random() override {
    std::lock_guard lock(mutex_);
    return random_();
  }

  using Env::wait_until;

 private:
  std::mutex mutex_;
  std::mt19937_64 random_{std::random_device{}()};
};

}  // namespace

Env& Env::system() {
  static SystemEnv env;
  return env;
}

std::int64_t Env::now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now().time_since_epoch()).count();
}

std::string Env::new_id() {
  const std::uint64_t bits = random();
  char text[29];
  std::snprintf(text, sizeof text, "%012llx%016llx",
                static_cast<unsigned long long>(now_ms()) & 0xffffffffffffULL,
                static_cast<unsigned long long>(bits));
  return text;
}

}  // namespace durable::detail
