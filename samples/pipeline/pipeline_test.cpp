// SPDX-License-Identifier: Apache-2.0
// Unit tests of the tissue-analysis pipeline with the test kit: the parallel fan-out over the
// regions, the retried model calls and their backoffs on the kit's virtual clock, a mocked model,
// the nested post-processing steps in the journal, and crash sweeps in both replay modes.

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "pipeline.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <durable/testing.hpp>
#include <string>
#include <vector>

namespace {
using namespace pipeline;
using durable::Status;
using durable::testing::RunResult;
using durable::testing::TestRuntime;
using std::chrono::milliseconds;
using Keys = std::vector<std::string>;

const Slide kSlide{"slide-0042.svs", 4};

// What the stand-in model makes of kSlide's four regions, post-processed: region 0 (stroma, 0.60)
// is not confident enough; 1 is tumor (0.97), 2 normal (0.94), 3 necrosis (0.91).
const json kAnnotations = {{"necrosis", {3}}, {"normal", {2}}, {"tumor", {1}}};
const json kReport = Report{"slide-0042.svs", "reports/slide-0042.svs.pdf", 4, 3, 1};

durable::RuntimeOptions options(durable::Replay replay = durable::Replay::every_step) {
  durable::RuntimeOptions o;
  o.threads = 4;  // one step thread per region of kSlide
  o.replay = replay;
  o.log_level = durable::LogLevel::off;  // the failures below are on purpose
  return o;
}

int count(const Keys& keys, const std::string& key) {
  return static_cast<int>(std::count(keys.begin(), keys.end(), key));
}

const durable::StepInfo& journal_entry(const std::vector<durable::StepInfo>& journal,
                                       const std::string& key) {
  const auto it = std::find_if(journal.begin(), journal.end(),
                               [&](const durable::StepInfo& s) { return s.id == key; });
  REQUIRE_MESSAGE(it != journal.end(), "no journal entry " << key);
  return *it;
}

}  // namespace

TEST_CASE("a slide is uploaded, tiled, predicted region by region in parallel, and reported") {
  Services services(nullptr);
  TestRuntime kit(options());
  kit.add(workflow(services));
  const RunResult result = kit.run("tissue-analysis", kSlide);

  CHECK(result.info.status == Status::completed);
  CHECK(result.info.output == kReport);
  // The model calls run in parallel, so in any order between the tiling and the post-processing.
  REQUIRE(result.executed.size() == 10);
  CHECK(Keys(result.executed.begin(), result.executed.begin() + 2) ==
        Keys{"upload-image", "generate-tiles"});
  Keys predicted(result.executed.begin() + 2, result.executed.begin() + 6);
  std::sort(predicted.begin(), predicted.end());
  CHECK(predicted == Keys{"predict[0]", "predict[1]", "predict[2]", "predict[3]"});
  CHECK(Keys(result.executed.begin() + 6, result.executed.end()) ==
        Keys{"post-process", "post-process/filter", "post-process/merge", "report"});
  // upload, tiles, all four predictions at once, post-process with its nested steps, report, end.
  CHECK(result.invocations == 6);
  CHECK(services.model_calls() == 4);
  CHECK(services.most_model_calls_at_once() >= 2);
}

TEST_CASE("the journal keys the fan-out by region and the post-processing steps by their path") {
  Services services(nullptr);
  TestRuntime kit(options());
  kit.add(workflow(services));
  const RunResult result = kit.run("tissue-analysis", Slide{"slide-0007.svs", 3});
  REQUIRE(result.info.status == Status::completed);

  const auto journal = kit.runtime().steps(result.info.id);
  Keys keys;
  for (const auto& s : journal) keys.push_back(s.id);
  REQUIRE(keys.size() == 9);
  // The predictions run at once and are journaled as each ends, in whichever order that is.
  std::sort(keys.begin() + 2, keys.begin() + 5);
  CHECK(keys == Keys{"upload-image", "generate-tiles", "predict[0]", "predict[1]", "predict[2]",
                     "post-process/filter", "post-process/merge", "post-process", "report"});
  for (const auto& s : journal) {
    CHECK_MESSAGE(s.status == "completed", s.id);
    CHECK_MESSAGE(s.attempts == 1, s.id);
  }
  CHECK(journal_entry(journal, "upload-image").output == "s3://slides/slide-0007.svs");
  CHECK(journal_entry(journal, "generate-tiles").output.size() == 3);
  CHECK(journal_entry(journal, "predict[1]").output ==
        json{{"region", 1}, {"label", "tumor"}, {"confidence", 0.97}});
  CHECK(journal_entry(journal, "post-process/filter").output.size() == 2);  // region 0 dropped
  // The outer step's result is its last nested step's.
  CHECK(journal_entry(journal, "post-process").output ==
        journal_entry(journal, "post-process/merge").output);
  CHECK(journal_entry(journal, "post-process").output == json{{"tumor", {1}}, {"normal", {2}}});
}

