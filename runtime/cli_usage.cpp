// SPDX-License-Identifier: Apache-2.0
#include "cli_usage.hpp"

#include <algorithm>
#include <map>

#include "errors_internal.hpp"

namespace durable::detail::cli {

const char* const kUsageText =
    R"(usage: durable [--db DATABASE] [--key-file F] [--json] COMMAND [ARGS]

  runs [--status S] [--workflow W] [--correlation C] [--tag K=V,...] [--limit N]
       [--after CURSOR]                          runs, newest first, with counts by status;
                                                 --after: the page after a cursor it printed
  show RUN                                       a run: history, step timeline, runbook if failed
  steps RUN                                      a run's journal
  retry RUN | FILTER [--dry-run]                 run a failed run again (completed steps stay
                                                 done), or every failed run FILTER matches
  cancel RUN | FILTER [--reason R] [--dry-run]   cancel a run that has not ended, or close a
                                                 failed one; or every such run FILTER matches
  purge FILTER [--dry-run]                       delete the ended runs FILTER matches, with
                                                 their journals and histories
    FILTER: --status S  --workflow W  --correlation C  --tag K=V,...  --failed-step STEP
            --error-type T  --since T  --until T (a UTC time, or a duration before now), or
            --all for every run; --dry-run counts them and changes nothing
  pause RUN | --workflow W                       hold a run, or every run of a workflow (a
                                                 running step finishes first)
  resume RUN | --workflow W                      let a paused run, or workflow, go on
  fork RUN --from STEP                           run an ended run again from a step: a new run
                                                 with the journal before STEP copied
  resolve RUN STEP --output JSON [--reason R]    complete a failed step by hand; the run goes on
  start WORKFLOW [--input JSON] [--key K] [--correlation C] [--priority N]
        [--tag K=V,...] [--deadline TIME|DURATION]
                                                 queue a run for a worker that has the workflow
  send EVENT [--data JSON]                       send an event (wakes waits, starts triggered runs)
  published RUN KEY [--wait MS]                  the JSON value a run published under KEY; waits
                                                 up to MS for it (exit 1 when there is none)
  tail RUN STREAM [--from N]                     a run's stream, a JSON value a line, until closed
  message RUN TOPIC [--data JSON]                put a message in a run's mailbox (step.receive)
  stats                                          counts, pending depth and age, retries, failures
  schedules [remove ID]                          list schedules, or remove one
  metrics                                        the Prometheus metrics of the file
  events purge --older-than AGE                  delete events older than AGE (e.g. 7d) that
                                                 no waiting run needs
  serve [--address A] [--port P] [--token T] [--tls-cert F --tls-key F]
        [--signing-secret-file F]                HTTP API, /metrics and dashboard over the file
  verify [--workflow W] [--status S] [--correlation C]
                                                 replay the unfinished runs against this
                                                 program's code (from durable::cli_main only)
  forget CORRELATION_ID                          destroy the data key of a correlation id (or
                                                 run id): its payloads read as forgotten, its
                                                 unfinished runs are cancelled (needs --key-file)
  version                                        the version of this durable (also --version)

  --db DATABASE   an SQLite file (default durable.db) or a postgresql:// URI
  --key-file F    the encryption key file the runtime uses (encryption_key_file): payloads
                  are decrypted with it, and written encrypted
  --json          print the answer as JSON
exit codes: 0 done, 1 failed, 2 bad usage, 3 not found, 4 refused by the run's state,
  5 verify found runs this code would not replay
)";

namespace {

// What a command accepts; check_usage holds every command line to it before anything opens the
// database. Help (`help`, `--help`, `-h`) and `--version` are answered before this.
struct Syntax {
  std::string_view name;
  std::vector<std::string_view> flags;
  std::size_t min_args = 0, max_args = 0;
  std::string_view first_arg = {};  // what the first argument is: "show needs a run id"
};

const std::vector<Syntax>& syntaxes() {
  static const std::vector<Syntax> kSyntax = {
      {"runs", {"status", "workflow", "correlation", "tag", "limit", "after"}},
      {"show", {}, 1, 1, "a run id"},
      {"steps", {}, 1, 1, "a run id"},
      // Without a run: a bulk action over the runs of a filter.
      {"retry",
       {"status", "workflow", "correlation", "tag", "failed-step", "error-type", "since", "until",
        "dry-run", "all"},
       0,
       1},
      {"cancel",
       {"reason", "status", "workflow", "correlation", "tag", "failed-step", "error-type", "since",
        "until", "dry-run", "all"},
       0,
       1},
      {"purge",
       {"status", "workflow", "correlation", "tag", "failed-step", "error-type", "since", "until",
        "dry-run", "all"}},
      {"pause", {"workflow"}, 0, 1},
      {"resume", {"workflow"}, 0, 1},
      {"fork", {"from"}, 1, 1, "a run id"},
      {"resolve", {"output", "reason"}, 2, 2, "a run id and a step"},
      {"start",
       {"input", "key", "correlation", "priority", "tag", "deadline"},
       1,
       1,
       "a workflow name"},
      {"send", {"data"}, 1, 1, "an event name"},
      {"published", {"wait"}, 2, 2, "a run id and a key"},
      {"tail", {"from"}, 2, 2, "a run id and a stream"},
      {"message", {"data"}, 2, 2, "a run id and a topic"},
      {"stats", {}},
      {"schedules", {}, 0, 2},
      {"metrics", {}},
      {"events", {"older-than"}, 1, 1, "a subcommand (purge)"},
      {"serve", {"address", "port", "token", "tls-cert", "tls-key", "signing-secret-file"}},
      {"verify", {"workflow", "status", "correlation"}},
      {"forget", {}, 1, 1, "a correlation id"},
      {"version", {}}};
  return kSyntax;
}

}  // namespace

