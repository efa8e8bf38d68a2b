// SPDX-License-Identifier: Apache-2.0
// Tests of the onboarding workflow with the test kit (durable::testing): the twenty steps in
// order, the best-effort steps that fail without failing the onboarding, the retries of the
// steps that must succeed, the wait for the DNS provider (its event and its 24-hour timeout), the
// intake's idempotency key and a crash at every step.

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "onboarding.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <durable/testing.hpp>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace doctest {
template <>
struct StringMaker<durable::Status> {
  static String convert(durable::Status s) { return std::string(durable::to_string(s)).c_str(); }
};
template <>
struct StringMaker<std::vector<std::string>> {
  static String convert(const std::vector<std::string>& keys) {
    std::string text = "[";
    for (const std::string& key : keys) text += (text.size() > 1 ? ", " : "") + key;
    return (text + "]").c_str();
  }
};
}  // namespace doctest

namespace {
using durable::json;
using durable::Status;
using durable::testing::RunResult;
using durable::testing::TestRuntime;
using onboarding::Customer;
using onboarding::DnsProvider;
using namespace std::chrono_literals;

// The step bodies before the wait for the DNS provider, after it, and all of them in order.
const std::vector<std::string> kBeforeDomain = {
    "validate-payload",    "check-duplicate-email", "create-account",   "provision-workspace",
    "create-admin-user",   "save-address",          "save-tax-details", "attach-payment-card",
    "create-subscription", "request-custom-domain"};
const std::vector<std::string> kAfterDomain = {"configure-sso",
                                               "import-contacts",
                                               "set-notification-preferences",
                                               "link-identity-verification",
                                               "seed-sample-project",
                                               "enable-plan-features",
                                               "add-to-crm",
                                               "send-welcome-email",
                                               "mark-onboarded"};

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
const std::vector<std::string> kAllSteps =
    concat(concat(kBeforeDomain, {"issue-tls-certificate"}), kAfterDomain);

// `keys` with each key of `attempts` repeated in place that many times in all: the bodies of the
// steps that ran more than one attempt.
std::vector<std::string> with_attempts(const std::vector<std::string>& keys,
                                       const std::map<std::string, int>& attempts) {
  std::vector<std::string> out;
  for (const std::string& key : keys) {
    const auto it = attempts.find(key);
    out.insert(out.end(), it == attempts.end() ? 1 : it->second, key);
  }
  return out;
}

// No log lines and no timeline: the journal and the kit's record say what ran.
durable::RuntimeOptions quiet() { return {.log_level = durable::LogLevel::off}; }

// The onboarding workflow on a TestRuntime, with its stand-in services; the test plays the DNS
// provider. The CRM rate-limits no one unless told.
struct Onboarding {
  explicit Onboarding(std::set<std::string> rate_limited = {})
      : crm(std::move(rate_limited)), kit(quiet()) {
    onboarding::timeline = nullptr;
    kit.add(onboarding::workflow(dns, crm));
  }
  // Starts the onboarding of `c` and drives it until it ends or waits for its domain.
  RunResult start(const Customer& c) { return kit.run("onboard-customer", c); }
  // The verification requests the DNS provider received since the last call.
  std::vector<DnsProvider::Request> requests() {
    std::vector<DnsProvider::Request> all;
    DnsProvider::Request r;
    while (dns.next(r, durable::Clock::now())) all.push_back(r);
    return all;
  }
  // Reports the domain of request `r` verified, as the program's DNS provider does.
  void verify(const DnsProvider::Request& r) {
    kit.send_event("domain.verified",
                   {{"account", r.account}, {"domain", r.domain}, {"record", "CNAME"}});
  }
  // Onboards `c` to the end: starts it, then verifies the domains it asked for.
  RunResult onboard(const Customer& c) {
    const std::string id = start(c).info.id;
    for (const DnsProvider::Request& r : requests()) verify(r);
    return kit.result(id);
  }
  // The journal entry of `step` in run `id`.
  durable::StepInfo journaled(const std::string& id, const std::string& step) {
    for (durable::StepInfo& s : kit.runtime().steps(id)) {
      if (s.id == step) return s;
    }
    FAIL("step " << step << " is not in the journal of run " << id);
    return {};
  }

  DnsProvider dns;  // both outlive the kit, which holds the workflow
  onboarding::Crm crm;
  TestRuntime kit;
};

json failure(const std::string& step, const std::string& error) {
  return {{"step", step}, {"error", error}, {"attempts", 2}};
}

}  // namespace

