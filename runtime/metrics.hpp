// SPDX-License-Identifier: Apache-2.0
#pragma once
// What Admin::metrics() (runtime/metrics.cpp) bounds and how it writes labels: the caps on the
// label values it exports, and the escaping of the Prometheus text format. docs/metrics.md
// describes the series.

#include <cstddef>
#include <string>
#include <string_view>

namespace durable::ops {

/// At most this many values of the `workflow` label, `_other` included: the busiest workflows
/// by runs in the database (ties by name), and the rest summed into `_other`.
inline constexpr std::size_t kMaxWorkflowLabels = 20;
/// At most this many values of the `step` label per workflow value, `_other` included: its
/// steps with the most journal entries, the rest summed into `_other`.
inline constexpr std::size_t kMaxStepLabels = 20;
/// The label value that the folded workflows and steps are summed into. A workflow or step that
/// is itself named so is summed into it as well.
inline constexpr std::string_view kOtherLabel = "_other";

/// `value` as the text between the quotes of a label value: backslash, double quote and line
/// feed escaped as \\, \" and \n.
std::string escape_label_value(std::string_view value);

/// The step id the code wrote, from a journal entry's base: a map item's index dropped
/// ("item[3]" → "item", "outer/item[3]/inner" → "outer/item/inner"), likewise a repeated
/// outer step's use ("outer#2/inner" → "outer/inner"). Step ids cannot hold '[', ']' or '#'
/// themselves, so nothing else is changed.
std::string step_label(std::string_view base);

}  // namespace durable::ops
