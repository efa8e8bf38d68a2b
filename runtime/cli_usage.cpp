// SPDX-License-Identifier: Apache-2.0
// The durable command's help text, kept apart from the command's logic (runtime/cli.cpp).

#include "cli_usage.hpp"

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

}  // namespace durable::detail::cli