TEST_CASE("acme is onboarded in twenty steps once the DNS provider verifies its domain") {
  Onboarding test;
  const RunResult waiting = test.start(onboarding::acme());
  CHECK(waiting.info.status == Status::waiting);
  CHECK(waiting.executed == kBeforeDomain);

  const std::vector<DnsProvider::Request> asked = test.requests();
  REQUIRE(asked.size() == 1);
  CHECK(asked[0].run_id == waiting.info.id);
  CHECK(asked[0].account == "acct_acme");
  CHECK(asked[0].domain == "app.acme.example");

  test.verify(asked[0]);
  const RunResult done = test.kit.result(waiting.info.id);
  CHECK(done.info.status == Status::completed);
  CHECK(done.executed == kAllSteps);
  // every_step replay: one invocation per step, one that reaches the wait and suspends, and one
  // that resumes with the event.
  CHECK(done.invocations == 22);
  CHECK(done.info.output ==
        json{{"account", "acct_acme"},
             {"workspace", "acme.workspace.example"},
             {"subscription", "sub_acme"},
             {"domain",
              {{"name", "app.acme.example"},
               {"verified", true},
               {"event",
                {{"account", "acct_acme"}, {"domain", "app.acme.example"}, {"record", "CNAME"}}},
               {"certificate", "certificate for app.acme.example"}}},
             {"best_effort_failures", json::array()}});
}

TEST_CASE(
    "globex's declined card, unsupported SSO and non-CSV contacts do not fail its onboarding") {
  Onboarding test;
  const RunResult done = test.onboard(onboarding::globex());
  CHECK(done.info.status == Status::completed);
  CHECK(done.info.output["best_effort_failures"] ==
        json::array({failure("attach-payment-card", "card declined by the issuer"),
                     failure("configure-sso", "SSO provider legacy-adfs unsupported"),
                     failure("import-contacts", "contacts.xls is not a CSV")}));
  // Two attempts each, then the onboarding goes on with every later step.
  CHECK(done.executed ==
        with_attempts(kAllSteps,
                      {{"attach-payment-card", 2}, {"configure-sso", 2}, {"import-contacts", 2}}));
  CHECK(test.journaled(done.info.id, "attach-payment-card").status == "failed");
  CHECK(done.info.output["subscription"] == "sub_globex");
  CHECK(done.info.output["domain"]["verified"] == true);
}

TEST_CASE("a best-effort step that fails for good is recorded and the onboarding goes on") {
  Onboarding test;
  test.kit.fail("set-notification-preferences", "preferences service unavailable");
  const RunResult done = test.onboard(onboarding::acme());
  CHECK(done.info.status == Status::completed);
  CHECK(done.info.output["best_effort_failures"] ==
        json::array({failure("set-notification-preferences", "preferences service unavailable")}));
  CHECK(done.executed == with_attempts(kAllSteps, {{"set-notification-preferences", 2}}));
}

TEST_CASE("a best-effort step that fails once succeeds on its second attempt and records nothing") {
  Onboarding test;
  test.kit.fail("configure-sso", "okta timed out", 1);
  const RunResult done = test.onboard(onboarding::acme());
  CHECK(done.info.status == Status::completed);
  CHECK(done.info.output["best_effort_failures"] == json::array());
  CHECK(done.executed == with_attempts(kAllSteps, {{"configure-sso", 2}}));
  CHECK(test.journaled(done.info.id, "configure-sso").output == "okta connected");
}

TEST_CASE("a rate-limited CRM call is retried by the workflow's policy") {
  Onboarding test({"globex"});  // as in the program: the CRM answers globex's first call 429
  const RunResult done = test.onboard(onboarding::globex());
  CHECK(done.info.status == Status::completed);
  CHECK(done.executed == with_attempts(kAllSteps, {{"attach-payment-card", 2},
                                                   {"configure-sso", 2},
                                                   {"import-contacts", 2},
                                                   {"add-to-crm", 2}}));
  const durable::StepInfo crm = test.journaled(done.info.id, "add-to-crm");
  CHECK(crm.status == "completed");
  CHECK(crm.attempts == 2);
  CHECK(crm.output == "Globex added");
  // A must-succeed step is not a best-effort failure: only the three of globex are recorded.
  CHECK(done.info.output["best_effort_failures"].size() == 3);
}

