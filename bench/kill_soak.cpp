// SPDX-License-Identifier: Apache-2.0
// The kill soak (issue 17): two serving workers on one database, one of them killed with SIGKILL
// at a random moment and replaced at once, N times in all, while runs of a workload with steps,
// a sleep, an event and a child workflow are started across the soak. Then two workers finish
// what is left, and the program counts, from the database and from the log each body writes as
// it begins:
//   - runs lost: started and not completed;
//   - runs whose journal is not exactly their steps (a key missing, twice, or one never called);
//   - journal entries changed: a completed entry whose output differs from what an earlier look
//     saw, or that no body of the log returned;
//   - bodies run again, and of those, any not explained by a kill: a body that runs again must
//     follow the kill of the process that ran it before (the driver logs each kill), never in
//     the same process twice, and never after the workflow saw its result (the workflow logs
//     that, once the step returned it);
//   - workers that died by themselves instead of by the driver's signals.
// Exit 0 when all but the bodies run again are 0.
//
//   durable_kill_soak [--kills N] [--runs R] [--db PATH_OR_URI]   (1000 kills, 500 runs)
//   durable_kill_soak --worker DB LOG                             (what the driver spawns)

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <durable/durable.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using durable::json;
using durable::Step;
using namespace std::chrono_literals;

// Appends one line to the log with one write(2) to a file opened O_APPEND, so that the lines of
// processes killed at any moment never interleave, and their order is the order of events.
void append(const std::string& log, const std::string& line) {
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  const bool written =
      fd >= 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  if (fd >= 0) ::close(fd);
  if (!written) throw std::runtime_error("cannot write the log " + log);
}

// The log's lines: "RUN KEY PID NONCE" as a body begins; "RUN KEY seen" once the workflow got
// the step's result; "kill PID" after the driver reaped a process it killed.
json body(const std::string& log, Step& step, const std::string& key,
          std::chrono::milliseconds takes) {
  static thread_local std::mt19937_64 random(std::random_device{}());
  const std::string nonce = std::to_string(random());
  append(log, std::string(step.run_id()) + " " + key + " " + std::to_string(::getpid()) + " " +
                  nonce + "\n");
  std::this_thread::sleep_for(takes);
  return {{"pid", ::getpid()}, {"nonce", nonce}};
}

// A step of the workload: its body, then the line saying the workflow has its result.
void logged_step(const std::string& log, Step& step, const std::string& key) {
  step.run(key, [&] { return body(log, step, key, 10ms); });
  append(log, std::string(step.run_id()) + " " + key + " seen\n");
}

void add_workflows(durable::Runtime& runtime, const std::string& log) {
  runtime.add(durable::Workflow("soak", [log](Step& step, const json& input) -> json {
    const int n = input.at("n").get<int>();
    logged_step(log, step, "a");
    step.sleep("nap", std::chrono::milliseconds(100 + n % 100));
    durable::WaitOptions go;
    go.match = {{"n", n}};
    step.wait_for_event("go", "go", go);  // no timeout: an event lost is a run lost
    step.invoke("child", "soak-child", {{"n", n}});
    logged_step(log, step, "b");
    return json{{"n", n}};
  }));
  runtime.add(durable::Workflow("soak-child", [log](Step& step, const json&) -> json {
    logged_step(log, step, "c1");
    logged_step(log, step, "c2");
    return true;
  }));
}

int serve_worker(const std::string& db, const std::string& log) {
  durable::RuntimeOptions options;
  options.database = db;
  options.poll_interval = 20ms;
  options.threads = 2;
  options.log_level = durable::LogLevel::error;
  // A run met by five kills in a row would be quarantined as a poison run; here the kills are
  // the driver's, not the run's.
  options.quarantine_after = 0;
  durable::Runtime runtime(options);
  add_workflows(runtime, log);
  runtime.serve();  // until SIGTERM
  return 0;
}

