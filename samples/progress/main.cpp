// SPDX-License-Identifier: Apache-2.0
// A report job that shows its progress in a browser while it works. The workflow `report`
// publishes its phase between steps (Step::publish), and its long step, `render`, writes its
// progress to the stream "progress" from inside the step body (Step::write_stream), a value
// each tick, readable at once. The program serves the HTTP API and a page that starts a report,
// follows the stream with an EventSource and polls the phase (page.hpp).
//
//   progress [--db FILE] [--port N] [--tick-ms N]   serve; open http://127.0.0.1:N/ (8090)
//   progress --once [--db FILE]                       the test: one report, read as the page does
//
// --once serves on free ports, starts a report through the page's server, reads its stream as
// Server-Sent Events through it until the close, and checks that the run completed, that the
// stream holds the 11 values from 0 to 100 percent and that the phase is the last one, "done".
// Exit 0 when all holds, 1 otherwise, 2 on a bad command line. --db defaults to a new file in
// the temporary directory (removed at the end).

#include <charconv>
#include <chrono>
#include <durable/durable.hpp>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "http_client.hpp"
#include "page.hpp"
#include "page_server.hpp"

namespace progress {

using durable::json;
using namespace std::chrono_literals;

constexpr int kPercentStep = 10;  // 0, 10, ..., 100: 11 values

durable::Workflow report_workflow(std::chrono::milliseconds tick) {
  return durable::Workflow("report", [tick](durable::Step& step, const json& input) -> json {
    const int rows = input.value("rows", 1000);
    step.publish("phase", "collecting");
    const int collected = step.run("collect", [&] { return rows; });
    step.publish("phase", "rendering");
    // A retried attempt writes its values again: a reader sees the percentages restart.
    const std::string file = step.run("render", [&] {
      for (int percent = 0; percent <= 100; percent += kPercentStep) {
        if (percent > 0) std::this_thread::sleep_for(tick);  // the rendering being done
        step.write_stream("progress", {{"percent", percent}, {"rows", collected * percent / 100}});
      }
      return std::string("report-") + std::to_string(collected) + ".pdf";
    });
    step.close_stream("progress");
    step.publish("phase", "uploading");
    const std::string url = step.run("upload", [&] { return "https://files.example/" + file; });
    step.publish("phase", "done");
    return {{"url", url}, {"rows", collected}};
  });
}

// serve() on a thread of its own, stopped and joined however the caller leaves.
class Server {
 public:
  explicit Server(durable::Runtime& runtime)
      : runtime_(runtime), thread_([this] {
          try {
            runtime_.serve();
          } catch (const std::exception& e) {
            std::lock_guard lock(mutex_);
            error_ = e.what();
          }
        }) {}
  ~Server() { stop(); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The port of the API once it listens; 0 when serve() failed or took longer than 10 s.
  unsigned short api_port() {
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(10ms)) {
      const std::string url = runtime_.http_url();  // "http://127.0.0.1:PORT"
      if (url.empty()) continue;
      unsigned short port = 0;
      const std::string_view text = std::string_view(url).substr(url.rfind(':') + 1);
      std::from_chars(text.data(), text.data() + text.size(), port);
      return port;
    }
    return 0;
  }
  // Waits until serve() returns (at SIGINT or SIGTERM); returns its error, if it threw.
  std::string wait() {
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mutex_);
    return error_;
  }
  // Stops serving and returns serve()'s error, if it threw.
  std::string stop() {
    runtime_.stop();
    if (thread_.joinable()) thread_.join();
    std::lock_guard lock(mutex_);
    return error_;
  }

 private:
  durable::Runtime& runtime_;
  std::mutex mutex_;
  std::string error_;
  std::thread thread_;
};

bool fail(const std::string& what) {
  std::cerr << "progress: " << what << "\n";
  return false;
}

