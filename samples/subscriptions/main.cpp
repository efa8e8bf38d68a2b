// SPDX-License-Identifier: Apache-2.0
// Subscription changes that take effect later: a downgrade applied at the end of the billing
// cycle (a run that sleeps until then), a late-payment reminder sent once a day, five times (a
// schedule with a count), and a cancellation that the customer takes back before the cycle ends
// (a delayed run cancelled before its time, which never runs). A "day" lasts --day of real time,
// so the whole month passes in a few seconds. The program prints a timeline and checks it: exit
// 0 when everything happened as it should, 1 otherwise.
//
//   subscriptions [--db FILE] [--day DURATION]
//
// --db defaults to a new file in the temporary directory (removed at the end); --day to 1s
// ("250ms", "0.5s", "2s": a number with the unit ms or s, at least 50ms).
//
// The workflows and the billing stand-in are in subscriptions.hpp, which the unit tests in
// subscriptions_test.cpp share; this file plays the month in real time against them.

#include <algorithm>
#include <charconv>
#include <chrono>
#include <durable/durable.hpp>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "subscriptions.hpp"

namespace subscriptions {

// serve() on a thread of its own, stopped and joined however main() leaves.
class Server {
 public:
  explicit Server(durable::Runtime& runtime)
      : runtime_(runtime), thread_([this] {
          try {
            runtime_.serve();
          } catch (const std::exception& e) {
            std::lock_guard lock(mutex_);
            error_ = e.what();
          }
        }) {}
  ~Server() { stop(); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  // Stops serving and returns serve()'s error, if it threw.
  std::string stop() {
    runtime_.stop();
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mutex_);
    return error_;
  }

 private:
  durable::Runtime& runtime_;
  std::mutex mutex_;
  std::string error_;
  std::thread thread_;
};

bool finished(durable::Status s) {
  return s == durable::Status::completed || s == durable::Status::failed ||
         s == durable::Status::cancelled;
}

// Polls `done` until it holds or the deadline passes; true when it held.
bool wait_until(const std::function<bool()>& done, Clock::time_point deadline) {
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return true;
}

// The month of the sample, in days since the start.
constexpr double kFirstReminder = 0.5;
constexpr int kReminders = 5;
constexpr double kChangeOfMind = 1.5;
constexpr double kCycleEnd = 3.0;

struct Requests {
  std::string downgrade_run, cancellation_run, reminders;
};

// Day 0: ada asks to downgrade, grace's invoice is overdue, bob asks to cancel; all three take
// effect later.
Requests take_requests(durable::Runtime& runtime, const Calendar& calendar) {
  Requests r;
  r.downgrade_run = runtime.start("downgrade-at-cycle-end",
                                  PlanChange{"ada", "pro", "basic", to_ms(calendar.at(kCycleEnd))});
  durable::Schedule daily;
  daily.id = "late-payment:grace:INV-1042";
  daily.every = calendar.day();  // 24h in production, or cron "0 9 * * *"
  daily.count = kReminders;
  daily.first = calendar.at(kFirstReminder);
  r.reminders = runtime.schedule("late-payment-reminder", Reminder{"grace", "INV-1042"}, daily);
  say(calendar, "grace's invoice INV-1042 is overdue: schedule " + r.reminders + " sends " +
                    std::to_string(kReminders) + " daily reminders");
  durable::StartOptions at_cycle_end;
  at_cycle_end.at = calendar.at(kCycleEnd);
  r.cancellation_run = runtime.start("cancel-subscription", Cancellation{"bob"}, at_cycle_end);
  say(calendar, "bob asks to cancel at the end of the cycle: run " + r.cancellation_run +
                    " is due on day 3.00");
  return r;
}

// Everything the timeline should show has happened: every reminder, the downgrade, and the day
// bob's cancellation was due has passed.
bool month_over(durable::Runtime& runtime, const Requests& r, const Calendar& calendar) {
  const auto sent =
      runtime.list({.status = durable::Status::completed, .workflow = "late-payment-reminder"});
  return sent.size() >= kReminders && finished(runtime.get(r.downgrade_run).status) &&
         calendar.today() > kCycleEnd;
}

struct Verdict {
  bool ok = true;
  void check(bool holds, const std::string& what) {
    std::cout << (holds ? "  ok      " : "  FAILED  ") << what << "\n";
    ok = ok && holds;
  }
};

std::string days(const std::vector<double>& list) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2);
  for (std::size_t i = 0; i < list.size(); ++i) out << (i ? ", " : "") << list[i];
  return out.str();
}