TEST_CASE("a must-succeed step gets three attempts, its backoffs passing on the virtual clock") {
  Onboarding test;
  const auto before = test.kit.now();
  test.kit.fail("create-account", "accounts database busy", 2);
  const RunResult waiting = test.start(onboarding::acme());
  CHECK(waiting.info.status == Status::waiting);
  CHECK(waiting.executed == with_attempts(kBeforeDomain, {{"create-account", 3}}));
  CHECK(test.journaled(waiting.info.id, "create-account").attempts == 3);
  // 20 ms then 40 ms of backoff (the sample's steady policy, no jitter), and nothing else; the
  // journal keeps times in whole milliseconds, so the clock may land up to 1 ms short.
  const auto waited = test.kit.now() - before;
  CHECK(waited > 59ms);
  CHECK(waited <= 60ms);
}

TEST_CASE("a must-succeed step that fails three times fails the onboarding") {
  Onboarding test;
  test.kit.fail("create-subscription", "billing API down");
  const RunResult failed = test.start(onboarding::acme());
  CHECK(failed.info.status == Status::failed);
  REQUIRE(failed.info.error.has_value());
  CHECK(failed.info.error->step_id == "create-subscription");
  CHECK(failed.info.error->message == "billing API down");
  CHECK(failed.info.error->attempts == 3);
  // Nothing after it ran: no domain was requested.
  const std::vector<std::string> up_to_it(kBeforeDomain.begin(), kBeforeDomain.end() - 1);
  CHECK(failed.executed == with_attempts(up_to_it, {{"create-subscription", 3}}));
  CHECK(test.requests().empty());
}

TEST_CASE("a customer without an email address fails validation at once, without a retry") {
  Onboarding test;
  Customer nobody = onboarding::acme();
  nobody.email = "ops.acme.example";
  const RunResult failed = test.start(nobody);
  CHECK(failed.info.status == Status::failed);
  REQUIRE(failed.info.error.has_value());
  CHECK(failed.info.error->step_id == "validate-payload");
  CHECK(failed.info.error->attempts == 1);
  CHECK(failed.info.error->message == "customer acme: an email and a domain are needed");
  CHECK(failed.executed == std::vector<std::string>{"validate-payload"});
}

TEST_CASE("mocked external services give their answer and their bodies do not run") {
  Onboarding test;
  test.kit.mock("attach-payment-card", "card tok_test attached");  // the payment provider
  test.kit.mock("send-welcome-email", "welcome email queued");     // the email service
  const RunResult done = test.onboard(onboarding::globex());
  CHECK(done.info.status == Status::completed);
  // The mocked card is not declined: only globex's two settings failures remain.
  CHECK(done.info.output["best_effort_failures"] ==
        json::array({failure("configure-sso", "SSO provider legacy-adfs unsupported"),
                     failure("import-contacts", "contacts.xls is not a CSV")}));
  std::vector<std::string> ran =
      with_attempts(kAllSteps, {{"configure-sso", 2}, {"import-contacts", 2}});
  std::erase(ran, "attach-payment-card");
  std::erase(ran, "send-welcome-email");
  CHECK(done.executed == ran);
  CHECK(test.journaled(done.info.id, "send-welcome-email").output == "welcome email queued");
}

TEST_CASE("with the DNS request mocked, no request reaches the provider and the run still waits") {
  Onboarding test;
  test.kit.mock("request-custom-domain", "CNAME requested (mock)");
  const RunResult waiting = test.start(onboarding::acme());
  CHECK(waiting.info.status == Status::waiting);
  CHECK(test.requests().empty());
  test.verify({waiting.info.id, "acct_acme", "app.acme.example"});
  CHECK(test.kit.result(waiting.info.id).info.status == Status::completed);
}

TEST_CASE("a run waiting for its domain holds no slot: the next onboarding goes ahead") {
  Onboarding test;  // the workflow's concurrency is 1
  const RunResult acme = test.start(onboarding::acme());
  const RunResult globex = test.start(onboarding::globex());
  CHECK(acme.info.status == Status::waiting);
  CHECK(globex.info.status == Status::waiting);
  CHECK(globex.executed == with_attempts(kBeforeDomain, {{"attach-payment-card", 2}}));
}

