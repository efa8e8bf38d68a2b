// SPDX-License-Identifier: Apache-2.0
#include "attempt.hpp"

#include <algorithm>
#include <thread>
#include <utility>

#include "serialization.hpp"

namespace durable {

std::stop_token StepContext::stop_token() const { return attempt_->stop_token(); }
void StepContext::heartbeat(json progress) { attempt_->heartbeat(std::move(progress)); }
std::optional<json> StepContext::last_heartbeat() const { return attempt_->last_heartbeat(); }
int StepContext::attempt() const { return attempt_->number(); }
const std::string& StepContext::step_key() const { return attempt_->key(); }

}  // namespace durable

namespace durable::detail {

namespace {

using Steady = std::chrono::steady_clock;

thread_local Attempt* t_attempt = nullptr;

// Progress is stored at most this often while a body heartbeats (and once more at its end).
constexpr auto kSaveEvery = std::chrono::seconds(1);

std::string ms_text(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace

StepContext& current_step_context() {
  if (t_attempt == nullptr) {
    throw Error(errc::misuse,
                "a step body taking a durable::StepContext& was called outside a step attempt");
  }
  return t_attempt->context();
}

// A timeout this long is no timeout: added to a steady-clock time (in nanoseconds) it could
// overflow.
constexpr std::chrono::milliseconds kLongest = std::chrono::hours(24 * 365 * 100);

LiveHold::LiveHold(Attempt* innermost) {
  std::vector<Attempt*> chain;
  for (Attempt* a = innermost; a != nullptr; a = a->parent_) {
    if (a->timed_) chain.push_back(a);
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    std::unique_lock lock = (*it)->hold_if_live();
    if (!lock.owns_lock()) {
      locks_.clear();
      live_ = false;
      return;
    }
    locks_.push_back(std::move(lock));
  }
}

Attempt::Attempt(Host& host, std::string key, int attempt, const StepOptions& options,
                 std::size_t max_progress_bytes, bool timed, Attempt* parent)
    : host_(&host),
      parent_(parent),
      timed_(timed),
      key_(std::move(key)),
      attempt_(attempt),
      timeout_(std::min(options.timeout, kLongest)),
      heartbeat_timeout_(std::min(options.heartbeat_timeout, kLongest)),
      max_progress_bytes_(max_progress_bytes),
      // An attempt run inline is never abandoned: its token, which cannot be stopped, needs no
      // shared state.
      stop_(timed ? std::stop_source() : std::stop_source(std::nostopstate)) {}

Attempt* Attempt::current() { return t_attempt; }

bool Attempt::timed(const StepOptions& options) {
  return options.timeout.count() > 0 || options.heartbeat_timeout.count() > 0;
}

void Attempt::set_current(Attempt* attempt) { t_attempt = attempt; }

json Attempt::wait_for(std::shared_ptr<Attempt> self, std::function<json()> call,
                       std::shared_ptr<Attempt>& abandoned) {
  Env& env = host_->env();
  const auto began = env.steady_now();
  {
    std::lock_guard lock(mutex_);
    last_beat_ = began;
  }
  env.start_thread([self, call = std::move(call)]() mutable {
       std::optional<json> result;
       std::exception_ptr error;
       try {
         result = self->run_here(call);
       } catch (...) {
         error = std::current_exception();
       }
       call = nullptr;  // what the body holds goes before the attempt is seen to have ended
       std::lock_guard lock(self->mutex_);
       self->result_ = std::move(result);
       self->error_ = error;
       self->ended_ = true;
       self->changed_.notify_all();
     })
      .detach();

  std::unique_lock lock(mutex_);
  std::string why;
  for (;;) {
    if (ended_) {
      if (error_) std::rethrow_exception(error_);
      return std::move(*result_);
    }
    auto until = Steady::time_point::max();
    if (timeout_.count() > 0) {
      until = began + timeout_;
      why = "ran past its timeout of " + ms_text(timeout_);
    }
    if (heartbeat_timeout_.count() > 0 && last_beat_ + heartbeat_timeout_ < until) {
      until = last_beat_ + heartbeat_timeout_;
      why = "sent no heartbeat for " + ms_text(heartbeat_timeout_) + " (heartbeat_timeout)";
    }
    if (env.steady_now() >= until) break;
    env.wait_until(changed_, lock, until);
  }
  lock.unlock();
  {
    // No write of the body's is under way from here on, and none begins: its progress so far is
    // stored for the next attempt, and nothing more of it is.
    std::lock_guard write(write_mutex_);
    try {
      std::unique_lock state(mutex_);
      save_progress(state);
    } catch (const std::exception&) {  // the progress is a help, not the step's result
    }
    abandoned_ = true;
  }
  stop_.request_stop();
  abandoned = std::move(self);
  throw TimeoutError("step '" + key_ + "': attempt " + std::to_string(attempt_) + " " + why +
                     "; it was abandoned (its late result is dropped)");
}

void Attempt::wait_ended() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return ended_; });
}

bool Attempt::ended() const {
  std::lock_guard lock(mutex_);
  return ended_;
}

std::unique_lock<std::mutex> Attempt::hold_if_live() {
  std::unique_lock lock(write_mutex_);
  if (abandoned_) lock.unlock();
  return lock;
}

void Attempt::heartbeat(json progress) {
  std::string text;
  if (const auto problem = encode(progress, text)) {
    throw Error(errc::invalid_argument,
                "the progress of step '" + key_ + "' cannot be stored: " + *problem);
  }
  if (text.size() > max_progress_bytes_) {
    throw Error(errc::too_large, "the progress of step '" + key_ + "' is " +
                                     std::to_string(text.size()) + " bytes; the limit is " +
                                     std::to_string(max_progress_bytes_) +
                                     " (RuntimeOptions::max_output_bytes)");
  }
  const LiveHold live(this);
  if (!live) return;  // abandoned (or the body it is nested in): nobody listens any more
  std::unique_lock state(mutex_);
  const auto now = host_->env().steady_now();
  last_beat_ = now;
  progress_ = std::move(progress);
  progress_saved_ = false;
  reported_ = true;
  if (!saved_at_ || now - *saved_at_ >= kSaveEvery) save_progress(state);
}

void Attempt::save_last() {
  if (!reported_) return;
  const LiveHold live(this);
  if (!live) return;
  std::unique_lock state(mutex_);
  save_progress(state);
}

void Attempt::save_progress(std::unique_lock<std::mutex>& state) {
  if (progress_saved_ || !progress_) return;
  const json progress = *progress_;
  progress_saved_ = true;
  saved_at_ = host_->env().steady_now();
  state.unlock();
  host_->carry_out(decide::SaveProgress{key_, attempt_, progress});
  state.lock();
}

std::optional<json> Attempt::last_heartbeat() {
  {
    std::lock_guard lock(mutex_);
    if (progress_) return progress_;
    if (earlier_) return *earlier_;
  }
  std::optional<json> earlier = host_->load_progress(key_);
  std::lock_guard lock(mutex_);
  earlier_ = earlier;
  return earlier;
}

}  // namespace durable::detail
