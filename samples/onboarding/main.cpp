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
#include <condition_variable>
#include <deque>
#include <durable/durable.hpp>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace onboarding {
using durable::Clock;
using durable::json;
using namespace std::chrono_literals;

// What the intake receives for a new customer.
struct Customer {
  std::string id, company, email, domain, card, sso, contacts;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Customer, id, company, email, domain, card, sso, contacts)

// One line of the timeline, stamped with the milliseconds since the program started; from any
// thread.
void say(const std::string& who, const std::string& line) {
  static const auto start = std::chrono::steady_clock::now();
  static std::mutex mutex;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  std::ostringstream out;
  out << "[" << std::setw(5) << ms.count() << " ms] " << std::left << std::setw(8) << who << line;
  std::lock_guard lock(mutex);
  std::cout << out.str() << std::endl;
}

// A step body of the stand-in services: prints what it does and returns `result`.
std::string done(const Customer& c, const std::string& step, const std::string& result) {
  say(c.id, step + ": " + result);
  return result;
}

// A failure of a stand-in service: printed, then thrown as one failed attempt.
[[noreturn]] void fail(const Customer& c, const std::string& step, const std::string& why) {
  say(c.id, step + ": FAILED, " + why);
  throw std::runtime_error(why);
}

// The DNS provider, another service: a step asks it to verify a domain, and it reports the domain
// verified later, with the event "domain.verified". The requests name the run to report to.
class DnsProvider {
 public:
  struct Request {
    std::string run_id, account, domain;
  };
  void request(Request r) {
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(std::move(r));
    }
    ready_.notify_all();
  }
  // The next request; false when none came before the deadline or stop() was called.
  bool next(Request& r, Clock::time_point deadline) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_until(lock, deadline, [&] { return stop_ || !requests_.empty(); })) {
      return false;
    }
    if (stop_) return false;
    r = std::move(requests_.front());
    requests_.pop_front();
    return true;
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
  }
  bool stopped() {
    std::lock_guard lock(mutex_);
    return stop_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Request> requests_;
  bool stop_ = false;
};

// Best-effort steps get two quick attempts; when both fail, the failure is recorded in `failures`
// and the onboarding goes on (a later process, such as dunning for a declined card, deals with it).
template <class F>
void best_effort(durable::Step& step, std::string_view id, F&& fn, json& failures) {
  durable::RetryPolicy quick;
  quick.max_attempts = 2;
  quick.initial_backoff = 10ms;
  quick.jitter = 0;
  try {
    step.run(id, std::forward<F>(fn), {.retry = quick});
  } catch (const durable::StepFailed& e) {
    failures.push_back(
        {{"step", e.info.step_id}, {"error", e.info.message}, {"attempts", e.info.attempts}});
  }
}

// Steps 1-5: the account itself.
json open_account(durable::Step& step, const Customer& c) {
  step.run("validate-payload", [&] {
    if (c.email.find('@') == std::string::npos || c.domain.empty()) {
      throw durable::NonRetryableError("customer " + c.id + ": an email and a domain are needed");
    }
    done(c, "validate-payload", "ok");
  });
  step.run("check-duplicate-email",
           [&] { return done(c, "check-duplicate-email", c.email + " is new"); });
  const auto account =
      step.run("create-account", [&] { return done(c, "create-account", "acct_" + c.id); });
  const auto workspace = step.run("provision-workspace", [&] {
    return done(c, "provision-workspace", c.id + ".workspace.example");
  });
  step.run("create-admin-user",
           [&] { return done(c, "create-admin-user", "admin " + c.email + " invited"); });
  return {{"account", account}, {"workspace", workspace}};
}

// Steps 6-9: billing. A declined card does not stop the onboarding.
std::string set_up_billing(durable::Step& step, const Customer& c, json& failures) {
  step.run("save-address", [&] { return done(c, "save-address", "billing address saved"); });
  step.run("save-tax-details", [&] { return done(c, "save-tax-details", "VAT id saved"); });
  best_effort(
      step, "attach-payment-card",
      [&] {
        if (c.card == "tok_declined") fail(c, "attach-payment-card", "card declined by the issuer");
        return done(c, "attach-payment-card", "card " + c.card + " attached");
      },
      failures);
  return step.run("create-subscription",
                  [&] { return done(c, "create-subscription", "sub_" + c.id); });
}

