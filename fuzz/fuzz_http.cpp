// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness of the HTTP request handling. The input is what a client sends on one
// connection: one or more HTTP/1.x requests. Each is parsed as the server parses it (Beast's
// request_parser with HttpOptions' header and body limits), its header checked by the server's
// own checks (http_messages.hpp; also those of a server that takes tokens and signatures, with
// the body of a signed request), and, when a server on 127.0.0.1 without a token would take it,
// answered by api_handler over an Admin on a database seeded with a run in each state.
//
// Beyond the sanitizers, a bug here is what the server would answer 500 or 503, or could not
// send: an exception out of api_handler (the server answers it 500 internal, and every client
// mistake is meant to be a 4xx), a 503 (the database failing, which this one never does), a
// status outside 100-599, a header holding CR, LF or NUL, or a JSON answer whose body is not
// JSON or, for an error, not in json_error's shape.
//
// Run ids are random, so inputs name the seeded runs by stand-ins in the path, replaced after
// the target is decoded: ~completed, ~failed, ~sleeping, ~waiting. The schedule is "nightly".
// Every input runs on a fresh copy of the seeded file whenever the one before changed it, so an
// input replays alone as it ran in the fuzzer, and a long run does not grow the database.
#include <signal.h>
#include <unistd.h>

#include <array>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <durable/durable.hpp>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "admin.hpp"
#include "env.hpp"
#include "api.hpp"
#include "http_checks.hpp"
#include "http_messages.hpp"

namespace {

namespace fs = std::filesystem;
namespace http = boost::beast::http;
using durable::json;
using durable::ops::HttpOptions;
using durable::ops::HttpRequest;
using durable::ops::HttpResponse;
using Message = http::request<http::string_body>;

constexpr int kMaxRequestsPerInput = 4;    // on one keep-alive connection: a start, then a show
constexpr int kInputsPerFreshCopy = 1000;  // at the latest, should a GET ever write
constexpr std::string_view kDirPrefix = "durable-fuzz-http-";  // then the process id

std::string_view text_of(boost::beast::string_view text) { return {text.data(), text.size()}; }

[[noreturn]] void fail(std::string_view what, const HttpRequest& request,
                       const HttpResponse& response) {
  std::fprintf(stderr, "fuzz_http: %.*s\n  request: %s %s\n  response: %d %s\n",
               static_cast<int>(what.size()), what.data(), request.method.c_str(),
               request.path.c_str(), response.status, response.body.c_str());
  std::abort();
}

// Runs in each state the routes act on, made once per process by a Runtime as an application
// would; the inputs run on copies of this file.
struct Seed {
  fs::path dir;
  std::array<std::pair<std::string, std::string>, 4> stand_ins;  // "~completed" -> its run id
  durable::Clock::time_point now;

  Seed() {
    // In memory where Linux offers it: on a disk, the syncs of a fresh copy and of its first
    // writes take some 20 ms, a hundred times the rest of an input.
    const fs::path parent = fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
    remove_dirs_of_dead_processes(parent);
    dir = parent / (std::string(kDirPrefix) + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directory(dir);
    make_runs((dir / "seed.db").string());
    now = durable::Clock::now();
  }
  ~Seed() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }

  // libFuzzer ends a process that crashed with _Exit, which skips ~Seed: the next one cleans up.
  static void remove_dirs_of_dead_processes(const fs::path& parent) {
    std::error_code ignored;
    for (const auto& entry : fs::directory_iterator(parent, ignored)) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with(kDirPrefix)) continue;
      const int pid = std::atoi(name.c_str() + kDirPrefix.size());
      if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) fs::remove_all(entry.path(), ignored);
    }
  }

  void make_runs(const std::string& db) {
    using durable::Step;
    using durable::Workflow;
    durable::Runtime runtime({.database = db, .log_level = durable::LogLevel::off});
    runtime.add(Workflow("signup", [](Step& step, const json& input) -> json {
      return step.run("create-account", [&] { return "acct_" + input.value("email", ""); });
    }));
    durable::RetryPolicy once;
    once.max_attempts = 1;
    runtime.add(Workflow("checkout",
                         [](Step& step, const json&) -> json {
                           step.run("reserve-stock", [] { return 2; });
                           return step.run("charge-card",
                                           []() -> json { throw std::runtime_error("declined"); });
                         },
                         {.retry = once}));
    runtime.add(Workflow("send-reminder", [](Step& step, const json&) -> json {
      step.sleep("wait-an-hour", std::chrono::hours(1));
      return nullptr;
    }));
    runtime.add(Workflow("approve-expense", [](Step& step, const json& input) -> json {
      durable::WaitOptions wait;
      wait.match = {{"expense_id", input.value("expense_id", "")}};
      return step.wait_for_event("approval", "expense.approved", wait).value_or(nullptr);
    }));
    stand_ins = {
        {{"~completed", runtime.start("signup", {{"email", "ada@example.com"}},
                                      {.correlation_id = "fixture-signup"})},
         {"~failed", runtime.start("checkout", {{"order", "o-1"}}, {.tags = {{"tenant", "acme"}}})},
         {"~sleeping", runtime.start("send-reminder")},
         {"~waiting", runtime.start("approve-expense", {{"expense_id", "exp-7"}})}}};
    runtime.schedule("signup", {{"email", "cron@example.com"}},
                     {.id = "nightly", .cron = "0 3 * * *"});
    runtime.run_until_idle();  // each run as far as it goes: no retry or timer is due
  }
};

// The Admin of the inputs, on a copy of the seeded file.
class Database {
 public:
  explicit Database(const Seed& seed) : seed_(seed) { renew(); }

  durable::ops::Admin& admin() { return *admin_; }

