// SPDX-License-Identifier: Apache-2.0
// The one writer: every write of a runtime's runs goes through one queue, and the writes that
// come while a transaction is in flight commit together in the next one.

#include "writer.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "store_support.hpp"
#include "stores.hpp"
#include "support.hpp"
#include "sync_counter.hpp"

using namespace durable;
using detail::Writer;

namespace {

// Waits up to 10 s for `n` requests to queue behind the group being committed.
bool queued(Writer& writer, std::size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (writer.waiting() < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A commit that names each start's run and writes every write, and keeps what each group held.
struct Recorder {
  std::vector<std::vector<std::string>> groups;  // what each transaction held, by run id
  void operator()(const std::vector<Writer::Request*>& group) {
    std::vector<std::string> ids;
    for (Writer::Request* r : group) {
      for (const detail::NewRun* run : r->starts) {
        ids.push_back(run->id);
        r->ids.push_back(run->id);
      }
      for (const detail::RunWrite* w : r->writes) {
        ids.push_back(w->run_id);
        r->written.push_back(detail::Written::yes);
      }
      if (r->alone) ids.push_back("alone");
    }
    groups.push_back(ids);
  }
};

// A store whose run r1 worker "A" holds (claimed at 1 ms: its lease until 101), and r1 as A's
// runtime keeps it.
struct HeldRun {
  test::TempDir dir;
  std::unique_ptr<detail::Store> store;
  detail::RunState r1;
  explicit HeldRun(const std::string& file)
      : store(detail::open_store(test::database(dir, file), Durability::normal, nullptr)) {
    store->create_run(test::new_run("r1"));
    REQUIRE(store->claim(test::claim_of_w("A", 1)).runs.size() == 1);
    r1.id = "r1";
  }
  // A new entry of r1 with the key `key` and its key as output.
  detail::EntriesWrite entry(const std::string& key) {
    detail::JournalEntry e;
    e.key = e.base = key;
    e.output = key;
    return detail::EntriesWrite{&r1, {detail::EntryWrite{e}}, {}};
  }
};

}  // namespace

TEST_CASE("starts and run writes made while a group commits share the next transaction") {
  constexpr std::size_t kLate = 6;
  Recorder recorder;
  std::atomic<bool> committing{false};
  Writer* self = nullptr;
  Writer writer([&](const std::vector<Writer::Request*>& group) {
    if (recorder.groups.empty()) {  // the first lasts until every late request has queued
      committing = true;
      REQUIRE(queued(*self, kLate));
    }
    recorder(group);
  });
  self = &writer;
  std::thread first([&] {
    const detail::NewRun run = test::new_run("first");
    Writer::Request request;
    request.starts = {&run};
    writer.write(request);
    CHECK(request.ids == std::vector<std::string>{"first"});
  });
  while (!committing) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<std::thread> late;
  for (std::size_t i = 0; i < kLate; ++i) {
    late.emplace_back([&writer, i] {
      const std::string id = "late-" + std::to_string(i);
      const detail::NewRun run = test::new_run(id);
      detail::RunWrite write;
      write.run_id = id;
      Writer::Request request;
      if (i % 2 == 0) {
        request.starts = {&run};
      } else {
        request.writes = {&write};
      }
      writer.write(request);
      if (i % 2 == 0) {
        CHECK(request.ids == std::vector<std::string>{id});
      } else {
        CHECK(request.written == std::vector<detail::Written>{detail::Written::yes});
      }
    });
  }
  first.join();
  for (std::thread& t : late) t.join();
  // One transaction for the first, one for the six that came while it committed: not seven.
  REQUIRE(recorder.groups.size() == 2);
  CHECK(recorder.groups[0] == std::vector<std::string>{"first"});
  CHECK(std::set<std::string>(recorder.groups[1].begin(), recorder.groups[1].end()).size() ==
        kLate);
}

TEST_CASE(
    "a write that must be alone runs by itself in its turn, between the groups before and "
    "after it") {
  Recorder recorder;
  std::atomic<bool> committing{false};
  Writer* self = nullptr;
  Writer writer([&](const std::vector<Writer::Request*>& group) {
    if (recorder.groups.empty()) {
      committing = true;
      REQUIRE(queued(*self, 5));
    }
    recorder(group);
  });
  self = &writer;
  std::thread first([&] {
    detail::RunWrite write;
    write.run_id = "first";
    Writer::Request request;
    request.writes = {&write};
    writer.write(request);
  });
  while (!committing) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Queued one after the other while the first commits: a, b, an alone write, c, another.
  std::vector<detail::RunWrite> writes(3);
  std::vector<Writer::Request> requests(5);
  writes[0].run_id = "a";
  writes[1].run_id = "b";
  writes[2].run_id = "c";
  requests[0].writes = {&writes[0]};
  requests[1].writes = {&writes[1]};
  requests[2].alone = [](detail::Store&) {};
  requests[3].writes = {&writes[2]};
  requests[4].alone = [](detail::Store&) {};
  std::vector<std::thread> late;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    REQUIRE(queued(writer, i));  // in this order
    late.emplace_back([&writer, &requests, i] { writer.write(requests[i]); });
  }
  first.join();
  for (std::thread& t : late) t.join();
  using Group = std::vector<std::string>;
  CHECK(recorder.groups == std::vector<Group>{{"first"}, {"a", "b"}, {"alone"}, {"c"}, {"alone"}});
}

TEST_CASE("an alone write returns what its store call returned, or throws what it threw") {
  HeldRun held("alone.db");
  const std::atomic<bool> halted{false};
  Writer writer([&](const std::vector<Writer::Request*>& group) {
    detail::commit_group(*held.store, {"A", 2, &halted}, group);
  });
  CHECK(writer.alone([](detail::Store& store) { return store.create_run(test::new_run("r2")); }) ==
        "r2");
  CHECK(writer.alone([](detail::Store& store) { return store.release("r1", "A", 3, ""); }));
  CHECK_THROWS_WITH_AS(writer.alone([](detail::Store&) -> int { throw Error("refused"); }),
                       "refused", Error);
  CHECK(held.store->get_run("r1", false)->status == Status::pending);  // released
}

TEST_CASE("a group's failed transaction fails every request in it, and the next one commits") {
  constexpr std::size_t kLate = 3;
  std::atomic<int> transactions{0};
  std::atomic<bool> committing{false};
  Recorder recorder;
  Writer* self = nullptr;
  Writer writer([&](const std::vector<Writer::Request*>& group) {
    const int n = ++transactions;
    if (n == 1) {
      committing = true;
      REQUIRE(queued(*self, kLate));
    }
    if (n == 2) throw Error("database 'x': the disk is full");
    recorder(group);
  });
  self = &writer;
  const auto start = [&writer](const std::string& id) {
    const detail::NewRun run = test::new_run(id);
    Writer::Request request;
    request.starts = {&run};
    writer.write(request);
    return request.ids.at(0);
  };
  std::thread first([&] { CHECK(start("first") == "first"); });
  while (!committing) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<int> failed{0};
  std::vector<std::thread> late;
  for (std::size_t i = 0; i < kLate; ++i) {
    late.emplace_back([&start, &failed, i] {
      try {
        start("late-" + std::to_string(i));
      } catch (const Error& e) {
        if (std::string(e.what()).find("the disk is full") != std::string::npos) ++failed;
      }
    });
  }
  first.join();
  for (std::thread& t : late) t.join();
  CHECK(failed == static_cast<int>(kLate));  // each caller of the failed transaction is told
  CHECK(start("after") == "after");
  CHECK(transactions == 3);
}

TEST_CASE(
    "one transaction starts a run, refuses a write of a run its writer does not hold, and "
    "places two entries of one run one after the other (on each store)") {
  HeldRun held("group.db");
  auto& store = held.store;
  detail::EntriesWrite a = held.entry("a");
  detail::EntriesWrite b = held.entry("b");
  const detail::NewRun r2 = test::new_run("r2");
  detail::RunWrite foreign;  // by a worker that does not hold r1
  foreign.run_id = "r1";
  foreign.owner = "B";
  foreign.status = Status::completed;
  foreign.output = "1";
  Writer::Request start, refused, first, second;
  start.starts = {&r2};
  refused.writes = {&foreign};
  first.entries = {&a};
  second.entries = {&b};
  const std::atomic<bool> halted{false};
  const std::size_t before = store->write_transactions();
  detail::commit_group(*store, {"A", 2, &halted}, {&start, &refused, &first, &second});
  CHECK(store->write_transactions() == before + 1);
  CHECK(start.ids == std::vector<std::string>{"r2"});
  CHECK(refused.written == std::vector<detail::Written>{detail::Written::refused});
  CHECK(first.written == std::vector<detail::Written>{detail::Written::yes});
  CHECK(second.written == std::vector<detail::Written>{detail::Written::yes});
  CHECK(held.r1.next_seq == 2);
  const auto journal = store->journal("r1");
  REQUIRE(journal);
  REQUIRE(journal->size() == 2);
  CHECK(journal->at(0).key == "a");
  CHECK(journal->at(1).key == "b");
  CHECK(store->get_run("r1", false)->status == Status::running);  // the refused write wrote nothing
  CHECK(store->get_run("r2", false)->status == Status::pending);
}

TEST_CASE(
    "a step body's stream values and progress and a worker's beat commit in a group, each "
    "fenced by its run's owner (on each store)") {
  HeldRun held("bodies.db");
  auto& store = held.store;
  const detail::StreamValue value{"r1", "A", "log", "1", 2};
  const detail::StreamValue foreign_value{"r1", "B", "log", "2", 2};
  const detail::StreamValue close{"r1", "A", "done", std::nullopt, 2};
  const detail::StreamValue after_close{"r1", "A", "done", "3", 2};
  const detail::ProgressWrite progress{"r1", "A", "s", 1, "{\"of\":10}", 2};
  const detail::ProgressWrite foreign_progress{"r1", "B", "t", 1, "{}", 2};
  const detail::Worker worker{"A", "box", 1, 1};
  detail::Beat beat;
  beat.worker = &worker;
  beat.owner = "A";
  beat.now_ms = 2;
  beat.lease_ms = 100;
  beat.held = {"r1"};
  beat.until_ms = 1'000;
  Writer::Request streams, saves, beats;
  streams.stream_values = {&value, &foreign_value, &close, &after_close};
  saves.progress = {&progress, &foreign_progress};
  beats.beats = {&beat};
  const std::atomic<bool> halted{false};
  detail::commit_group(*store, {"A", 2, &halted}, {&streams, &saves, &beats});
  using detail::StreamWrite;
  CHECK(streams.streamed == std::vector<StreamWrite>{StreamWrite::written, StreamWrite::not_owner,
                                                     StreamWrite::written, StreamWrite::closed});
  CHECK(saves.saved == std::vector<bool>{true, false});
  const detail::StreamRows log = store->read_stream("r1", "log", 0, 10);
  CHECK(log.length == 1);  // B's value was not written
  REQUIRE(store->progress("r1", "s"));
  CHECK(store->progress("r1", "s")->progress == json{{"of", 10}});
  CHECK_FALSE(store->progress("r1", "t"));
  // The beat moved A's lease to 1,000: at 150, past the lease of the claim, B takes nothing.
  CHECK(store->claim(test::claim_of_w("B", 150)).runs.empty());
  CHECK(store->claim(test::claim_of_w("B", 1'001)).runs.size() == 1);
}

TEST_CASE("a halted writer writes nothing more of its runs, and still starts a run") {
  HeldRun held("halted.db");
  auto& store = held.store;
  detail::EntriesWrite a = held.entry("a");
  const detail::NewRun r2 = test::new_run("r2");
  const detail::StreamValue value{"r1", "A", "log", "1", 2};
  const detail::ProgressWrite progress{"r1", "A", "s", 1, "{}", 2};
  Writer::Request start, write, body;
  start.starts = {&r2};
  write.entries = {&a};
  body.stream_values = {&value};
  body.progress = {&progress};
  const std::atomic<bool> halted{true};  // the crash sweep's crash: as if the process died
  detail::commit_group(*store, {"A", 2, &halted}, {&start, &write, &body});
  CHECK(write.written == std::vector<detail::Written>{detail::Written::refused});
  CHECK(held.r1.next_seq == 0);
  CHECK(store->journal("r1")->empty());
  CHECK(body.streamed == std::vector<detail::StreamWrite>{detail::StreamWrite::not_owner});
  CHECK(body.saved == std::vector<bool>{false});
  CHECK(store->read_stream("r1", "log", 0, 10).length == 0);
  CHECK_FALSE(store->progress("r1", "s"));
  CHECK(start.ids == std::vector<std::string>{"r2"});
}

TEST_CASE(
    "a runtime's starts from 16 threads at once: each run written once, one per key "
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
      keyed[static_cast<std::size_t>(t)] =
          runtime.start("w", json{{"t", t}}, {.idempotency_key = "once"});
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

TEST_CASE("stream values that parallel step bodies write at the same moment share commits") {
  test::TempDir dir;
  test::SyncCounter counter(dir.path().string());  // transactions counted at SQLite's VFS
  counter.set_sync_delay(std::chrono::milliseconds(1));  // a disk's sync, even under eatmydata
  static constexpr int kBodies = 8, kValues = 25;
  Runtime runtime({.database = (dir.path() / "fan.db").string(),
                   .threads = kBodies,
                   .durability = Durability::full,
                   .log_level = LogLevel::off});
  runtime.add(Workflow("fan", [](Step& step, const json&) -> json {
    std::vector<int> bodies(kBodies);
    for (int b = 0; b < kBodies; ++b) bodies[static_cast<std::size_t>(b)] = b;
    step.map("write", bodies, [&step](int b) {
      for (int v = 0; v < kValues; ++v) step.write_stream("out", b * kValues + v);
    });
    return kBodies;
  }));
  const std::string id = runtime.start("fan");
  const int before = counter.write_transactions();
  runtime.run_until_idle();
  CHECK(runtime.get(id).status == Status::completed);
  std::set<int> values;
  for (const json& v : runtime.read_stream(id, "out", 0).values) values.insert(v.get<int>());
  CHECK(values.size() == static_cast<std::size_t>(kBodies * kValues));  // each once
  // One transaction a value, as each body's value waits for its commit, would be 200 and more:
  // the values that came while another commit was in flight went together in the next one.
  const int transactions = counter.write_transactions() - before;
  CAPTURE(transactions);
  CHECK(transactions < kBodies * kValues);
}