pid_t spawn(const std::string& self, const std::string& db, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::execl(self.c_str(), self.c_str(), "--worker", db.c_str(), log.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Waits for the process; its exit status, or -signal if a signal ended it.
int reap(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1000;
  return WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
}

struct Execution {
  std::string pid, nonce;
};

// What the log says of one step: its bodies' runs in order, and how many were not explained by
// a kill.
struct StepLog {
  std::vector<Execution> runs;
  int unexplained = 0;
  bool seen = false;                 // the workflow got the step's result
  std::set<std::string> unkilled{};  // pids of its runs not followed by their kill yet
};

std::map<std::pair<std::string, std::string>, StepLog> read_log(const std::string& log) {
  std::map<std::pair<std::string, std::string>, StepLog> steps;
  std::map<std::string, std::vector<StepLog*>> by_pid;  // the steps each process began
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string first, second, third, fourth;
    words >> first >> second >> third >> fourth;
    if (first == "kill") {
      for (StepLog* s : by_pid[second]) s->unkilled.erase(second);
      continue;
    }
    StepLog& s = steps[{first, second}];
    if (third == "seen") {
      s.seen = true;
      continue;
    }
    // Another run of a body is explained only by the kill of each process that ran it before,
    // and only while the workflow has not seen its result.
    if (!s.runs.empty() && (!s.unkilled.empty() || s.seen)) ++s.unexplained;
    s.runs.push_back({third, fourth});
    s.unkilled.insert(third);
    by_pid[third].push_back(&s);
  }
  return steps;
}

// Every run of the workload, parents and children, by id.
std::vector<durable::RunInfo> all_runs(durable::Runtime& runtime) {
  durable::RunFilter all;
  all.limit = 1'000'000;
  return runtime.list(all);
}

// The completed entries of every run: "RUN/KEY" -> output.
std::map<std::string, std::string> completed_entries(durable::Runtime& runtime) {
  std::map<std::string, std::string> out;
  for (const durable::RunInfo& run : all_runs(runtime)) {
    for (const durable::StepInfo& s : runtime.steps(run.id)) {
      if (s.status == "completed") out[run.id + "/" + s.id] = s.output.dump();
    }
  }
  return out;
}

struct Options {
  int kills = 1000;
  int runs = 500;
  std::string db;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) throw std::runtime_error("'" + arg + "' needs a value");
    const std::string value = argv[++i];
    if (arg == "--kills") {
      o.kills = std::stoi(value);
    } else if (arg == "--runs") {
      o.runs = std::stoi(value);
    } else if (arg == "--db") {
      o.db = value;
    } else {
      throw std::runtime_error("unknown argument '" + arg +
                               "'; usage: durable_kill_soak [--kills N] [--runs R] [--db DB]");
    }
  }
  if (o.kills < 1 || o.runs < 1) throw std::runtime_error("--kills and --runs must be positive");
  return o;
}

// The two serving workers, and the payments thread; whatever ends the soak, the workers are
// killed and reaped and the thread joined, so no worker outlives the driver.
class Workers {
 public:
  Workers(std::string self, std::string db, std::string log)
      : self_(std::move(self)), db_(std::move(db)), log_(std::move(log)) {
    pids_[0] = spawn(self_, db_, log_);
    pids_[1] = spawn(self_, db_, log_);
  }
  ~Workers() {
    for (pid_t& pid : pids_) {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        reap(pid);
      }
    }
  }
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  // Kills worker `i`, logs the kill, starts another.
  void replace(int i) {
    ::kill(pids_[i], SIGKILL);
    check(pids_[i], reap(pids_[i]), -SIGKILL);
    append(log_, "kill " + std::to_string(pids_[i]) + "\n");
    pids_[i] = spawn(self_, db_, log_);
  }

  // Stops both with SIGTERM. One started a moment ago may take it before serve() handles it.
  void stop() {
    for (pid_t& pid : pids_) {
      ::kill(pid, SIGTERM);
      const int status = reap(pid);
      check(std::exchange(pid, -1), status == -SIGTERM ? 0 : status, 0);
    }
  }

  // The workers that died otherwise than by the driver's signals, and how.
  const std::vector<std::string>& died_alone() const { return died_alone_; }

 private:
  void check(pid_t pid, int status, int expected) {
    if (status == expected) return;
    died_alone_.push_back("worker " + std::to_string(pid) +
                          (status < 0 ? " ended by signal " + std::to_string(-status)
                                      : " exited " + std::to_string(status)));
  }

  std::string self_, db_, log_;
  pid_t pids_[2] = {-1, -1};
  std::vector<std::string> died_alone_;
};