// --once: what the page does, through the page's server, then what the run left.
bool check_once(durable::Runtime& runtime, unsigned short port) {
  const HttpAnswer page = http_request(port, "GET", "/");
  if (page.status != 200 || page.body.find("new EventSource(") == std::string::npos) {
    return fail("GET / answered " + std::to_string(page.status) + ", not the page");
  }
  const HttpAnswer started =
      http_request(port, "POST", "/v1/runs", R"({"workflow":"report","input":{"rows":1200}})");
  if (started.status != 201) return fail("POST /v1/runs answered " + started.body);
  const std::string id = json::parse(started.body).at("id").get<std::string>();
  std::cout << "report " << id << " started; its stream, as the page reads it:\n";
  // The response ends at the close: every event of the stream is in it.
  const HttpAnswer events = http_request(port, "GET", "/v1/runs/" + id + "/streams/progress");
  std::cout << events.body;
  if (events.status != 200) return fail("the stream answered " + std::to_string(events.status));
  const auto ended = std::chrono::steady_clock::now() + 30s;
  while (runtime.get(id).status != durable::Status::completed) {
    if (std::chrono::steady_clock::now() > ended) return fail("the report did not complete");
    std::this_thread::sleep_for(10ms);
  }
  const durable::StreamRead stream = runtime.read_stream(id, "progress");
  const std::optional<json> phase = runtime.published(id, "phase");
  std::cout << "stream: " << stream.values.size() << " values, "
            << (stream.closed ? "closed" : "open") << "; phase: " << phase.value_or("none")
            << "; output: " << runtime.get(id).output.dump() << "\n";
  if (stream.values.size() != 100 / kPercentStep + 1 || !stream.closed ||
      stream.values.back().at("percent") != 100 || stream.values.front().at("percent") != 0) {
    return fail("the stream does not hold the 11 values from 0 to 100 percent, closed");
  }
  if (events.body.find("id: 10\ndata: {\"percent\":100,") == std::string::npos) {
    return fail("the Server-Sent Events did not carry the last value");
  }
  if (phase != json("done")) return fail("the phase is not \"done\"");
  return true;
}

int run(const std::string& database, bool once, unsigned short port,
        std::chrono::milliseconds tick) {
  durable::RuntimeOptions options;
  options.database = database;
  options.log_level = durable::LogLevel::warn;
  options.http.address = "127.0.0.1";
  options.http.port = 0;  // the page's server relays to it, wherever it is
  durable::Runtime runtime(options);
  runtime.add(report_workflow(tick));
  Server server(runtime);
  const unsigned short api_port = server.api_port();
  if (api_port == 0) {
    fail("the API did not start: " + server.stop());
    return 1;
  }
  PageServer pages(std::string(kPage), once ? 0 : port, api_port);
  if (once) {
    const bool ok = check_once(runtime, pages.port());
    const std::string error = server.stop();
    if (!error.empty()) fail("serve() failed: " + error);
    return ok && error.empty() ? 0 : 1;
  }
  std::cout << "open http://127.0.0.1:" << pages.port() << "/ and start a report (the API and "
            << "dashboard: " << runtime.http_url() << "/); Ctrl-C stops\n";
  const std::string error = server.wait();
  if (!error.empty()) fail("serve() failed: " + error);
  return error.empty() ? 0 : 1;
}

}  // namespace progress

int main(int argc, char** argv) {
  std::string database;
  bool once = false;
  unsigned long port = 8090, tick_ms = 400;
  const auto usage = [](const std::string& what) {
    std::cerr << "progress: " << what
              << "\nusage: progress [--db FILE] [--port N] [--tick-ms N] | progress --once "
                 "[--db FILE]\n";
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--once") {
      once = true;
      continue;
    }
    if (i + 1 == argc) return usage("missing argument: " + std::string(arg));
    const std::string_view value = argv[++i];
    if (arg == "--db") {
      database = value;
      continue;
    }
    unsigned long* number = arg == "--port" ? &port : arg == "--tick-ms" ? &tick_ms : nullptr;
    if (number == nullptr) return usage("unknown option " + std::string(arg));
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), *number);
    if (error != std::errc() || end != value.data() + value.size() || *number > 65535) {
      return usage(std::string(arg) + " takes a whole number up to 65535, not '" +
                   std::string(value) + "'");
    }
  }
  const bool temporary = database.empty();
  if (temporary) {
    database =
        (std::filesystem::temp_directory_path() /
         ("progress-" +
          std::to_string(std::chrono::system_clock::now().time_since_epoch().count()) + ".db"))
            .string();
  }
  int code = 1;
  try {
    code = progress::run(database, once, static_cast<unsigned short>(port),
                         std::chrono::milliseconds(once ? 100 : tick_ms));
  } catch (const std::exception& e) {
    std::cerr << "progress: " << e.what() << "\n";
  }
  if (temporary) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(database + suffix);
  }
  return code;
}
