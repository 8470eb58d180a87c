#include "checkpoint_command.hpp"

#include <fmt/format.h>

#include "cli_error.hpp"
#include "tessera/core/train/sharded_checkpoint.hpp"

namespace tessera::cli {
namespace {

constexpr const char* kFormats = "full";

}  // namespace

CLI::App* add_checkpoint_command(CLI::App& app, CheckpointArgs& args) {
  CLI::App* cmd = app.add_subcommand("checkpoint", "Work with training checkpoints");
  args.convert = cmd->add_subcommand(
      "convert", "Convert a sharded checkpoint (index.json plus one file per rank) into one file");
  args.convert
      ->add_option("--to", args.to,
                   std::string("Format to write: ") + kFormats + " (one safetensors file)")
      ->type_name("FORMAT");
  args.convert
      ->add_option("IN", args.in,
                   "A sharded step directory, its index.json, or a checkpoint directory whose "
                   "'latest' names a sharded checkpoint")
      ->type_name("PATH")
      ->required();
  args.convert->add_option("OUT", args.out, "The safetensors file to write (atomically)")
      ->type_name("FILE")
      ->required();
  return cmd;
}

int run_checkpoint_command(const CheckpointArgs& args, std::ostream& out) {
  if (args.convert == nullptr || !*args.convert) {
    throw UsageError("missing command (use checkpoint convert --to full IN OUT; see --help)");
  }
  if (args.to.empty()) {
    throw UsageError(std::string("checkpoint convert: --to is required (valid values: ") +
                     kFormats + ")");
  }
  if (args.to != "full") {
    throw UsageError("checkpoint convert: unknown --to '" + args.to +
                     "' (valid values: " + kFormats + ")");
  }
  const train::ConversionSummary summary = train::convert_to_full(args.in, args.out);
  out << fmt::format("converted {} ({} ranks) -> {}: {} tensors, {} bytes of tensor data\n",
                     summary.index.string(), summary.world_size, summary.output.string(),
                     summary.tensors, summary.bytes);
  return kExitOk;
}

}  // namespace tessera::cli
