// SPDX-License-Identifier: Apache-2.0
#pragma once
// Today's code of a workflow against a run as recorded: one invocation of the engine over the
// recorded journal, with a host that runs no body and writes nothing, then the checks that tell
// whether the code still makes the calls it made. testing::replay (a golden journal in CI) and
// Runtime::verify (every unfinished run before a deploy) both ask it.

#include <durable/info.hpp>
#include <durable/workflow.hpp>
#include <optional>
#include <string>
#include <vector>

#include "journal.hpp"

namespace durable::detail {

/// Replays `journal`, the journal of `recorded`, with `wf`'s code, running no body. A
/// divergence (its run_id and workflow set) is:
/// - a call that finds the journal holding another kind of step under its id;
/// - a call the journal does not hold while a journaled step was not called (an inserted,
///   renamed or removed step), or the workflow ending or stopping without calling one (a patch
///   marker no call meets is no divergence: its call was removed once deprecated);
/// - for a run recorded completed or failed: a call past its journal, or another output or
///   error than the recorded one.
/// - for a run recorded in progress (pending, sleeping, waiting, running): the workflow failing
///   where no journaled step failed.
/// A run recorded in progress or cancelled may go on past its journal. The divergence's `where`
/// is the diverging call's "file:line", or, where the workflow parts by ending or stopping, its
/// last step call's (empty when it made none).
std::optional<Divergence> check_replay(const Workflow& wf, const RunInfo& recorded,
                                       std::vector<JournalEntry> journal);

}  // namespace durable::detail