// "; did you mean 'X'?" for the candidate nearest to `word`, when it is near enough to be a typo
// (at most two edits, fewer than half the word's letters); otherwise empty.
std::string did_you_mean(std::string_view word, const std::vector<std::string_view>& candidates,
                         std::string_view prefix) {
  // The names other tools give these commands: a user of kubectl, Temporal or a queue types them.
  static const std::map<std::string_view, std::string_view> kSynonyms = {
      {"list", "runs"},     {"ls", "runs"},          {"ps", "runs"},      {"get", "show"},
      {"describe", "show"}, {"inspect", "show"},     {"rerun", "retry"},  {"kill", "cancel"},
      {"stop", "cancel"},   {"terminate", "cancel"}, {"submit", "start"}, {"trigger", "start"},
      {"signal", "send"},   {"emit", "send"},        {"publish", "send"}};
  if (const auto it = kSynonyms.find(word);
      it != kSynonyms.end() &&
      std::find(candidates.begin(), candidates.end(), it->second) != candidates.end()) {
    return "; did you mean '" + std::string(prefix) + std::string(it->second) + "'?";
  }
  std::string_view best;
  std::size_t best_distance = 3;
  for (std::string_view candidate : candidates) {
    const std::size_t d = edit_distance(word, candidate);
    if (d < best_distance && 2 * d < std::max(word.size(), candidate.size())) {
      best = candidate;
      best_distance = d;
    }
  }
  return best.empty() ? "" : "; did you mean '" + std::string(prefix) + std::string(best) + "'?";
}

std::string joined(const std::vector<std::string_view>& words, std::string_view prefix) {
  std::string text;
  for (std::string_view w : words)
    text += (text.empty() ? "" : ", ") + std::string(prefix) + std::string(w);
  return text;
}

// Throws a UsageError naming the first thing wrong with the command line, whether or not a
// database is there; the values of flags are checked where they are read, also before it.
void check_usage(const Command& cmd) {
  const auto& all = syntaxes();
  const auto syntax =
      std::find_if(all.begin(), all.end(), [&](const Syntax& s) { return s.name == cmd.name; });
  if (syntax == all.end()) {
    std::vector<std::string_view> names;
    for (const Syntax& s : all) names.push_back(s.name);
    throw UsageError("unknown command '" + cmd.name + "'" + did_you_mean(cmd.name, names) +
                     "\nthe commands: " + joined(names) + ", help");
  }
  for (const auto& [flag, value] : cmd.flags) {
    if (std::find(syntax->flags.begin(), syntax->flags.end(), flag) != syntax->flags.end()) {
      continue;
    }
    throw UsageError(cmd.name + " takes no flag --" + flag +
                     did_you_mean(flag, syntax->flags, "--") +
                     (syntax->flags.empty() ? std::string(" (it takes none)")
                                            : " (it takes " + joined(syntax->flags, "--") + ")"));
  }
  if (cmd.args.size() < syntax->min_args) {
    throw UsageError(cmd.name + " needs " + std::string(syntax->first_arg));
  }
  if (cmd.args.size() > syntax->max_args) {
    throw UsageError("too many arguments for " + cmd.name + ": '" + cmd.args[syntax->max_args] +
                     "' is one more than it takes");
  }
  if (cmd.name == "schedules" && !cmd.args.empty()) {
    if (cmd.args[0] != "remove") {
      throw UsageError("schedules takes 'remove ID' or nothing, not '" + cmd.args[0] + "'");
    }
    if (cmd.args.size() < 2) throw UsageError("schedules remove needs a schedule id");
  }
  if (cmd.name == "fork" && cmd.flag("from").empty()) {
    throw UsageError("fork needs --from STEP: the step to run again from (as `steps` lists it)");
  }
  if (cmd.name == "resolve" && !cmd.flags.contains("output")) {
    throw UsageError("resolve needs --output JSON: the result the step should have returned");
  }
  if (cmd.name == "events") {
    if (cmd.args[0] != "purge") throw UsageError("events takes 'purge', not '" + cmd.args[0] + "'");
    if (cmd.flag("older-than").empty()) {
      throw UsageError("events purge needs --older-than AGE (e.g. 7d)");
    }
  }
}

}  // namespace durable::detail::cli
