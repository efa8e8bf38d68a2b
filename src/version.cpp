// SPDX-License-Identifier: Apache-2.0
#include <durable/version.hpp>

#define DURABLE_TEXT_OF(x) #x
#define DURABLE_TEXT(x) DURABLE_TEXT_OF(x)

static_assert(std::string_view(DURABLE_VERSION_STRING) ==
                  DURABLE_TEXT(DURABLE_VERSION_MAJOR) "." DURABLE_TEXT(
                      DURABLE_VERSION_MINOR) "." DURABLE_TEXT(DURABLE_VERSION_PATCH),
              "DURABLE_VERSION_STRING must spell DURABLE_VERSION_MAJOR.MINOR.PATCH");

namespace durable {

std::string_view version() noexcept { return DURABLE_VERSION_STRING; }

}  // namespace durable
