// SPDX-License-Identifier: Apache-2.0
// What the examples in README.md and docs/ take for granted: durable, the test kit, doctest's
// CHECK, and the application around them, declared only (the examples are compiled, not run).
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <durable/durable.hpp>
#include <durable/testing.hpp>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

// The objects an example uses without making them.
extern durable::Runtime runtime;
extern durable::Step& step;
extern durable::testing::TestRuntime kit;
extern const durable::json input, user;  // order: a parameter of each example (captured by value)
extern const std::string id, run_id, other_run_id, domain, invoice_id;
extern const durable::Clock::time_point renewal_time;
struct Dns {
  void verify(const std::string& domain, const std::string& run_id);
};
extern Dns dns;
struct Logger {
  void write(std::string_view line);
};
extern Logger my_logger;

// The application's own functions, which the examples' steps call.
void log(const char* line);
int http_status();
durable::json charge_card(const durable::json& order);
durable::json charge(const durable::json& order);
durable::json ship(const durable::json& order);
durable::json book_courier(const durable::json& order);
durable::json send_by_post(const durable::json& order);
void release(const durable::json& order);
void email(const durable::json& order, const durable::json& receipt);
void report(const std::exception& error);
void track(const durable::json& user);
void send_welcome(const std::string& email);
void send_welcome(const durable::json& user, const durable::json& billing = {});
durable::json create_account(const durable::json& user);
durable::json open_billing(const durable::json& account);
durable::json fetch_profile(const durable::json& user);
durable::json fetch_orders(const durable::json& user);
durable::json label(const durable::json& profile, const durable::json& orders);
std::string download(const std::string& url);
void audit(const durable::json& order);
std::string upload(const durable::json& input);
std::vector<int> regions_of(const std::string& image);
double predict(const std::string& image, int region);
double total(const std::vector<double>& scores);
durable::json render(durable::Step& step, const durable::json& input);
std::string render_report(const durable::json& rows);
durable::json collect(const durable::json& input);
std::vector<std::string> model_tokens(const durable::json& input);
durable::Workflow signup_workflow();
durable::Workflow digest_workflow();
durable::Workflow order_workflow();
std::string poll_inbox();
void reindex_shard(int shard);
