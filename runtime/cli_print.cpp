// SPDX-License-Identifier: Apache-2.0
// How the durable command prints its answers for people (--json prints them as they are): the
// admin layer's JSON (runtime/admin.hpp) as tables.

#include "cli_print.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <sstream>

namespace durable::detail::cli {

std::string shown(const json& value, std::size_t limit) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > limit) text = text.substr(0, limit - 3) + "...";
  return text;
}

std::string text_of(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "-";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

namespace {

// Prints rows as columns, each as wide as its widest cell.
void table(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()));
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out << "  " << line << '\n';
  }
}

void print_counts(std::ostream& out, const json& answer) {
  out << "  ";
  for (const auto& [status, n] : answer.at("counts").items()) out << status << ' ' << n << "  ";
  out << "(total " << answer.at("total") << ")\n";
}

// A run's status, "running (orphaned)" when its holder's lease lapsed.
std::string status_of(const json& run) {
  const bool orphaned = run.contains("orphaned") && run.at("orphaned").get<bool>();
  return text_of(run, "status") + (orphaned ? " (orphaned)" : "");
}

// The width to fit the runs list to: COLUMNS when it is set (as ls reads it), else the
// terminal's; 0 when the output is a pipe or a file, where nothing is cut.
std::size_t output_width() {
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long n = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && n > 0) return static_cast<std::size_t>(n);
  }
  winsize size{};
  if (::isatty(STDOUT_FILENO) == 1 && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0) {
    return size.ws_col;
  }
  return 0;
}

// An error's note in the runs list, at most `budget` bytes: its first line, cut at a word
// boundary when too long. Whatever is left out is marked with a trailing " …"; returns whether
// anything was.
bool fit_note(std::string& text, std::size_t budget) {
  bool cut = false;
  if (const std::size_t eol = text.find_first_of("\r\n"); eol != std::string::npos) {
    text.erase(eol);
    cut = true;
  }
  if (text.size() + (cut ? 2 : 0) > budget) {
    std::size_t end = budget > 2 ? budget - 2 : 0;  // room for " …", one column wide
    const std::size_t space = text.rfind(' ', end);
    if (space != std::string::npos && space >= end / 2) {
      end = space;  // a word boundary, unless that would drop more than half of what fits
    } else {
      while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;  // UTF-8
    }
    text.erase(end);
    cut = true;
  }
  if (cut) text.erase(text.find_last_not_of(" ,:;") + 1) += " …";
  return cut;
}

}  // namespace

// One row per run, grep-friendly. The last column holds a failed run's error: its first line
// in full when the output is not a terminal; on a terminal (or with COLUMNS) cut at a word to
// fit the width, though never under kMinNote. A line after the table says where the rest is.
void print_runs(std::ostream& out, const json& answer) {
  constexpr std::size_t kMinNote = 60;
  print_counts(out, answer);
  if (answer.at("runs").empty()) {
    out << "  no runs match\n";
    return;
  }
  // A VERSION column once some run has one (RuntimeOptions::version).
  const json& runs = answer.at("runs");
  const bool versions = std::any_of(runs.begin(), runs.end(),
                                    [](const json& run) { return run.contains("version"); });
  std::vector<std::vector<std::string>> rows = {
      {"ID", "WORKFLOW", "STATUS", "WORKER", "UPDATED", "INVOCATIONS", ""}};
  if (versions) rows[0].insert(rows[0].begin() + 3, "VERSION");
  for (const json& run : runs) {
    std::string note = run.at("known").get<bool>() ? "" : "no worker has this workflow";
    if (run.contains("error")) note = text_of(run.at("error"), "message");
    rows.push_back({text_of(run, "id"), text_of(run, "workflow"), status_of(run),
                    text_of(run, "worker"), text_of(run, "updated_at"), text_of(run, "invocations"),
                    note});
    if (versions) rows.back().insert(rows.back().begin() + 3, text_of(run, "version"));
  }
  std::size_t before_note = 2;  // table()'s indent, then each column and its gap
  for (std::size_t col = 0; col + 1 < rows[0].size(); ++col) {
    std::size_t widest = 0;
    for (const auto& row : rows) widest = std::max(widest, row[col].size());
    before_note += widest + 2;
  }
  const std::size_t width = output_width();
  const std::size_t budget =
      width == 0 ? std::string::npos
                 : std::max(kMinNote, width > before_note ? width - before_note : 0);
  bool cut = false;
  for (auto& row : rows) cut = fit_note(row.back(), budget) || cut;
  out << '\n';
  table(out, rows);
  if (cut) out << "\n  an error ending in … is cut short here: durable show ID prints it in full\n";
  if (const auto next = answer.find("next_cursor"); next != answer.end() && next->is_string()) {
    out << "\n  more runs: the same command with --after " << next->get<std::string>() << '\n';
  }
}