// The driver's payments: every run waiting for its "go" gets one, again until it has gone on.
class Payments {
 public:
  explicit Payments(const durable::RuntimeOptions& options, const std::string& log)
      : thread_([this, options, log] { send(options, log); }) {}
  ~Payments() {
    sending_ = false;
    thread_.join();
  }
  Payments(const Payments&) = delete;
  Payments& operator=(const Payments&) = delete;
  std::string error() const { return sending_ ? "" : error_; }

 private:
  void send(const durable::RuntimeOptions& options, const std::string& log) {
    try {
      durable::Runtime own(options);
      add_workflows(own, log);
      durable::RunFilter waiting;
      waiting.status = durable::Status::waiting;
      waiting.workflow = "soak";
      waiting.limit = 1'000'000;
      while (sending_) {
        for (const durable::RunInfo& run : own.list(waiting)) {
          own.send_event("go", {{"n", run.input.at("n")}});
        }
        std::this_thread::sleep_for(50ms);
      }
    } catch (const std::exception& e) {
      error_ = e.what();
      sending_ = false;
    }
  }
  std::atomic<bool> sending_{true};
  std::string error_;
  std::thread thread_;
};

// Whether a run's journal holds exactly the steps its workflow calls, each once.
bool journal_exact(const durable::RunInfo& run, const std::vector<durable::StepInfo>& steps) {
  static const std::multiset<std::string> parent = {"a", "nap", "go", "child", "b"};
  static const std::multiset<std::string> child = {"c1", "c2"};
  std::multiset<std::string> keys;
  for (const durable::StepInfo& s : steps) keys.insert(s.id);
  return keys == (run.workflow == "soak" ? parent : child);
}

// What the soak saw, for its report.
struct Tally {
  std::size_t started = 0, completed = 0;
  int during_work = 0;  // kills while runs were unfinished
  std::vector<std::string> died_alone;
  std::string payments_error;
  int looks = 0, changed = 0;  // looks at the journals while it ran; entries that changed
  int entries = 0, inexact = 0;
  int bodies = 0, again = 0, unexplained = 0;
  bool ok() const {
    return started == completed && inexact == 0 && changed == 0 && unexplained == 0 &&
           died_alone.empty() && payments_error.empty();
  }
};

// The journals looked at while the soak runs: an entry seen twice must not have changed.
class Looks {
 public:
  explicit Looks(durable::Runtime& client) : client_(client) {}
  void look(Tally& tally) {
    ++tally.looks;
    for (const auto& [key, output] : completed_entries(client_)) {
      const auto [it, fresh] = seen_.emplace(key, output);
      if (!fresh && it->second != output) ++tally.changed;
    }
  }

 private:
  durable::Runtime& client_;
  std::map<std::string, std::string> seen_;  // the first output a look saw of each entry
};

// Starts the runs across the kills, so that work is under way at each, killing one of two
// serving workers with SIGKILL and replacing it each time; then lets the two alive finish.
void kill_and_finish(const Options& o, durable::Runtime& client,
                     const durable::RuntimeOptions& client_options, const std::string& db,
                     const std::string& log, Looks& looks, Tally& tally) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> lifetime_ms(50, 400);
  std::vector<std::string> ids;
  Workers workers(self, db, log);
  Payments payments(client_options, log);
  durable::RunFilter done;
  done.status = durable::Status::completed;
  done.workflow = "soak";
  done.limit = 1'000'000;
  for (int k = 0; k < o.kills; ++k) {
    const int due = static_cast<int>((k + 1) * std::int64_t{o.runs} / o.kills);
    while (static_cast<int>(ids.size()) < due) {
      ids.push_back(client.start("soak", {{"n", static_cast<int>(ids.size())}}));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(lifetime_ms(random)));
    tally.during_work += client.list(done).size() < static_cast<std::size_t>(o.runs);
    workers.replace(k % 2);
    if (k % 25 == 24) looks.look(tally);
  }
  const auto deadline = std::chrono::steady_clock::now() + 300s;
  while (std::chrono::steady_clock::now() < deadline) {
    tally.completed = 0;
    for (const std::string& id : ids) {
      tally.completed += client.get(id).status == durable::Status::completed;
    }
    if (tally.completed == ids.size()) break;
    std::this_thread::sleep_for(100ms);
  }
  workers.stop();
  tally.started = ids.size();
  tally.died_alone = workers.died_alone();
  tally.payments_error = payments.error();
}