TEST_CASE("a model call that times out once is retried after 200 ms, and only that region again") {
  Services services(nullptr, 2);  // the stand-in endpoint times out on region 2's first call
  TestRuntime kit(options());
  kit.add(workflow(services));
  const auto started = std::chrono::floor<milliseconds>(kit.now());  // as the journal keeps time
  const RunResult result = kit.run("tissue-analysis", kSlide);

  CHECK(result.info.status == Status::completed);
  CHECK(result.info.output == kReport);
  CHECK(count(result.executed, "predict[2]") == 2);
  for (const char* other : {"predict[0]", "predict[1]", "predict[3]"}) {
    CHECK_MESSAGE(count(result.executed, other) == 1, other);
  }
  CHECK(result.invocations == 7);  // one more for the retry of the fan-out
  CHECK(services.model_calls() == 5);
  const auto journal = kit.runtime().steps(result.info.id);
  CHECK(journal_entry(journal, "predict[2]").attempts == 2);
  // quick_retry's 200 ms backoff, without jitter, passed on the virtual clock.
  CHECK(kit.now() - started >= milliseconds(200));
  CHECK(kit.now() - started < milliseconds(400));
}

TEST_CASE("model calls failing twice are retried with a doubling backoff before the prediction") {
  Services services(nullptr);
  TestRuntime kit(options());
  kit.add(workflow(services));
  kit.fail("predict[1]", "model endpoint returned 504", 2);
  const auto started = std::chrono::floor<milliseconds>(kit.now());  // as the journal keeps time
  const RunResult result = kit.run("tissue-analysis", kSlide);

  CHECK(result.info.status == Status::completed);
  CHECK(result.info.output == kReport);
  CHECK(count(result.executed, "predict[1]") == 3);
  CHECK(journal_entry(kit.runtime().steps(result.info.id), "predict[1]").attempts == 3);
  CHECK(kit.now() - started >= milliseconds(200 + 400));
  CHECK(kit.now() - started < milliseconds(800));
}

TEST_CASE("a region whose model call fails on all three attempts fails the run before the report") {
  Services services(nullptr);
  TestRuntime kit(options());
  kit.add(workflow(services));
  kit.fail("predict[1]", "model endpoint returned 504");
  const RunResult result = kit.run("tissue-analysis", kSlide);

  CHECK(result.info.status == Status::failed);
  REQUIRE(result.info.error.has_value());
  CHECK(result.info.error->step_id == "predict[1]");
  CHECK(result.info.error->message.find("model endpoint returned 504") != std::string::npos);
  CHECK(count(result.executed, "predict[1]") == 3);  // quick_retry's three attempts
  CHECK(count(result.executed, "post-process") == 0);
  CHECK(count(result.executed, "report") == 0);
  const auto journal = kit.runtime().steps(result.info.id);
  CHECK(journal_entry(journal, "predict[1]").status == "failed");
  CHECK(journal_entry(journal, "predict[0]").status == "completed");
  CHECK(journal_entry(journal, "predict[3]").status == "completed");
}

TEST_CASE("a failed run retried once the endpoint is back runs only the failed region again") {
  Services services(nullptr);
  TestRuntime kit(options());
  kit.add(workflow(services));
  kit.fail("predict[1]", "model endpoint returned 504", 3);  // every attempt of the first run
  const std::string id = kit.run("tissue-analysis", kSlide).info.id;
  REQUIRE(kit.result(id).info.status == Status::failed);

  kit.runtime().retry(id);
  kit.advance(milliseconds(0));  // drives the re-queued run

  const RunResult retried = kit.result(id);
  CHECK(retried.info.status == Status::completed);
  CHECK(retried.info.output == kReport);
  CHECK(count(retried.executed, "predict[1]") == 4);
  for (const char* done :
       {"upload-image", "generate-tiles", "predict[0]", "predict[2]", "predict[3]"}) {
    CHECK_MESSAGE(count(retried.executed, done) == 1, done);
  }
  CHECK(services.model_calls() == 4);  // the injected failures threw before the real call
}