// Steps 10-11: the custom domain, which waits for the DNS provider to verify it.
json connect_domain(durable::Step& step, const Customer& c, const std::string& account,
                    DnsProvider& dns) {
  const std::string run_id(step.run_id());
  step.run("request-custom-domain", [&] {
    dns.request({run_id, account, c.domain});
    return done(c, "request-custom-domain", "CNAME for " + c.domain + " requested");
  });
  const std::optional<json> verified = step.wait_for_event(
      "dns-ready", "domain.verified", {.timeout = 24h, .match = {{"account", account}}});
  if (!verified) return {{"name", c.domain}, {"verified", false}};
  const auto certificate = step.run("issue-tls-certificate", [&] {
    return done(c, "issue-tls-certificate", "certificate for " + verified->value("domain", ""));
  });
  return {
      {"name", c.domain}, {"verified", true}, {"event", *verified}, {"certificate", certificate}};
}

// Steps 12-16: settings that should, but need not, succeed.
void personalize(durable::Step& step, const Customer& c, json& failures) {
  best_effort(
      step, "configure-sso",
      [&] {
        if (c.sso == "legacy-adfs")
          fail(c, "configure-sso", "SSO provider legacy-adfs unsupported");
        return done(c, "configure-sso", c.sso + " connected");
      },
      failures);
  best_effort(
      step, "import-contacts",
      [&] {
        if (!c.contacts.ends_with(".csv")) fail(c, "import-contacts", c.contacts + " is not a CSV");
        return done(c, "import-contacts", "contacts imported from " + c.contacts);
      },
      failures);
  best_effort(
      step, "set-notification-preferences",
      [&] { return done(c, "set-notification-preferences", "weekly digest on"); }, failures);
  best_effort(
      step, "link-identity-verification",
      [&] { return done(c, "link-identity-verification", "verification linked"); }, failures);
  step.run("seed-sample-project",
           [&] { return done(c, "seed-sample-project", "sample project created"); });
}

// The CRM rate-limits globex's first call: a transient failure, retried by the workflow's policy.
bool crm_rate_limited(const Customer& c) {
  static std::mutex mutex;
  static std::set<std::string> limited;
  std::lock_guard lock(mutex);
  return c.id == "globex" && limited.insert(c.id).second;
}

// Steps 17-20: switch it on and say hello.
void go_live(durable::Step& step, const Customer& c, const std::string& subscription) {
  step.run("enable-plan-features",
           [&] { return done(c, "enable-plan-features", "features of " + subscription + " on"); });
  step.run("add-to-crm", [&] {
    if (crm_rate_limited(c)) fail(c, "add-to-crm", "CRM answered 429, rate limited");
    return done(c, "add-to-crm", c.company + " added");
  });
  step.run("send-welcome-email",
           [&] { return done(c, "send-welcome-email", "welcome email sent to " + c.email); });
  step.run("mark-onboarded", [&] { return done(c, "mark-onboarded", "onboarded"); });
}

durable::Workflow workflow(DnsProvider& dns) {
  durable::WorkflowOptions options;
  durable::RetryPolicy steady;  // must-succeed steps: three quick attempts
  steady.max_attempts = 3;
  steady.initial_backoff = 20ms;
  steady.jitter = 0;
  options.retry = steady;
  // One onboarding executing at a time keeps the load on the downstream services flat; a run
  // waiting for its domain holds no slot.
  options.concurrency = 1;
  return durable::Workflow(
      "onboard-customer",
      [&dns](durable::Step& step, const Customer& c) {
        json failures = json::array();  // rebuilt on every invocation: StepFailed replays
        json out = open_account(step, c);
        out["subscription"] = set_up_billing(step, c, failures);
        out["domain"] = connect_domain(step, c, out["account"].get<std::string>(), dns);
        personalize(step, c, failures);
        go_live(step, c, out["subscription"].get<std::string>());
        out["best_effort_failures"] = failures;
        return out;
      },
      options);
}

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

// The intake: stores the submission as a run and returns at once. The key makes a second
// submission of the same customer (a client retry, a hedged request) return the first run.
std::string intake(durable::Runtime& runtime, const Customer& c) {
  durable::StartOptions options;
  options.idempotency_key = "onboard:" + c.id;
  return runtime.start("onboard-customer", c, options);
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
  const Customer acme{"acme",     "Acme Corp", "ops@acme.example", "app.acme.example",
                      "tok_visa", "okta",      "contacts.csv"};
  const Customer globex{"globex",       "Globex",      "it@globex.example", "portal.globex.example",
                        "tok_declined", "legacy-adfs", "contacts.xls"};
  DnsProvider dns;  // outlives the runtime: the workflow holds it by reference
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
  runtime.add(workflow(dns));
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
