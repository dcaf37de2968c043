// ga-run: run or resume an experiment, validate it, and read its database.
// Exit status: 0 success, 2 usage or configuration error, 3 the experiment is
// run by another process, 75 stopped on request (resumable), 1 anything else.
#include <CLI/CLI.hpp>

#include <iostream>

#include "core/cli/commands.hpp"

int main(int argc, char** argv) { return midtune::cli::ga_run_main(argc, argv, std::cout, std::cerr); }
