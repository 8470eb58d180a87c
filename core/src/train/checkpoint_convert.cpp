// Converting a sharded checkpoint into one full safetensors file (the
// library side of `tessera checkpoint convert --to full`).
#include <set>
#include <system_error>
#include <utility>

#include "invalid_input.hpp"
#include "tessera/core/safetensors.hpp"
#include "tessera/core/train/checkpointing.hpp"
#include "tessera/core/train/sharded_checkpoint.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::train {
namespace {}  // namespace

std::filesystem::path resolve_sharded_index(const std::filesystem::path& in) {
  std::error_code ec;
  if (!std::filesystem::exists(in, ec)) fail("checkpoint: '" + in.string() + "' does not exist");
  if (!std::filesystem::is_directory(in, ec)) {
    if (in.extension() == ".safetensors") {
      const bool full = in.filename() == "model.safetensors";
      fail("checkpoint: '" + in.string() + "' is a safetensors file, not a sharded index: " +
           (full ? std::string("a full checkpoint already (nothing to convert)")
                 : std::string("give the index.json beside it, or its step directory")));
    }
    return in;
  }
  if (std::filesystem::is_regular_file(in / "index.json", ec)) return in / "index.json";
  if (std::filesystem::exists(in / kLatestFile, ec)) {
    const std::optional<CheckpointInfo> info = find_latest_checkpoint(in);
    if (info && info->format == CheckpointFormat::sharded) return info->file;
    if (info) {
      fail("checkpoint: '" + (in / kLatestFile).string() + "' names '" + info->file.string() +
           "', a full checkpoint already (nothing to convert)");
    }
  }
  fail("checkpoint: directory '" + in.string() +
       "' holds neither an index.json (a sharded step directory) nor a 'latest' file (a "
       "checkpoint directory)");
}

ConversionSummary convert_to_full(const std::filesystem::path& in,
                                  const std::filesystem::path& out) {
  ConversionSummary summary;
  summary.index = resolve_sharded_index(in);
  summary.output = out;
  ShardedCheckpoint checkpoint = ShardedCheckpoint::open(summary.index);
  const ShardedIndex& index = checkpoint.index();
  summary.world_size = index.world_size;

  SafetensorsWriter writer;
  for (const std::string& name : sharded_tensor_order(index)) {
    const ShardedTensor& tensor = index.tensors.at(name);
    std::vector<std::byte> bytes = checkpoint.read_full(name);
    summary.bytes += bytes.size();
    writer.add_owned(name, tensor.dtype, tensor.shape, std::move(bytes));
    ++summary.tensors;
  }
  for (const auto& [key, value] : index.metadata) {
    if (key != "tensor_order") writer.set_metadata(key, value);
  }
  writer.set_metadata("format", "full");

  std::error_code ec;
  if (std::filesystem::exists(out, ec) && std::filesystem::is_directory(out, ec)) {
    fail("checkpoint convert: output '" + out.string() + "' is a directory (give a file name)");
  }
  // Replacing a file the conversion reads would destroy the checkpoint, and
  // replacing the `latest` of the checkpoint directory holding its step
  // would lose the way to it.
  std::set<std::filesystem::path> inputs = {summary.index};
  const std::filesystem::path step_dir = summary.index.parent_path();
  if (parse_checkpoint_dir_name(step_dir.filename().string())) {
    inputs.insert(step_dir.parent_path() / kLatestFile);
  }
  for (const auto& [name, tensor] : index.tensors) {
    for (const ShardSlice& slice : tensor.slices) {
      inputs.insert(step_dir / slice.file);
    }
  }
  for (const std::filesystem::path& input : inputs) {
    if (std::filesystem::equivalent(out, input, ec)) {
      fail("checkpoint convert: output '" + out.string() + "' is '" + input.string() + "', " +
           (input.filename() == kLatestFile
                ? std::string("the pointer to the checkpoint being converted")
                : std::string("a file of the checkpoint being converted")) +
           " (give another file name)");
    }
  }
  writer.save(out);
  return summary;
}

}  // namespace tessera::train