// Journals not exactly their steps, entries that changed or that no body returned, and bodies
// run again, each explained by a kill or not.
void audit(durable::Runtime& client, const std::string& log, Tally& tally) {
  const auto steps = read_log(log);
  for (const durable::RunInfo& run : all_runs(client)) {
    const std::vector<durable::StepInfo> journal = client.steps(run.id);
    tally.entries += static_cast<int>(journal.size());
    tally.inexact += !journal_exact(run, journal);
    for (const durable::StepInfo& s : journal) {
      if (s.status != "completed" || !s.output.is_object() || !s.output.contains("nonce")) {
        continue;
      }
      const std::string nonce = s.output.at("nonce").get<std::string>();
      const auto found = steps.find({run.id, s.id});
      bool from_a_body = false;
      if (found != steps.end()) {
        for (const Execution& e : found->second.runs) from_a_body |= e.nonce == nonce;
      }
      tally.changed += !from_a_body;
    }
  }
  for (const auto& [key, s] : steps) {
    if (s.runs.empty()) continue;
    ++tally.bodies;
    tally.again += static_cast<int>(s.runs.size()) - 1;
    tally.unexplained += s.unexplained;
  }
}

void report(const Options& o, const std::string& db, const Tally& t,
            std::chrono::seconds took) {
  std::cout << "kill soak on " << (db.rfind("postgres", 0) == 0 ? "PostgreSQL" : "SQLite")
            << ": 2 serving workers, one killed with SIGKILL and replaced, " << o.kills
            << " times\n"
            << "  kills              " << o.kills << " (" << t.during_work
            << " while runs were unfinished); workers that died by themselves: "
            << t.died_alone.size() << "\n"
            << "  runs               " << t.started << " started, " << t.completed
            << " completed, " << t.started - t.completed << " lost\n"
            << "  journal entries    " << t.entries << " in all; runs whose journal is not "
            << "exactly their steps: " << t.inexact << "; entries changed: " << t.changed << " ("
            << t.looks << " looks while it ran)\n"
            << "  bodies             " << t.bodies << " steps, " << t.again << " run again, "
            << t.unexplained << " not explained by a kill\n"
            << "  took               " << took.count() << " s\n";
  if (!t.payments_error.empty()) std::cout << "  payments failed: " << t.payments_error << "\n";
  for (const std::string& death : t.died_alone) std::cout << "  " << death << "\n";
}

int soak(const Options& o) {
  std::string pattern =
      (std::filesystem::temp_directory_path() / "durable-kill-soak-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  const std::filesystem::path dir = pattern;
  const std::string db = o.db.empty() ? (dir / "soak.db").string() : o.db;
  const std::string log = (dir / "log").string();
  const auto began = std::chrono::steady_clock::now();

  durable::RuntimeOptions client_options;
  client_options.database = db;
  client_options.log_level = durable::LogLevel::error;
  durable::Runtime client(client_options);  // starts runs and reads them; executes nothing
  add_workflows(client, log);
  durable::RunFilter everything;
  everything.limit = 1;
  if (!client.list(everything).empty()) {
    throw std::runtime_error("database '" + db + "' already holds runs; give it an empty one");
  }
  Tally tally;
  Looks looks(client);
  kill_and_finish(o, client, client_options, db, log, looks, tally);
  looks.look(tally);
  audit(client, log, tally);
  report(o, db, tally,
         std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                          began));
  if (tally.ok()) {
    std::filesystem::remove_all(dir);
    std::cout << "ok\n";
  } else {
    std::cout << "FAILED; the database and the log are kept in " << dir.string() << "\n";
  }
  return tally.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 4 && std::strcmp(argv[1], "--worker") == 0) return serve_worker(argv[2], argv[3]);
    return soak(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "durable_kill_soak: " << e.what() << "\n";
    return 2;
  }
}
