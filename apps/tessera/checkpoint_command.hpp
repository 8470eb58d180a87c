// `tessera checkpoint convert --to full IN OUT`: turns a sharded training
// checkpoint (one safetensors file per rank plus index.json) into one
// safetensors file holding every tensor whole.
#pragma once

#include <ostream>
#include <string>

#include "cli11.hpp"

namespace tessera::cli {

struct CheckpointArgs {
  CLI::App* convert = nullptr;  // the `convert` subcommand, set by add_checkpoint_command
  std::string to;               // target format; only "full"
  std::string in;               // sharded step directory, index.json or checkpoint directory
  std::string out;              // the .safetensors file to write
};

// Registers `checkpoint` and its `convert` subcommand on `app`, storing the
// arguments in `args`.
CLI::App* add_checkpoint_command(CLI::App& app, CheckpointArgs& args);

// Runs the chosen checkpoint subcommand and prints one line per result to
// `out`. Returns kExitOk. Throws UsageError when no subcommand is given or
// --to is missing or not "full" (the message lists the valid values), and
// tessera::Error naming the file or tensor when IN cannot be read or OUT
// cannot be written (OUT is then left untouched).
int run_checkpoint_command(const CheckpointArgs& args, std::ostream& out);

}  // namespace tessera::cli
