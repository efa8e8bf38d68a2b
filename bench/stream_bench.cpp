// SPDX-License-Identifier: Apache-2.0
// Issue 23: values per second from a step body's Step::write_stream to a reader of the stream's
// Server-Sent Events over HTTP, beside raw SQLite measured in the same run; a markdown table.
//
//   durable_stream_bench [--quick] [--values N] [--rounds N]
//
// durable: a runtime serves its HTTP API on a free loopback port; each round starts a run whose
// one step writes N values ({"i": i, "text": …}) to its stream, one write_stream call each, and
// then closes it. A reader on a real socket asks for GET /v1/runs/{id}/streams/values as soon as
// the run is started and reads the chunked text/event-stream until the response ends at the
// close; it checks that it got the N events, in order. The figure is N over the time from the
// start of the run to the end of the response: each value written (its own transaction, as a
// step body's write is), woken, read back and sent.
//
// raw: the same N rows, one transaction each, inserted into a table of the same shape as
// durable's (stream_values(run_id, name, pos, value, written_at), WITHOUT ROWID) in a fresh file
// with the pragmas durable uses (auto_vacuum=INCREMENTAL, WAL, synchronous=NORMAL). Each figure
// is the median of the rounds.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <iostream>

#include "bench_support.hpp"

namespace bench = durable::bench;
using durable::json;
using namespace std::chrono_literals;

namespace {

// A value of the size a progress update or a model's token batch has.
json value_of(int i) { return {{"i", i}, {"text", "token " + std::to_string(i)}}; }

durable::Workflow streamer() {
  return durable::Workflow("streamer", [](durable::Step& step, const json& input) -> json {
    const int values = input.at("values").get<int>();
    step.run("write", [&] {
      for (int i = 0; i < values; ++i) step.write_stream("values", value_of(i));
      return values;
    });
    step.close_stream("values");
    return values;
  });
}

// The body of a chunked HTTP answer.
std::string dechunk(std::string_view chunked) {
  std::string body;
  for (;;) {
    const std::size_t eol = chunked.find("\r\n");
    if (eol == std::string_view::npos) throw std::runtime_error("a chunk without its size line");
    std::size_t size = 0;
    std::from_chars(chunked.data(), chunked.data() + eol, size, 16);
    if (size == 0) return body;
    if (eol + 2 + size + 2 > chunked.size()) throw std::runtime_error("a chunk cut short");
    body.append(chunked.substr(eol + 2, size));
    chunked.remove_prefix(eol + 2 + size + 2);
  }
}

// GET `path` on 127.0.0.1:`port`, read until the server ends the response; the de-chunked body.
std::string read_events(unsigned short port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string raw;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
    const std::string request = "GET " + path +
                                " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                                "\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) > 0) {
      char buffer[64 * 1024];
      for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) {
        raw.append(buffer, static_cast<std::size_t>(n));
      }
    }
  }
  ::close(fd);
  const std::size_t head_end = raw.find("\r\n\r\n");
  if (!raw.starts_with("HTTP/1.1 200") || head_end == std::string::npos) {
    throw std::runtime_error("GET " + path + " answered: " + raw.substr(0, 200));
  }
  return dechunk(std::string_view(raw).substr(head_end + 4));
}

// Throws unless `events` holds exactly the values 0..n-1, in order, each with its offset.
void check_events(const std::string& events, int n) {
  std::size_t at = 0;
  for (int i = 0; i < n; ++i) {
    const std::string event = "id: " + std::to_string(i) + "\ndata: " + value_of(i).dump() + "\n\n";
    if (events.compare(at, event.size(), event) != 0) {
      throw std::runtime_error("event " + std::to_string(i) +
                               " is not what was written: " + events.substr(at, 80));
    }
    at += event.size();
  }
  if (at != events.size()) throw std::runtime_error("more events than values were written");
}

unsigned short port_of(const std::string& url) {  // "http://127.0.0.1:PORT"
  unsigned short port = 0;
  const std::size_t colon = url.rfind(':');
  std::from_chars(url.data() + colon + 1, url.data() + url.size(), port);
  return port;
}

