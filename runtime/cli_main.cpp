// SPDX-License-Identifier: Apache-2.0
// The standalone `durable` binary: the command for operators, which knows no workflow code
// (runtime/cli.cpp; an application embeds it with durable::cli_main).

#include <durable/cli.hpp>

int main(int argc, char** argv) { return durable::detail::cli_main(argc, argv, nullptr); }
