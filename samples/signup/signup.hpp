// SPDX-License-Identifier: Apache-2.0
#pragma once
// The sign-up workflow and the stand-ins for the services it calls, shared by the sample
// program (main.cpp) and its tests (signup_test.cpp).

#include <durable/durable.hpp>
#include <iostream>
#include <string>

namespace signup {

struct Request {
  std::string email;
  std::string plan = "free";
};
inline void from_json(const durable::json& j, Request& r) {
  j.at("email").get_to(r.email);
  r.plan = j.value("plan", "free");
}
inline void to_json(durable::json& j, const Request& r) {
  j = {{"email", r.email}, {"plan", r.plan}};
}

struct Account {
  std::string account_id;
  std::string billing_id;
};
inline void to_json(durable::json& j, const Account& a) {
  j = {{"account_id", a.account_id}, {"billing_id", a.billing_id}};
}
inline void from_json(const durable::json& j, Account& a) {
  j.at("account_id").get_to(a.account_id);
  j.at("billing_id").get_to(a.billing_id);
}

// Stand-ins for the real services: each prints what it would do.
inline std::string create_account(const Request& r) {
  std::cout << "      -> creating the account for " << r.email << "\n";
  return "acct_" + r.email.substr(0, r.email.find('@'));
}
inline std::string open_billing(const std::string& account_id) {
  std::cout << "      -> opening a billing customer for " << account_id << "\n";
  return "cus_" + account_id.substr(5);
}
inline void send_welcome(const std::string& email) {
  std::cout << "      -> sending the welcome email to " << email << "\n";
}

inline durable::Workflow workflow(std::string delay) {
  return durable::Workflow("signup", [delay](durable::Step& step, const Request& request) {
    static int invocation = 0;
    std::cout << "invocation " << ++invocation << (step.replaying() ? " (replaying)" : "") << "\n";
    const auto account_id = step.run("signup-user", [&] { return create_account(request); });
    std::cout << "    signup-user       -> " << account_id << "\n";
    const auto billing_id = step.run("add-to-billing", [&] { return open_billing(account_id); });
    std::cout << "    add-to-billing    -> " << billing_id << "\n";
    const Account account = step.run("sync-user-billing", [&] {
      std::cout << "      -> saving the billing id on the account\n";
      return Account{account_id, billing_id};
    });
    std::cout << "    sync-user-billing -> done\n";
    step.sleep("24h-delay-for-email", delay);
    std::cout << "    24h-delay-for-email -> over\n";
    step.run("send-email", [&] { send_welcome(request.email); });
    std::cout << "    send-email        -> sent\n";
    return account;
  });
}

}  // namespace signup