// durable: values per second of each round, step body to SSE reader.
std::vector<double> durable_rates(const std::string& db, int values, int rounds) {
  durable::RuntimeOptions options;
  options.database = db;
  options.log_level = durable::LogLevel::off;
  options.http.address = "127.0.0.1";
  options.http.port = 0;
  durable::Runtime runtime(options);
  runtime.add(streamer());
  std::thread server([&] {
    try {
      runtime.serve();
    } catch (const std::exception& e) {  // the rounds then fail on their own, with this said
      std::cerr << "durable_stream_bench: serve() failed: " << e.what() << '\n';
    }
  });
  struct Stop {
    durable::Runtime& runtime;
    std::thread& server;
    ~Stop() {
      runtime.stop();
      server.join();
    }
  } stop{runtime, server};
  for (auto until = bench::Stopwatch::now() + 10s; runtime.http_url().empty();) {
    if (bench::Stopwatch::now() > until) throw std::runtime_error("the API did not start");
    std::this_thread::sleep_for(5ms);
  }
  const unsigned short port = port_of(runtime.http_url());
  std::vector<double> rates;
  for (int round = 0; round < rounds; ++round) {
    const auto start = bench::Stopwatch::now();
    const std::string run = runtime.start("streamer", {{"values", values}});
    const std::string events = read_events(port, "/v1/runs/" + run + "/streams/values");
    rates.push_back(values / bench::seconds_since(start));
    check_events(events, values);
  }
  return rates;
}

// raw SQLite: values per second of one-row transactions into durable's table shape.
double raw_rate(bench::Scratch& scratch, int values) {
  const std::string path = scratch.fresh("raw-stream");
  double elapsed = 0;
  {
    SQLite::Database db(path, SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE);
    db.exec("PRAGMA auto_vacuum = INCREMENTAL");
    db.exec(
        "CREATE TABLE stream_values (run_id TEXT NOT NULL, name TEXT NOT NULL, "
        "pos INTEGER NOT NULL, value TEXT NOT NULL, written_at INTEGER NOT NULL, "
        "PRIMARY KEY (run_id, name, pos)) WITHOUT ROWID");
    db.exec("PRAGMA journal_mode=WAL");
    db.exec("PRAGMA synchronous=NORMAL");
    SQLite::Statement insert(db, "INSERT INTO stream_values VALUES (?, 'values', ?, ?, ?)");
    const std::string run_id = "01a2200046b487faca1796eb4362";  // a run id's length
    const auto start = bench::Stopwatch::now();
    for (int i = 0; i < values; ++i) {
      SQLite::Transaction tx(db, SQLite::TransactionBehavior::IMMEDIATE);
      insert.bind(1, run_id);
      insert.bind(2, i);
      insert.bind(3, value_of(i).dump());
      insert.bind(4, static_cast<std::int64_t>(std::time(nullptr)) * 1000);
      insert.exec();
      insert.reset();
      tx.commit();
    }
    elapsed = bench::seconds_since(start);
  }
  bench::Scratch::remove(path);
  return values / elapsed;
}

int positive(const char* text, const char* what) {
  int n = 0;
  const auto [end, error] = std::from_chars(text, text + std::strlen(text), n);
  if (error != std::errc() || *end != '\0' || n <= 0) {
    throw std::invalid_argument(std::string(what) + " takes a positive whole number, not '" + text +
                                "'");
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int values = 10'000, rounds = 5;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg == "--quick") {
        values = 200;
        rounds = 2;
      } else if (arg == "--values" && i + 1 < argc) {
        values = positive(argv[++i], "--values");
      } else if (arg == "--rounds" && i + 1 < argc) {
        rounds = positive(argv[++i], "--rounds");
      } else {
        throw std::invalid_argument("unknown argument '" + std::string(arg) + "'");
      }
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "durable_stream_bench: " << e.what()
              << "\nusage: durable_stream_bench [--quick] [--values N] [--rounds N]\n";
    return 2;
  }
  try {
    bench::Scratch scratch("", "durable-stream-bench");
    const std::vector<double> ours = durable_rates(scratch.fresh("stream"), values, rounds);
    std::vector<double> raw;
    for (int round = 0; round < rounds; ++round) raw.push_back(raw_rate(scratch, values));
    const double durable_median = bench::median(ours), raw_median = bench::median(raw);
    std::printf(
        "write_stream in a step body to an SSE reader over HTTP: %d values, median of %d "
        "rounds, on %s\n\n",
        values, rounds, bench::file_system_of(scratch.dir()).c_str());
    std::printf("| path | values/s | raw SQLite, same run | durable / raw |\n");
    std::printf("|---|---:|---:|---:|\n");
    std::printf("| step body → `write_stream` → SSE reader | %s | %s | %.2f |\n",
                bench::with_commas(durable_median).c_str(), bench::with_commas(raw_median).c_str(),
                durable_median / raw_median);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "durable_stream_bench: " << e.what() << "\n";
    return 1;
  }
}
