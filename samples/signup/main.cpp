// The sign-up flow: create the account, add it to billing, sync the billing id back, wait a
// day, send the welcome email. Each invocation is printed, so the replay lifecycle is visible:
// the function runs from the top every time, and only the first step it has not done runs.
//
//   signup [--db FILE] [--email ADDRESS] [--delay DURATION]
//
// --delay shortens the day-long wait ("2s" in scripts/demo).

#include <durable/durable.hpp>
#include <iostream>
#include <string>

namespace signup {

struct Request {
  std::string email;
  std::string plan = "free";
};
void from_json(const durable::json& j, Request& r) {
  j.at("email").get_to(r.email);
  r.plan = j.value("plan", "free");
}
void to_json(durable::json& j, const Request& r) { j = {{"email", r.email}, {"plan", r.plan}}; }

struct Account {
  std::string account_id;
  std::string billing_id;
};
void to_json(durable::json& j, const Account& a) {
  j = {{"account_id", a.account_id}, {"billing_id", a.billing_id}};
}
void from_json(const durable::json& j, Account& a) {
  j.at("account_id").get_to(a.account_id);
  j.at("billing_id").get_to(a.billing_id);
}

// Stand-ins for the real services: each prints what it would do.
std::string create_account(const Request& r) {
  std::cout << "      -> creating the account for " << r.email << "\n";
  return "acct_" + r.email.substr(0, r.email.find('@'));
}
std::string open_billing(const std::string& account_id) {
  std::cout << "      -> opening a billing customer for " << account_id << "\n";
  return "cus_" + account_id.substr(5);
}
void send_welcome(const std::string& email) {
  std::cout << "      -> sending the welcome email to " << email << "\n";
}

durable::Workflow workflow(std::string delay) {
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

int main(int argc, char** argv) {
  std::string db = "signup.db", email = "ada@example.com", delay = "1 day";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--db")
      db = argv[i + 1];
    else if (flag == "--email")
      email = argv[i + 1];
    else if (flag == "--delay")
      delay = argv[i + 1];
    else {
      std::cerr << "unknown flag " << flag << "\nusage: signup [--db FILE] [--email ADDRESS] "
                << "[--delay DURATION]\n";
      return 2;
    }
  }
  try {
    durable::Runtime runtime({.database = db});
    runtime.add(signup::workflow(delay));
    const std::string id =
        runtime.start("signup", signup::Request{email, "pro"}, {.idempotency_key = email});
    std::cout << "run " << id << " for " << email << " on " << db << "\n\n";
    const durable::RunInfo run = runtime.wait(id, std::chrono::hours(48));

    std::cout << "\nrun " << run.id << ": " << durable::to_string(run.status) << " after "
              << run.invocations << " invocations\noutput: " << run.output.dump()
              << "\n\njournal:\n";
    for (const auto& s : runtime.steps(id)) {
      std::cout << "  " << s.id << " (" << s.kind << ", " << s.status << ", " << s.attempts
                << " attempt" << (s.attempts == 1 ? "" : "s") << ")"
                << (s.output.is_null() ? "" : " = " + s.output.dump()) << "\n";
    }
    std::cout << "\nstate history:\n";
    for (const auto& t : run.history) {
      std::cout << "  " << durable::to_string(t.status) << ": " << t.reason << "\n";
    }
    return run.status == durable::Status::completed ? 0 : 1;
  } catch (const durable::Error& e) {
    std::cerr << "signup: " << e.what() << "\n";
    return 1;
  }
}
