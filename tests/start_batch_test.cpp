// SPDX-License-Identifier: Apache-2.0
// Group commit for starts: starts made on several threads at once share a transaction.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "start_batch.hpp"
#include "stores.hpp"
#include "support.hpp"
#include "sync_counter.hpp"

using namespace durable;

namespace {

detail::NewRun run_named(const std::string& id) {
  detail::NewRun run;
  run.id = id;
  return run;
}

// Waits up to 10 s for `n` starts to queue behind the batch being committed.
bool queued(detail::StartBatch& batch, std::size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (batch.waiting() < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST_CASE("starts made while another commits share the next transaction") {
  constexpr std::size_t kLate = 5;
  std::vector<std::vector<std::string>> batches;  // written by the committing thread only
  std::atomic<bool> committing{false};
  detail::StartBatch* self = nullptr;
  detail::StartBatch batch([&](const std::vector<const detail::NewRun*>& runs) {
    std::vector<std::string> ids;
    for (const detail::NewRun* run : runs) ids.push_back(run->id);
    if (batches.empty()) {  // the first transaction lasts until every late start has queued
      committing = true;
      REQUIRE(queued(*self, kLate));
    }
    batches.push_back(ids);
    return ids;
  });
  self = &batch;
  std::thread first([&] { CHECK(batch.create(run_named("first")) == "first"); });
  while (!committing) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<std::thread> late;
  for (std::size_t i = 0; i < kLate; ++i) {
    late.emplace_back([&batch, i] {
      const std::string id = "late-" + std::to_string(i);
      CHECK(batch.create(run_named(id)) == id);
    });
  }
  first.join();
  for (std::thread& t : late) t.join();
  // One transaction for the first start, one for the five that came while it committed: not six.
  REQUIRE(batches.size() == 2);
  CHECK(batches[0] == std::vector<std::string>{"first"});
  CHECK(std::set<std::string>(batches[1].begin(), batches[1].end()).size() == kLate);
}

TEST_CASE("a start's failed transaction fails every start in it, and the next one commits") {
  constexpr std::size_t kLate = 3;
  std::atomic<int> transactions{0};
  std::atomic<bool> committing{false};
  detail::StartBatch* self = nullptr;
  detail::StartBatch batch([&](const std::vector<const detail::NewRun*>& runs) {
    const int n = ++transactions;
    if (n == 1) {
      committing = true;
      REQUIRE(queued(*self, kLate));
    }
    if (n == 2) throw Error("database 'x': the disk is full");
    std::vector<std::string> ids;
    for (const detail::NewRun* run : runs) ids.push_back(run->id);
    return ids;
  });
  self = &batch;
  std::thread first([&] { CHECK(batch.create(run_named("first")) == "first"); });
  while (!committing) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<int> failed{0};
  std::vector<std::thread> late;
  for (std::size_t i = 0; i < kLate; ++i) {
    late.emplace_back([&batch, &failed, i] {
      try {
        batch.create(run_named("late-" + std::to_string(i)));
      } catch (const Error& e) {
        if (std::string(e.what()).find("the disk is full") != std::string::npos) ++failed;
      }
    });
  }
  first.join();
  for (std::thread& t : late) t.join();
  CHECK(failed == static_cast<int>(kLate));  // each caller of the failed transaction is told
  CHECK(batch.create(run_named("after")) == "after");
  CHECK(transactions == 3);
}

TEST_CASE("a runtime's starts from 16 threads at once: each run written once, one per key "
          "(on each store)") {
  test::TempDir dir;
  std::optional<test::SyncCounter> counter;  // on SQLite: transactions counted at the VFS
  if (!test::on_postgres()) counter.emplace(dir.path().string());
  Runtime runtime({.database = test::database(dir, "starts.db"),
                   .durability = Durability::full,
                   .log_level = LogLevel::off});
  runtime.add(Workflow("w", [](Step&, const json& input) -> json { return input; }));
  constexpr int kThreads = 16;
  constexpr int kEach = 10;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::string> keyed(kThreads);
  const int transactions_before = counter ? counter->write_transactions() : 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        ids[static_cast<std::size_t>(t)].push_back(runtime.start("w", json{{"t", t}, {"i", i}}));
      }
      keyed[static_cast<std::size_t>(t)] = runtime.start("w", json{{"t", t}},
                                                         {.idempotency_key = "once"});
    });
  }
  for (std::thread& t : threads) t.join();
  if (counter) {
    // Fewer transactions than starts: starts that came while another committed shared one. (16
    // threads whose every start waits for a sync: without sharing this would be 176.)
    const int transactions = counter->write_transactions() - transactions_before;
    CAPTURE(transactions);
    CHECK(transactions < kThreads * (kEach + 1));
  }
  std::set<std::string> distinct;
  for (const auto& list : ids) distinct.insert(list.begin(), list.end());
  CHECK(distinct.size() == static_cast<std::size_t>(kThreads * kEach));
  CHECK(std::set<std::string>(keyed.begin(), keyed.end()).size() == 1);
  CHECK(distinct.count(keyed.front()) == 0);
  // Every start is in the file with its own input, and the key made one run.
  CHECK(runtime.list({.limit = 1000}).size() == static_cast<std::size_t>(kThreads * kEach + 1));
  for (int t = 0; t < kThreads; ++t) {
    const auto& list = ids[static_cast<std::size_t>(t)];
    for (int i = 0; i < kEach; ++i) {
      CHECK(runtime.get(list[static_cast<std::size_t>(i)]).input == json{{"t", t}, {"i", i}});
    }
  }
  runtime.run_until_idle();
  CHECK(runtime.list({.status = Status::completed, .limit = 1000}).size() ==
        static_cast<std::size_t>(kThreads * kEach + 1));
}
