// SPDX-License-Identifier: Apache-2.0
#pragma once
// The subscriptions sample's workflows, shared by main.cpp and subscriptions_test.cpp: a
// downgrade applied at the end of the billing cycle, a late-payment reminder, and a cancellation
// started for the end of the cycle; their inputs; and the stand-in for the billing and
// notification services, with the calendar that stamps the timeline they print.

#include <chrono>
#include <cstdint>
#include <durable/durable.hpp>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <mutex>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace subscriptions {
using durable::Clock;
using durable::json;
using std::chrono::milliseconds;

// The sample's calendar: day 0 is when the calendar was made, and a day lasts `day` of the time
// `now` reads (the wall clock; a test passes its virtual clock). The timeline's lines go to
// `out` (nullptr: nowhere).
class Calendar {
 public:
  using Now = std::function<Clock::time_point()>;
  explicit Calendar(milliseconds day, Now now = Clock::now, std::ostream* out = &std::cout)
      : day_(day), now_(std::move(now)), out_(out), start_(now_()) {}
  Clock::time_point at(double days) const {
    return start_ + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double, std::milli>(day_.count() * days));
  }
  double day_of(Clock::time_point t) const {
    return std::chrono::duration<double, std::milli>(t - start_).count() / day_.count();
  }
  Clock::time_point now() const { return now_(); }
  double today() const { return day_of(now_()); }
  milliseconds day() const { return day_; }
  std::ostream* out() const { return out_; }

 private:
  milliseconds day_;
  Now now_;
  std::ostream* out_;
  Clock::time_point start_;
};

// One line of the timeline, stamped with the calendar day; from any thread.
inline void say(const Calendar& calendar, const std::string& line) {
  static std::mutex mutex;
  if (calendar.out() == nullptr) return;
  std::ostringstream stamp;
  stamp << "[day " << std::fixed << std::setprecision(2) << calendar.today() << "] ";
  std::lock_guard lock(mutex);
  *calendar.out() << stamp.str() << line << std::endl;
}

inline std::int64_t to_ms(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count();
}
inline Clock::time_point from_ms(std::int64_t ms) { return Clock::time_point(milliseconds(ms)); }

// The inputs of the three workflows.
struct PlanChange {
  std::string customer, from, to;
  std::int64_t effective_at = 0;  // ms since the epoch: the end of the billing cycle
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(PlanChange, customer, from, to, effective_at)

struct Reminder {
  std::string customer, invoice;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Reminder, customer, invoice)

struct Cancellation {
  std::string customer;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Cancellation, customer)

// Stand-in for the billing and notification services. It keeps what the step bodies did, so the
// program can check the timeline at the end.
class Billing {
 public:
  explicit Billing(const Calendar& calendar) : calendar_(calendar) {}

  int send_reminder(const Reminder& r) {
    std::lock_guard lock(mutex_);
    reminder_days_.push_back(calendar_.today());
    const int n = static_cast<int>(reminder_days_.size());
    say(calendar_, "reminder " + std::to_string(n) + ": " + r.customer + ", invoice " + r.invoice +
                       " is overdue");
    return n;
  }
  void switch_plan(const PlanChange& c) {
    std::lock_guard lock(mutex_);
    plans_[c.customer] = c.to;
    switched_on_time_ = calendar_.now() >= from_ms(c.effective_at);
    say(calendar_, "downgrade applied: " + c.customer + " is on " + c.to + " (was " + c.from + ")");
  }
  void stop_renewal(const Cancellation& c) {
    std::lock_guard lock(mutex_);
    plans_[c.customer] = "cancelled";
    ++cancellations_;
    say(calendar_, "cancellation applied: " + c.customer + "'s subscription ends");
  }

  std::vector<double> reminder_days() const {
    std::lock_guard lock(mutex_);
    return reminder_days_;
  }
  std::string plan(const std::string& customer) const {
    std::lock_guard lock(mutex_);
    const auto it = plans_.find(customer);
    return it == plans_.end() ? "" : it->second;
  }
  bool switched_on_time() const {
    std::lock_guard lock(mutex_);
    return switched_on_time_;
  }
  int cancellations() const {
    std::lock_guard lock(mutex_);
    return cancellations_;
  }

 private:
  const Calendar& calendar_;
  mutable std::mutex mutex_;
  std::vector<double> reminder_days_;
  std::map<std::string, std::string> plans_;
  bool switched_on_time_ = false;
  int cancellations_ = 0;
};

// The downgrade is recorded when the customer asks for it and applied when the prepaid cycle ends:
// the run sleeps until then, holding no thread.
inline durable::Workflow downgrade(Billing& billing, const Calendar& calendar) {
  return durable::Workflow(
      "downgrade-at-cycle-end", [&billing, &calendar](durable::Step& step, const PlanChange& c) {
        step.run("record-request", [&] {
          std::ostringstream line;
          line << c.customer << " asks to downgrade " << c.from << " -> " << c.to
               << "; recorded, applies at the end of the cycle (day " << std::fixed
               << std::setprecision(2) << calendar.day_of(from_ms(c.effective_at)) << ")";
          say(calendar, line.str());
        });
        step.sleep_until("until-cycle-end", from_ms(c.effective_at));
        step.run("switch-plan", [&] { billing.switch_plan(c); });
        step.run("send-confirmation", [&] {
          say(calendar, "confirmation sent to " + c.customer + ": you are now on " + c.to);
        });
        return json{{"customer", c.customer}, {"plan", c.to}};
      });
}

// One reminder; the schedule starts a run of this per due time.
inline durable::Workflow reminder(Billing& billing) {
  return durable::Workflow(
      "late-payment-reminder", [&billing](durable::Step& step, const Reminder& r) {
        return step.run("send-reminder", [&] { return billing.send_reminder(r); });
      });
}

// The cancellation at the end of the cycle: started with StartOptions::at, so nothing of it runs
// before then.
inline durable::Workflow cancellation(Billing& billing, const Calendar& calendar) {
  return durable::Workflow(
      "cancel-subscription", [&billing, &calendar](durable::Step& step, const Cancellation& c) {
        step.run("stop-renewal", [&] { billing.stop_renewal(c); });
        step.run("send-goodbye", [&] { say(calendar, "goodbye email sent to " + c.customer); });
      });
}

}  // namespace subscriptions
