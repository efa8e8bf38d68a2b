// SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The version of durable these headers belong to. The build reads it from here (CMake's
/// project version, the package version), so it is written in one place.

#include <string_view>

#define DURABLE_VERSION_MAJOR 0
#define DURABLE_VERSION_MINOR 2
#define DURABLE_VERSION_PATCH 0
/// "MAJOR.MINOR.PATCH"
#define DURABLE_VERSION_STRING "0.2.0"

namespace durable {

/// The version of the durable library linked in, "MAJOR.MINOR.PATCH". Compare it with
/// DURABLE_VERSION_STRING to find headers and a library of different versions.
std::string_view version() noexcept;

}  // namespace durable
