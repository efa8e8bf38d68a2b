// SPDX-License-Identifier: Apache-2.0
#pragma once
// The onboarding workflow, `onboard-customer`, with its input (Customer), its steps, the intake
// that starts it and the stand-ins for the services it calls (the DNS provider, the CRM), shared
// by the sample program (main.cpp) and its tests (onboarding_test.cpp).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <durable/durable.hpp>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace onboarding {
using durable::Clock;
using durable::json;
using namespace std::chrono_literals;

// What the intake receives for a new customer.
struct Customer {
  std::string id, company, email, domain, card, sso, contacts;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Customer, id, company, email, domain, card, sso, contacts)

// The two customers the program onboards: acme, for whom everything works, and globex, whose
// card is declined, whose SSO provider is not supported and whose contacts file is not a CSV.
inline Customer acme() {
  return {"acme",     "Acme Corp", "ops@acme.example", "app.acme.example",
          "tok_visa", "okta",      "contacts.csv"};
}
inline Customer globex() {
  return {"globex",       "Globex",      "it@globex.example", "portal.globex.example",
          "tok_declined", "legacy-adfs", "contacts.xls"};
}

// Where say() prints the timeline: standard output, or nowhere when null (the tests, which look
// at the journal instead).
inline std::atomic<std::ostream*> timeline{&std::cout};

// One line of the timeline, stamped with the milliseconds since the program started; from any
// thread.
inline void say(const std::string& who, const std::string& line) {
  static const auto start = std::chrono::steady_clock::now();
  static std::mutex mutex;
  std::ostream* out = timeline.load();
  if (out == nullptr) return;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  std::ostringstream text;
  text << "[" << std::setw(5) << ms.count() << " ms] " << std::left << std::setw(8) << who << line;
  std::lock_guard lock(mutex);
  *out << text.str() << std::endl;
}

// A step body of the stand-in services: prints what it does and returns `result`.
inline std::string done(const Customer& c, const std::string& step, const std::string& result) {
  say(c.id, step + ": " + result);
  return result;
}

// A failure of a stand-in service: printed, then thrown as one failed attempt.
[[noreturn]] inline void fail(const Customer& c, const std::string& step, const std::string& why) {
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

// The CRM, another service: it rate-limits the first call made for each customer it was given (a
// transient failure, which the workflow's policy retries). The program gives it globex.
class Crm {
 public:
  explicit Crm(std::set<std::string> rate_limited_once = {})
      : limited_(std::move(rate_limited_once)) {}
  // True once for each of those customers: this call is answered 429.
  bool rate_limited(const Customer& c) {
    std::lock_guard lock(mutex_);
    return limited_.erase(c.id) == 1;
  }

 private:
  std::mutex mutex_;
  std::set<std::string> limited_;
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
inline json open_account(durable::Step& step, const Customer& c) {
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
inline std::string set_up_billing(durable::Step& step, const Customer& c, json& failures) {
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
inline json connect_domain(durable::Step& step, const Customer& c, const std::string& account,
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
inline void personalize(durable::Step& step, const Customer& c, json& failures) {
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

// Steps 17-20: switch it on and say hello. A rate-limited CRM call is retried by the workflow's
// policy.
inline void go_live(durable::Step& step, const Customer& c, const std::string& subscription,
                    Crm& crm) {
  step.run("enable-plan-features",
           [&] { return done(c, "enable-plan-features", "features of " + subscription + " on"); });
  step.run("add-to-crm", [&] {
    if (crm.rate_limited(c)) fail(c, "add-to-crm", "CRM answered 429, rate limited");
    return done(c, "add-to-crm", c.company + " added");
  });
  step.run("send-welcome-email",
           [&] { return done(c, "send-welcome-email", "welcome email sent to " + c.email); });
  step.run("mark-onboarded", [&] { return done(c, "mark-onboarded", "onboarded"); });
}

// The workflow; `dns` and `crm` must outlive every runtime it is added to.
inline durable::Workflow workflow(DnsProvider& dns, Crm& crm) {
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
      [&dns, &crm](durable::Step& step, const Customer& c) {
        json failures = json::array();  // rebuilt on every invocation: StepFailed replays
        json out = open_account(step, c);
        out["subscription"] = set_up_billing(step, c, failures);
        out["domain"] = connect_domain(step, c, out["account"].get<std::string>(), dns);
        personalize(step, c, failures);
        go_live(step, c, out["subscription"].get<std::string>(), crm);
        out["best_effort_failures"] = failures;
        return out;
      },
      options);
}

// The intake: stores the submission as a run and returns at once. The key makes a second
// submission of the same customer (a client retry, a hedged request) return the first run.
inline std::string intake(durable::Runtime& runtime, const Customer& c) {
  durable::StartOptions options;
  options.idempotency_key = "onboard:" + c.id;
  return runtime.start("onboard-customer", c, options);
}

}  // namespace onboarding