bool check_month(durable::Runtime& runtime, const Requests& r, const Billing& billing) {
  Verdict v;
  const std::vector<double> sent = billing.reminder_days();
  bool on_schedule = sent.size() == kReminders;
  for (std::size_t i = 0; on_schedule && i < sent.size(); ++i) {
    on_schedule = sent[i] >= kFirstReminder + double(i) - 0.01;  // never early
  }
  v.check(on_schedule, std::to_string(sent.size()) + " reminders, due daily from day 0.50, sent " +
                           "on days " + days(sent));
  durable::RunFilter reminders;
  reminders.workflow = "late-payment-reminder";
  const auto runs = runtime.list(reminders);
  const bool all_completed = std::all_of(runs.begin(), runs.end(), [](const auto& run) {
    return run.status == durable::Status::completed;
  });
  v.check(runs.size() == kReminders && all_completed,
          std::to_string(runs.size()) + " reminder runs, all completed");
  const auto left = runtime.schedules();
  v.check(
      std::none_of(left.begin(), left.end(), [&](const auto& s) { return s.id == r.reminders; }),
      "schedule " + r.reminders + " used up: no sixth reminder");

  const durable::RunInfo down = runtime.get(r.downgrade_run);
  v.check(down.status == durable::Status::completed && down.output.value("plan", "") == "basic" &&
              billing.plan("ada") == "basic" && billing.switched_on_time(),
          "ada's downgrade applied at the end of the cycle, not before (run " +
              std::string(durable::to_string(down.status)) + ")");

  const durable::RunInfo cancelled = runtime.get(r.cancellation_run);
  const auto journal = runtime.steps(r.cancellation_run);
  v.check(cancelled.status == durable::Status::cancelled && journal.empty() &&
              billing.cancellations() == 0 && billing.plan("bob").empty(),
          "bob's cancellation never ran: run " + std::string(durable::to_string(cancelled.status)) +
              ", " + std::to_string(journal.size()) + " journal entries, bob still subscribed");
  return v.ok;
}

void print_runs(durable::Runtime& runtime, const Calendar& calendar) {
  std::cout << "\nruns:\n";
  auto runs = runtime.list();
  std::reverse(runs.begin(), runs.end());  // oldest first
  for (const auto& run : runs) {
    std::ostringstream line;
    line << "  " << run.id << "  " << std::left << std::setw(24) << run.workflow << std::setw(10)
         << durable::to_string(run.status) << run.invocations << " invocation"
         << (run.invocations == 1 ? "" : "s") << ", created on day " << std::fixed
         << std::setprecision(2) << calendar.day_of(run.created_at);
    std::cout << line.str() << "\n";
  }
}

int run_month(const std::string& database, milliseconds day) {
  // The workflows hold the calendar and billing by reference: both outlive the runtime.
  const Calendar calendar(day);
  Billing billing(calendar);
  durable::RuntimeOptions options;
  options.database = database;
  durable::Runtime runtime(options);
  if (!runtime.list().empty()) {
    std::cerr << "subscriptions: " << database << " already holds runs; give a new --db\n";
    return 2;
  }
  runtime.add(downgrade(billing, calendar));
  runtime.add(reminder(billing));
  runtime.add(cancellation(billing, calendar));
  std::cout << "subscriptions on " << database << ", a day lasts " << day.count() << " ms\n\n";

  Server server(runtime);
  const Requests requests = take_requests(runtime, calendar);
  std::this_thread::sleep_until(calendar.at(kChangeOfMind));
  runtime.cancel(requests.cancellation_run);
  say(calendar, "bob changes his mind: run " + requests.cancellation_run + " cancelled");

  const auto deadline = calendar.at(kFirstReminder + kReminders + 1) + std::chrono::seconds(10);
  const bool over = wait_until([&] { return month_over(runtime, requests, calendar); }, deadline);
  say(calendar, over ? "all due work done" : "gave up waiting");
  if (const std::string error = server.stop(); !error.empty()) {
    std::cerr << "subscriptions: serve() failed: " << error << "\n";
    return 1;
  }
  print_runs(runtime, calendar);
  std::cout << "\nchecks:\n";
  const bool ok = check_month(runtime, requests, billing);
  std::cout << "\n" << (ok && over ? "all as expected" : "NOT as expected") << "\n";
  return ok && over ? 0 : 1;
}

// "1s", "250ms", "0.5s": a duration of at least 50 ms; nullopt for anything else.
std::optional<milliseconds> parse_day(const std::string& text) {
  double n = 0;
  const char* end = text.data() + text.size();
  const auto [unit, error] = std::from_chars(text.data(), end, n);
  if (error != std::errc()) return std::nullopt;
  const std::string suffix(unit, end);
  if (suffix != "s" && suffix != "ms") return std::nullopt;
  const double ms = suffix == "s" ? n * 1000 : n;
  if (!(ms >= 50 && ms <= 3'600'000)) return std::nullopt;
  return milliseconds(static_cast<long long>(ms));
}

int usage(const std::string& bad) {
  std::cerr << "subscriptions: bad flag '" << bad << "'\nusage: subscriptions [--db FILE] "
            << "[--day DURATION]   (DURATION: 1s, 250ms, ...; at least 50ms)\n";
  return 2;
}

std::string temp_database() {
  std::random_device random;
  const auto name = "durable-subscriptions-" + std::to_string(random()) + ".db";
  return (std::filesystem::temp_directory_path() / name).string();
}

}  // namespace subscriptions

int main(int argc, char** argv) {
  std::string db;
  std::chrono::milliseconds day{1000};
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 == argc) return subscriptions::usage(argv[i]);
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--db") {
      db = value;
    } else if (flag == "--day" && subscriptions::parse_day(value)) {
      day = *subscriptions::parse_day(value);
    } else {
      return subscriptions::usage(flag + " " + value);
    }
  }
  const bool temporary = db.empty();
  if (temporary) db = subscriptions::temp_database();
  int status = 1;
  try {
    status = subscriptions::run_month(db, day);
  } catch (const durable::Error& e) {
    std::cerr << "subscriptions: " << e.what() << "\n";
  }
  if (temporary) {
    std::error_code ignored;
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db + suffix, ignored);
  }
  return status;
}