  // A fresh copy after an input that changed the file, and every kInputsPerFreshCopy inputs.
  void after_input(bool changed) {
    if (changed || ++inputs_ >= kInputsPerFreshCopy) renew();
  }

 private:
  void renew() {
    admin_.reset();
    const fs::path db = seed_.dir / "fuzz.db";
    for (const char* suffix : {"", "-wal", "-shm"}) {
      fs::path from = seed_.dir / ("seed.db" + std::string(suffix));
      fs::path to = db;
      to += suffix;
      fs::remove(to);
      if (fs::exists(from)) fs::copy_file(from, to);
    }
    clock_.set(seed_.now);  // every input sees the seed's time
    admin_ = std::make_unique<durable::ops::Admin>(db.string(), nullptr, &clock_);
    inputs_ = 0;
  }

  const Seed& seed_;
  durable::detail::ManualClockEnv clock_{durable::Clock::time_point{}};  // before the Admin on it
  std::unique_ptr<durable::ops::Admin> admin_;
  int inputs_ = 0;
};

// The server's own checks of a header (http_messages.hpp), for a server with `options`: the
// status it refuses the request with, or nullopt with the request filled in.
std::optional<int> refuse_header(const HttpOptions& options, const Message& header,
                                 HttpRequest& request) {
  request = HttpRequest{};
  std::optional<durable::ops::detail::Signature> signature;
  if (auto refusal = durable::ops::detail::refuse_header(options, header, request, signature)) {
    return refusal->status;
  }
  return std::nullopt;
}

// The checks of a server on every address with a token and a signing secret, for what they do
// with any header and, for a signed request, its body; and of the token itself, as the server
// checks HttpOptions::token.
void check_remote(const Message& message) {
  static const HttpOptions remote{
      .address = "0.0.0.0", .token = "fuzz-token", .signing_secret = std::string(32, 's')};
  static durable::ops::detail::ReplayGuard guard(1000);
  namespace checks = durable::ops::detail;
  HttpRequest request;
  std::optional<checks::Signature> signature;
  const auto refusal = checks::refuse_header(remote, message, request, signature);
  if (signature) {
    if (refusal) fail("a refused header left a signature to check", request, *refusal);
    if (!checks::refuse_signed(remote, guard, *signature, message)) {
      fail("a signature made without the secret was accepted", request, {});
    }
  }
  const std::string_view authorization = text_of(message[http::field::authorization]);
  (void)checks::is_loopback_name(text_of(message[http::field::host]));
  if (authorization.starts_with("Bearer ")) {
    (void)checks::invalid_token(authorization.substr(7));
  }
  if (refusal && refusal->status == 401 && authorization == "Bearer fuzz-token") {
    fail("the right token was refused", request, {});
  }
}

void replace_stand_ins(const Seed& seed, std::string& path) {
  for (const auto& [stand_in, id] : seed.stand_ins) {
    for (auto at = path.find(stand_in); at != std::string::npos; at = path.find(stand_in, at)) {
      path.replace(at, stand_in.size(), id);
    }
  }
}

void check_response(const HttpRequest& request, const HttpResponse& response) {
  if (durable::ops::detail::invalid_response(response)) {
    fail("an answer the server could not send", request, response);
  }
  if (response.status == 500 || response.status == 503) {
    fail("an answer 500 or 503", request, response);
  }
  if (response.content_type != "application/json") return;
  const json body = json::parse(response.body, nullptr, false);
  if (body.is_discarded()) fail("a JSON answer that is not JSON", request, response);
  if (response.status < 400) return;
  const auto error = body.is_object() ? body.find("error") : body.end();
  const auto is_text = [&](const char* name) {
    return error->contains(name) && error->at(name).is_string();
  };
  if (error == body.end() || !error->is_object() || !is_text("code") || !is_text("message")) {
    fail("an error not in json_error's shape", request, response);
  }
}

// One parsed request, as the server goes on with it. Returns whether it changed the database.
bool serve(const Seed& seed, Database& database, const Message& message) {
  static const HttpOptions loopback{.static_responses = durable::ops::static_pages()};
  static const bool trace = std::getenv("DURABLE_FUZZ_TRACE") != nullptr;
  check_remote(message);
  HttpRequest request;
  if (refuse_header(loopback, message, request)) return false;
  request.body = message.body();
  const bool read = request.method == "GET" || request.method == "HEAD";
  // The pages the server sends itself, without the handler.
  if (read && request.body.empty() && loopback.static_responses.contains(request.path)) {
    return false;
  }
  replace_stand_ins(seed, request.path);
  // Not caught: an exception is a finding (see the top), which libFuzzer reports with its stack.
  const HttpResponse response = durable::ops::api_handler(database.admin())(request);
  check_response(request, response);
  if (trace) {
    std::fprintf(stderr, "%s %s: %d\n", request.method.c_str(), request.path.c_str(),
                 response.status);
  }
  return !read && response.status < 300;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Seed seed;
  static Database database(seed);
  const HttpOptions limits;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  bool changed = false;
  for (int i = 0; i < kMaxRequestsPerInput && !rest.empty(); ++i) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(limits.max_header));
    parser.body_limit(limits.max_body);
    parser.eager(true);
    // The server reads until the message is done; need_more here would wait for bytes that
    // never come, until the idle timeout closes the connection.
    boost::beast::error_code error;
    std::size_t used = 0;
    while (!error && !parser.is_done() && used < rest.size()) {
      const std::size_t n = parser.put(boost::asio::buffer(rest.substr(used)), error);
      if (n == 0 && !error) break;
      used += n;
    }
    if (error || !parser.is_done()) break;
    rest.remove_prefix(used);
    changed = serve(seed, database, parser.get()) || changed;
    if (!parser.get().keep_alive()) break;
  }
  database.after_input(changed);
  return 0;
}
