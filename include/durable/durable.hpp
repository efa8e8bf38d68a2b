// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// All of durable's public API: workflows, step tools, the runtime, the client and their errors.

#include <durable/cli.hpp>
#include <durable/client.hpp>
#include <durable/errors.hpp>
#include <durable/info.hpp>
#include <durable/options.hpp>
#include <durable/runtime.hpp>
#include <durable/saga.hpp>
#include <durable/step.hpp>
#include <durable/version.hpp>
#include <durable/workflow.hpp>