TEST_CASE("with the model mocked, only confident predictions are annotated and tumors counted") {
  Services services(nullptr);
  TestRuntime kit(options());
  kit.add(workflow(services));
  kit.mock("predict[0]", {{"region", 0}, {"label", "tumor"}, {"confidence", 0.95}});
  kit.mock("predict[1]", {{"region", 1}, {"label", "tumor"}, {"confidence", 0.70}});
  kit.mock("predict[2]", {{"region", 2}, {"label", "stroma"}, {"confidence", 0.88}});
  kit.mock("predict[3]", {{"region", 3}, {"label", "tumor"}, {"confidence", 0.69}});
  const RunResult result = kit.run("tissue-analysis", kSlide);

  CHECK(result.info.status == Status::completed);
  CHECK(services.model_calls() == 0);
  CHECK(count(result.executed, "predict[0]") == 0);
  const auto journal = kit.runtime().steps(result.info.id);
  CHECK(journal_entry(journal, "post-process/merge").output ==
        json{{"tumor", {0, 1}}, {"stroma", {2}}});  // 0.70 is kept, 0.69 is not
  CHECK(result.info.output["annotations"] == 2);
  CHECK(result.info.output["tumor_regions"] == 2);
  CHECK(result.info.output["regions"] == 4);
}

TEST_CASE("under on_recovery the pipeline runs in one invocation and writes the same report") {
  Services services(nullptr);
  TestRuntime kit(options(durable::Replay::on_recovery));
  kit.add(workflow(services));
  const RunResult result = kit.run("tissue-analysis", kSlide);

  CHECK(result.info.status == Status::completed);
  CHECK(result.info.output == kReport);
  CHECK(result.invocations == 1);
  CHECK(result.executed.size() == 10);
}

TEST_CASE("the pipeline ends the same after a crash at any step, parallel and nested included") {
  Services services(nullptr);
  const durable::testing::CrashSweep sweep =
      durable::testing::crash_sweep(workflow(services), Slide{"slide-0042.svs", 2}, options());
  INFO(sweep.report());
  CHECK(sweep.expected.info.output ==
        Report{"slide-0042.svs", "reports/slide-0042.svs.pdf", 2, 1, 1});
  // upload, tiles, two predictions, post-process and its two nested steps, report: 8 bodies.
  CHECK(sweep.cases.size() == 16);
  CHECK(sweep.ok());
  for (const auto& c : sweep.cases) {
    const bool nested = c.step.starts_with("post-process/");
    if (!c.before_commit && c.step.starts_with("predict[")) {
      // Just after a prediction's commit: it does not run again; its sibling may, if it was
      // still in flight (each prediction is journaled as it ends).
      for (const std::string& key : c.ran_again) {
        CHECK_MESSAGE((key != c.step && key.starts_with("predict[")), c.step);
      }
    } else if (!c.before_commit) {
      // Just after a commit: nothing runs again, except the outer body of a nested step, which
      // had not returned yet.
      CHECK_MESSAGE((c.ran_again == (nested ? Keys{"post-process"} : Keys{})), c.step);
    } else if (nested) {
      // Before a nested step's commit: that step and the outer body around it run again.
      CHECK_MESSAGE((c.ran_again == Keys{"post-process", c.step}), c.step);
    } else {
      // Before a commit: the body whose result was lost runs again (with a parallel sibling
      // still in flight, if any).
      CHECK_MESSAGE(std::find(c.ran_again.begin(), c.ran_again.end(), c.step) != c.ran_again.end(),
                    c.step);
    }
  }
  // A crash of post-process after its nested steps were journaled runs only the outer body
  // again: filter and merge keep their journaled results.
  const auto outer = std::find_if(sweep.cases.begin(), sweep.cases.end(), [](const auto& c) {
    return c.step == "post-process" && c.before_commit;
  });
  REQUIRE(outer != sweep.cases.end());
  CHECK(outer->ran_again == Keys{"post-process"});
}