TEST_CASE("each run wakes only with its own account's domain.verified event") {
  Onboarding test;
  const std::string acme = test.start(onboarding::acme()).info.id;
  const std::string globex = test.start(onboarding::globex()).info.id;
  const std::vector<DnsProvider::Request> asked = test.requests();
  REQUIRE(asked.size() == 2);

  test.verify({"", "acct_initech", "www.initech.example"});  // a customer of someone else
  CHECK(test.kit.result(acme).info.status == Status::waiting);
  CHECK(test.kit.result(globex).info.status == Status::waiting);

  test.verify(asked[1]);  // globex's, as the program's provider does: the last requested first
  CHECK(test.kit.result(acme).info.status == Status::waiting);
  const RunResult g = test.kit.result(globex);
  CHECK(g.info.status == Status::completed);
  CHECK(g.info.output["domain"]["event"]["domain"] == "portal.globex.example");

  test.verify(asked[0]);
  const RunResult a = test.kit.result(acme);
  CHECK(a.info.status == Status::completed);
  CHECK(a.info.output["domain"]["event"]["domain"] == "app.acme.example");
}

TEST_CASE("a domain verified before the run waits for it does not count") {
  Onboarding test;
  test.verify({"", "acct_acme", "app.acme.example"});
  const RunResult waiting = test.start(onboarding::acme());
  CHECK(waiting.info.status == Status::waiting);
}

TEST_CASE("without verification the onboarding goes on after 24 hours, without the domain") {
  Onboarding test;
  const auto wall = std::chrono::steady_clock::now();
  const auto before = test.kit.now();
  const RunResult waiting = test.start(onboarding::acme());

  test.kit.advance(23h + 59min);
  CHECK(test.kit.result(waiting.info.id).info.status == Status::waiting);

  test.kit.advance(1min);
  const RunResult done = test.kit.result(waiting.info.id);
  CHECK(done.info.status == Status::completed);
  CHECK(done.info.output["domain"] == json{{"name", "app.acme.example"}, {"verified", false}});
  CHECK(done.executed == concat(kBeforeDomain, kAfterDomain));  // no certificate
  CHECK(test.kit.now() - before >= 24h);
  // A day on the virtual clock; the test measured 2 to 6 ms of wall time (RelWithDebInfo).
  CHECK(std::chrono::steady_clock::now() - wall < 2s);

  // The DNS provider's late report finds no one waiting.
  test.verify(test.requests().at(0));
  CHECK(test.kit.result(waiting.info.id).info.output == done.info.output);
}

TEST_CASE("submitting the same customer twice returns the first run and starts nothing new") {
  Onboarding test;
  durable::Runtime& runtime = test.kit.runtime();
  const std::string first = onboarding::intake(runtime, onboarding::acme());
  // The intake returns at once: the run is stored, no step has run.
  CHECK(test.kit.result(first).info.status == Status::pending);
  CHECK(test.kit.result(first).executed.empty());
  CHECK(onboarding::intake(runtime, onboarding::acme()) == first);

  test.kit.advance(0ms);  // drives the run up to its wait
  CHECK(test.kit.result(first).info.status == Status::waiting);
  CHECK(onboarding::intake(runtime, onboarding::acme()) == first);
  CHECK(onboarding::intake(runtime, onboarding::globex()) != first);

  durable::RunFilter onboardings;
  onboardings.workflow = "onboard-customer";
  CHECK(runtime.list(onboardings).size() == 2);
  CHECK(test.requests().size() == 1);  // acme's domain, requested once
}

// crash_sweep drives a run through sleeps and backoffs but brings no event: each run of the sweep
// ends waiting for its domain, so the sweep covers the ten steps before the wait.
TEST_CASE("a crash at any step before the domain wait resumes the onboarding where it was") {
  Onboarding services;
  const durable::testing::CrashSweep sweep = durable::testing::crash_sweep(
      onboarding::workflow(services.dns, services.crm), onboarding::acme(), quiet());
  INFO(sweep.report());
  CHECK(sweep.ok());
  CHECK(sweep.expected.info.status == Status::waiting);
  CHECK(sweep.expected.executed == kBeforeDomain);
  REQUIRE(sweep.cases.size() == 2 * kBeforeDomain.size());
  for (const durable::testing::CrashCase& c : sweep.cases) {
    CHECK(c.status == Status::waiting);
    // A body whose result was lost runs again, and only that one; among them
    // request-custom-domain, so the DNS provider may be asked twice for a domain, which is safe.
    CHECK(c.ran_again ==
          (c.before_commit ? std::vector<std::string>{c.step} : std::vector<std::string>{}));
  }
}