void print_steps(std::ostream& out, const json& steps) {
  if (steps.empty()) {
    out << "  no steps journaled yet\n";
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"#", "STEP", "KIND", "STATUS", "ATTEMPTS", "DURATION", "UPDATED", "RESULT"}};
  int n = 0;
  for (const json& s : steps) {
    const std::string duration = s.contains("duration_ms")
                                     ? std::to_string(s.at("duration_ms").get<long long>()) + " ms"
                                     : "-";
    std::string result = s.at("output").is_null() ? "" : shown(s.at("output"), 50);
    // In full: what a step waits for and why one failed are what `show` is read for.
    if (const json& wait = s.at("output");
        text_of(s, "kind") == "event" && text_of(s, "status") == "waiting" && wait.is_object()) {
      result = "event '" + text_of(wait, "event") + "'";
      if (wait.contains("match") && !wait.at("match").empty()) {
        result +=
            " matching " + wait.at("match").dump(-1, ' ', false, json::error_handler_t::replace);
      }
    } else if (text_of(s, "kind") == "receive" && text_of(s, "status") == "waiting" &&
               wait.is_object()) {
      result = "a message on '" + text_of(wait, "topic") + "'";
    }
    if (s.contains("resolved")) {
      result += " (resolved by hand: " + text_of(s, "resolved") + ")";
    } else if (s.contains("error")) {
      result = text_of(s.at("error"), "type") + ": " + text_of(s.at("error"), "message");
    }
    if (s.contains("wake_at"))
      result += (result.empty() ? "until " : " (until ") + text_of(s, "wake_at") +
                (result.empty() ? "" : ")");
    rows.push_back({std::to_string(++n), text_of(s, "id"), text_of(s, "kind"), text_of(s, "status"),
                    text_of(s, "attempts"), duration, text_of(s, "updated_at"), result});
  }
  table(out, rows);
}

