// SPDX-License-Identifier: Apache-2.0
// The onboarding of a new customer account: an intake that is safe to submit twice (an idempotency
// key), then twenty steps across billing, DNS, identity, CRM and email. Some steps are best
// effort: when they fail for good the workflow records the failure and goes on. One step waits
// for a dependency another service creates: the custom domain is usable only once the DNS
// provider reports it verified, which it does with an event. Two customers are onboarded: acme,
// for whom everything works, and globex, whose card is declined, whose SSO provider is not
// supported and whose contacts file is not a CSV. The program prints the timeline and checks the
// result: exit 0 when both runs completed as expected, 1 otherwise.
//
//   onboarding [--db FILE]
//
// --db defaults to a new file in the temporary directory (removed at the end).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <durable/durable.hpp>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "onboarding.hpp"

namespace onboarding {

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
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// The DNS provider's side, on a thread standing for that service: it takes the verification
// requests, and once every requested domain resolves it reports them, the last requested first,
// with Runtime::send_event. Both runs wait for "domain.verified" at once then, and each must wake
// only with its own account's event. An event counts only for a wait that began before it was
// sent, so the provider reports once the runs are waiting.
void verify_domains(durable::Runtime& runtime, DnsProvider& dns, std::size_t expected) try {
  std::vector<DnsProvider::Request> pending(expected);
  for (auto& r : pending) {
    if (!dns.next(r, Clock::now() + 30s)) return;
  }
  const bool all_waiting = wait_until(
      [&] {
        return dns.stopped() || std::all_of(pending.begin(), pending.end(), [&](const auto& r) {
                 return runtime.get(r.run_id).status == durable::Status::waiting;
               });
      },
      Clock::now() + 30s);
  if (!all_waiting || dns.stopped()) return;
  for (auto r = pending.rbegin(); r != pending.rend(); ++r) {
    say("dns", r->domain + " resolves: sending domain.verified for " + r->account);
    runtime.send_event("domain.verified",
                       {{"account", r->account}, {"domain", r->domain}, {"record", "CNAME"}});
  }
} catch (const durable::Error& e) {
  say("dns", std::string("FAILED: ") + e.what());  // the runs then wait in vain: the checks fail
}

struct Verdict {
  bool ok = true;
  void check(bool holds, const std::string& what) {
    std::cout << (holds ? "  ok      " : "  FAILED  ") << what << "\n";
    ok = ok && holds;
  }
};

void print_journal(durable::Runtime& runtime, const durable::RunInfo& run) {
  std::cout << "\nrun " << run.id << " (" << run.input.value("id", "")
            << "): " << durable::to_string(run.status) << " after " << run.invocations
            << " invocations\n";
  int n = 0;
  for (const auto& s : runtime.steps(run.id)) {
    std::cout << "  " << std::setw(2) << (s.kind == "run" ? std::to_string(++n) : "") << " "
              << std::left << std::setw(30) << s.id << std::right << s.kind << ", " << s.status
              << ", " << s.attempts << " attempt" << (s.attempts == 1 ? "" : "s");
    if (s.error) std::cout << ": " << s.error->message;
    std::cout << "\n";
  }
  std::cout << "  output: " << run.output.dump() << "\n";
}

// The steps whose failure a run's output records, in order.
std::vector<std::string> failed_steps(const json& output) {
  std::vector<std::string> steps;
  for (const auto& f : output.value("best_effort_failures", json::array())) {
    if (f.value("attempts", 0) == 2) steps.push_back(f.value("step", ""));
  }
  return steps;
}

void check_run(Verdict& v, durable::Runtime& runtime, const durable::RunInfo& run,
               const Customer& c, const std::vector<std::string>& expected_failures) {
  const json& domain = run.output.value("domain", json::object());
  const std::string verified = domain.value("event", json::object()).value("domain", "");
  v.check(run.status == durable::Status::completed,
          c.id + ": run " + std::string(durable::to_string(run.status)));
  v.check(failed_steps(run.output) == expected_failures,
          c.id + ": " + std::to_string(expected_failures.size()) +
              " best-effort failures recorded, each after 2 attempts");
  v.check(domain.value("verified", false) && verified == c.domain,
          c.id + ": its own domain.verified event received (" + c.domain + ")");
  int steps = 0;
  for (const auto& s : runtime.steps(run.id)) steps += s.kind == "run";
  v.check(steps == 20, c.id + ": " + std::to_string(steps) + " steps journaled");
}

int onboard(const std::string& database) {
  const Customer acme = onboarding::acme(), globex = onboarding::globex();
  DnsProvider dns;       // dns and crm outlive the runtime: the workflow holds them by reference
  Crm crm({globex.id});  // rate-limits globex's first call
  durable::RuntimeOptions options;
  options.database = database;
  // The retries and failures the runtime logs (as JSON lines on stderr) are in the timeline and
  // the journal already.
  options.log_level = durable::LogLevel::off;
  durable::Runtime runtime(options);
  if (!runtime.list().empty()) {
    std::cerr << "onboarding: " << database << " already holds runs; give a new --db\n";
    return 2;
  }
  runtime.add(workflow(dns, crm));
  std::cout << "onboarding on " << database << "\n\n";

  Server server(runtime);
  std::thread dns_service([&] { verify_domains(runtime, dns, 2); });
  struct Join {
    DnsProvider& dns;
    std::thread& thread;
    ~Join() {
      dns.stop();
      thread.join();
    }
  } join{dns, dns_service};

  const std::string acme_run = intake(runtime, acme);
  say("intake", "acme submitted: run " + acme_run);
  const std::string again = intake(runtime, acme);
  say("intake", "acme submitted again: run " + again +
                    (again == acme_run ? ", the same run; nothing new" : ", a NEW run"));
  const std::string globex_run = intake(runtime, globex);
  say("intake", "globex submitted: run " + globex_run);

  const bool over = wait_until(
      [&] {
        return finished(runtime.get(acme_run).status) && finished(runtime.get(globex_run).status);
      },
      Clock::now() + 30s);
  if (const std::string error = server.stop(); !error.empty()) {
    std::cerr << "onboarding: serve() failed: " << error << "\n";
    return 1;
  }
  const durable::RunInfo a = runtime.get(acme_run), g = runtime.get(globex_run);
  print_journal(runtime, a);
  print_journal(runtime, g);

  std::cout << "\nchecks:\n";
  Verdict v;
  v.check(over, "both runs ended within 30 s");
  durable::RunFilter all_onboardings;
  all_onboardings.workflow = "onboard-customer";
  v.check(again == acme_run && runtime.list(all_onboardings).size() == 2,
          "the second intake of acme returned its run; 2 runs in all");
  check_run(v, runtime, a, acme, {});
  check_run(v, runtime, g, globex, {"attach-payment-card", "configure-sso", "import-contacts"});
  std::cout << "\n" << (v.ok ? "all as expected" : "NOT as expected") << "\n";
  return v.ok ? 0 : 1;
}

std::string temp_database() {
  std::random_device random;
  const auto name = "durable-onboarding-" + std::to_string(random()) + ".db";
  return (std::filesystem::temp_directory_path() / name).string();
}

}  // namespace onboarding

int main(int argc, char** argv) {
  std::string db;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag != "--db" || i + 1 == argc) {
      std::cerr << "onboarding: bad flag '" << flag << "'\nusage: onboarding [--db FILE]\n";
      return 2;
    }
    db = argv[i + 1];
  }
  const bool temporary = db.empty();
  if (temporary) db = onboarding::temp_database();
  int status = 1;
  try {
    status = onboarding::onboard(db);
  } catch (const durable::Error& e) {
    std::cerr << "onboarding: " << e.what() << "\n";
  }
  if (temporary) {
    std::error_code ignored;
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db + suffix, ignored);
  }
  return status;
}
