// SPDX-License-Identifier: Apache-2.0
// PostgreSQL as a caller relies on it: what start() acknowledged survives a crash of the server
// at the default durability; processes opening a fresh database at once all succeed; a libpq
// keyword/value string and a standby named first are refused with the way to fix them.

#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <durable/client.hpp>
#include <durable/durable.hpp>
#include <mutex>
#include <set>
#include <thread>

#include "pg_connection.hpp"
#include "pg_support.hpp"
#include "support.hpp"

using namespace durable;
using namespace std::chrono_literals;

namespace {

// Starts runs from a Client and from a Runtime, as fast as they go, and keeps the ids each
// start() returned; a start that throws (the server is away) was not acknowledged.
class Starts {
 public:
  explicit Starts(const std::string& uri) : client_(uri), runtime_(test::quiet(uri)) {
    runtime_.add(Workflow("job", [](Step&, const json&) -> json { return 0; }));
    threads_.emplace_back([this] { loop([this] { return client_.start("job", {{"by", "client"}}); }); });
    threads_.emplace_back([this] { loop([this] { return runtime_.start("job", {{"by", "runtime"}}); }); });
  }
  ~Starts() { stop(); }
  void stop() {
    stop_ = true;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  std::size_t count() {
    std::lock_guard lock(mutex_);
    return acknowledged_.size();
  }
  std::vector<std::string> acknowledged() {
    std::lock_guard lock(mutex_);
    return acknowledged_;
  }
  std::size_t failed() const { return failed_.load(); }

 private:
  template <class Start>
  void loop(Start start) {
    while (!stop_) {
      try {
        std::string id = start();
        std::lock_guard lock(mutex_);
        acknowledged_.push_back(std::move(id));
      } catch (const Error&) {
        ++failed_;
        std::this_thread::sleep_for(5ms);
      }
    }
  }

  Client client_;
  Runtime runtime_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> failed_{0};
  std::mutex mutex_;
  std::vector<std::string> acknowledged_;
  std::vector<std::thread> threads_;
};

}  // namespace

TEST_CASE("on PostgreSQL at the default durability, every start a Client or a Runtime "
          "acknowledged survives a kill -9 of a server backend and of the postmaster") {
  test::TempDir dir;
  test::OwnCluster cluster(dir.file("pg"), DURABLE_CRASH_PG_PORT);
  cluster.start();
  std::size_t crashed_starts = 0;
  std::vector<std::string> acknowledged;
  for (const std::string what : {"backend", "postmaster"}) {
    CAPTURE(what);
    Starts starts(cluster.uri());
    REQUIRE(test::eventually([&] { return starts.count() >= 300; }, 60s));
    const std::size_t failed_before = starts.failed();
    REQUIRE(cluster.crash(what));
    const std::size_t after_crash = starts.count();
    // The starters go on once they have connected again.
    REQUIRE(test::eventually([&] { return starts.count() >= after_crash + 100; }, 60s));
    starts.stop();
    crashed_starts += starts.failed() - failed_before;
    for (std::string& id : starts.acknowledged()) acknowledged.push_back(std::move(id));
  }
  MESSAGE(acknowledged.size() << " starts acknowledged, " << crashed_starts
                              << " refused while the server was away");
  Client reader(cluster.uri());
  std::size_t missing = 0;
  for (const std::string& id : acknowledged) {
    try {
      reader.get(id);
    } catch (const NotFound&) {
      ++missing;
    }
  }
  CHECK(missing == 0);
}

TEST_CASE("on PostgreSQL, processes that open a fresh database at the same moment all succeed, "
          "and the schema is made once") {
  // As an operator's script would: `durable start` three times at once on each of ten fresh
  // databases, which make the schema as they open it.
  constexpr int kDatabases = 10;
  constexpr int kOpeners = 3;
  test::TempDir dir;
  std::vector<std::string> uris;
  std::string script = "pids=''\n";
  for (int i = 0; i < kDatabases; ++i) {
    uris.push_back(test::fresh_database());
    for (int j = 0; j < kOpeners; ++j) {
      script += std::string(DURABLE_CLI) + " --db '" + uris.back() + "' start job >>'" +
                dir.file("out") + "' 2>&1 & pids=\"$pids $!\"\n";
    }
  }
  script += "failed=0\nfor p in $pids; do wait $p || failed=$((failed + 1)); done\necho $failed\n";
  std::ofstream(dir.file("open.sh")) << script;
  const auto [code, out] = test::run_shell("bash '" + dir.file("open.sh") + "'");
  std::ifstream printed(dir.file("out"));
  const std::string errors((std::istreambuf_iterator<char>(printed)), {});
  INFO(errors);
  CHECK(code == 0);
  CHECK(out == "0\n");
  for (const std::string& uri : uris) {
    Client client(uri);
    CHECK(client.list({.limit = 100}).size() == kOpeners);
  }
}

TEST_CASE("a libpq keyword/value string is refused with the URI that says the same, and no "
          "file is made") {
  test::TempDir dir;
  const std::string cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  struct Back {
    std::string to;
    ~Back() { std::filesystem::current_path(to); }
  } back{cwd};
  const auto refused = [](const std::string& database) -> std::string {
    try {
      Runtime runtime(test::quiet(database));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  std::string message = refused("host=db1 port=5433 dbname=app user=x sslmode=require");
  INFO(message);
  CHECK(test::has(message, "keyword/value"));
  CHECK(test::has(message, "postgresql://x@db1:5433/app?sslmode=require"));
  message = refused("dbname=app password='s3 cret' user=x");
  CHECK(test::has(message, "postgresql://x:PASSWORD@/app"));
  CHECK_FALSE(test::has(message, "s3 cret"));
  CHECK_THROWS_WITH_AS(Client("host=db1 dbname=app"), doctest::Contains("postgresql://db1/app"),
                       Error);
  CHECK(std::filesystem::is_empty(dir.path()));  // no SQLite file of that name
}

TEST_CASE("on PostgreSQL, a multi-host URI whose first host is a standby is refused naming the "
          "standby and target_session_attrs, and works with it") {
  test::TempDir dir;
  test::OwnCluster primary(dir.file("primary"), DURABLE_PRIMARY_PG_PORT);
  primary.start();
  test::OwnCluster standby(dir.file("standby"), DURABLE_STANDBY_PG_PORT);
  standby.start_standby_of(primary);
  const std::string hosts = "postgresql://postgres@127.0.0.1:" +
                            std::to_string(DURABLE_STANDBY_PG_PORT) + ",127.0.0.1:" +
                            std::to_string(DURABLE_PRIMARY_PG_PORT) + "/postgres";
  try {
    Runtime runtime(test::quiet(hosts));
    FAIL("a runtime opened a standby for writing");
  } catch (const Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(test::has(message, "127.0.0.1:" + std::to_string(DURABLE_STANDBY_PG_PORT)));
    CHECK(test::has(message, "standby"));
    CHECK(test::has(message, "target_session_attrs=read-write"));
  }
  Runtime runtime(test::quiet(hosts + "?target_session_attrs=read-write"));
  runtime.add(Workflow("w", [](Step& step, const json&) -> json {
    return step.run("one", [] { return 1; });
  }));
  const std::string id = runtime.start("w");
  runtime.run_until_idle();
  CHECK(runtime.get(id).output == 1);
  // The durable command's reading commands take the standby, once it has replayed the run.
  const std::string on_standby = std::string(DURABLE_CLI) + " --db 'postgresql://postgres@127.0.0.1:" +
                                 std::to_string(DURABLE_STANDBY_PG_PORT) + "/postgres' ";
  CHECK(test::eventually([&] { return test::has(test::shell(on_standby + "runs").second, id); },
                         10s, 50ms));
  const auto [code, out] = test::shell(on_standby + "start w");
  CHECK(code != 0);
  CHECK(test::has(out, "standby"));
}