void print_run(std::ostream& out, const json& run) {
  std::string status = status_of(run);
  for (char& c : status) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  out << "run " << text_of(run, "id") << " (" << text_of(run, "workflow") << ")  " << status
      << "\n";
  std::vector<std::vector<std::string>> rows = {{"correlation", text_of(run, "correlation_id")},
                                                {"created", text_of(run, "created_at")},
                                                {"updated", text_of(run, "updated_at")},
                                                {"invocations", text_of(run, "invocations")},
                                                {"input", shown(run.at("input"))},
                                                {"output", shown(run.at("output"))}};
  if (run.contains("began_at")) rows.push_back({"began", text_of(run, "began_at")});
  if (run.contains("wake_at")) rows.push_back({"next due", text_of(run, "wake_at")});
  if (run.contains("parent_id")) rows.push_back({"parent", text_of(run, "parent_id")});
  if (run.contains("version")) rows.push_back({"version", text_of(run, "version")});
  if (run.contains("forked_from")) rows.push_back({"forked from", text_of(run, "forked_from")});
  if (run.contains("continued_as")) {
    rows.push_back({"continued as", text_of(run, "continued_as")});
  }
  if (run.contains("priority")) rows.push_back({"priority", text_of(run, "priority")});
  if (run.contains("deadline")) rows.push_back({"deadline", text_of(run, "deadline")});
  if (run.contains("tags")) {
    std::string tags;
    for (const auto& [key, value] : run.at("tags").items()) {
      tags += (tags.empty() ? "" : ", ") + key + "=" + value.get<std::string>();
    }
    rows.push_back({"tags", tags});
  }
  if (run.value("pausing", false)) {
    rows.push_back({"pausing", "pauses once the steps running now are journaled"});
  }
  if (run.contains("worker")) rows.push_back({"held by", text_of(run, "worker")});
  if (run.contains("lease_until")) {
    const bool orphaned = run.contains("orphaned") && run.at("orphaned").get<bool>();
    rows.push_back({"lease until", text_of(run, "lease_until") +
                                       (orphaned ? " (lapsed: orphaned, the next claim by any "
                                                   "worker takes the run over)"
                                                 : "")});
  }
  if (!run.at("known").get<bool>()) {
    rows.push_back({"warning", "no worker has registered workflow '" + text_of(run, "workflow") +
                                   "': the run waits for one that has it"});
  }
  if (run.contains("error")) {
    const json& e = run.at("error");
    rows.push_back({"error", text_of(e, "type") + ": " + text_of(e, "message")});
  }
  table(out, rows);
  out << "\nsteps\n";
  print_steps(out, run.at("steps"));
  if (run.contains("progress") && !run.at("progress").empty()) {
    out << "\nprogress (last heartbeat of each step not completed)\n";
    std::vector<std::vector<std::string>> progress;
    for (const json& p : run.at("progress")) {
      progress.push_back({text_of(p, "step"), "attempt " + text_of(p, "attempt"), text_of(p, "at"),
                          shown(p.at("progress"))});
    }
    table(out, progress);
  }
  out << "\nhistory\n";
  std::vector<std::vector<std::string>> history;
  for (const json& t : run.at("history")) {
    history.push_back({text_of(t, "at"), text_of(t, "status"), text_of(t, "reason")});
  }
  table(out, history);
  if (run.at("runbook").is_null()) return;
  const json& book = run.at("runbook");
  out << "\nrunbook\n  what failed  " << text_of(book, "summary") << '\n';
  if (book.contains("error_id") && book.at("error_id").is_string()) {
    out << "  error id     " << text_of(book, "error_id") << " (docs/errors.md)\n";
  }
  out << "  where        "
      << (text_of(book, "failed_step") == "" ? "the workflow function"
                                             : "step '" + text_of(book, "failed_step") + "'")
      << ", failed at " << text_of(book, "failed_at") << "\n  how often    "
      << text_of(book, "similar_failures")
      << " other failed run(s) of this workflow at this step in the last 24 h\n  check\n";
  for (const json& check : book.at("checks")) out << "    - " << check.get<std::string>() << '\n';
  out << "  retry        " << text_of(book, "retry_command") << '\n';
}

namespace {
std::string seconds(double s) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(s < 10 ? 3 : 0) << s << " s";
  return text.str();
}

}  // namespace

void print_stats(std::ostream& out, const json& s) {
  print_counts(out, s);
  const json& age = s.at("oldest_pending_age_seconds");
  table(out, {{"pending depth", text_of(s, "pending_depth")},
              {"oldest pending", age.is_null() ? "-" : seconds(age.get<double>())},
              {"steps", text_of(s, "steps")},
              {"retries", text_of(s, "retries")},
              {"failed runs", text_of(s, "failed_runs")},
              {"failed steps", text_of(s, "failed_steps")},
              {"workers", text_of(s, "workers")},
              {"workflows", shown(s.at("workflows"))}});
}

void print_schedules(std::ostream& out, const json& answer) {
  if (answer.at("schedules").empty()) {
    out << "  no schedules\n";
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "WORKFLOW", "EVERY", "CRON", "NEXT", "FIRED", "LEFT"}};
  for (const json& s : answer.at("schedules")) {
    const long long every = s.at("every_ms").get<long long>();
    rows.push_back({text_of(s, "id"), text_of(s, "workflow"),
                    every == 0 ? "-" : std::to_string(every) + " ms", text_of(s, "cron"),
                    text_of(s, "next_at"), text_of(s, "fired"), text_of(s, "remaining")});
  }
  table(out, rows);
}

// One paragraph per run the code would not replay, then the verdict: what a CI log shows.
void print_verify(std::ostream& out, const json& report) {
  for (const json& d : report.at("divergences")) {
    out << "run " << text_of(d, "run_id") << " (" << text_of(d, "workflow") << ")";
    if (!d.at("step").get<std::string>().empty()) out << " at step '" << text_of(d, "step") << "'";
    if (!d.at("where").get<std::string>().empty()) out << ", " << text_of(d, "where");
    out << "\n  " << text_of(d, "message") << "\n";
  }
  const std::size_t diverging = report.at("divergences").size();
  out << report.at("runs_checked") << " run(s) checked: "
      << (diverging == 0 ? "every one replays on this code"
                         : std::to_string(diverging) + " would not replay on this code")
      << '\n';
}

}  // namespace durable::detail::cli
