// SPDX-License-Identifier: Apache-2.0
// expect: a workflow function takes (durable::Step& step, const Input& input)
#include <durable/durable.hpp>

durable::Workflow echo("echo", [](const durable::json& input) { return input; });
