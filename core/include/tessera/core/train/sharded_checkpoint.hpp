// Training checkpoints in format "sharded": every rank writes the pieces of
// the training state it owns to its own safetensors file, rank 0 writes the
// index that maps every tensor slice to a file, then `latest`:
//
//   <dir>/step-00000200/rank00000.safetensors   rank 0's pieces
//   <dir>/step-00000200/rank00001.safetensors   rank 1's pieces ...
//   <dir>/step-00000200/index.json              every slice of every tensor
//   <dir>/latest                                "step-00000200", written last
//
// Any world size and any strategy reads such a checkpoint back by element
// range or box (ShardedCheckpoint), so a run resumes on another number of
// ranks or another layout.
// docs/checkpoints.md describes the layout.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/comm.hpp"
#include "tessera/core/safetensors_index.hpp"
#include "tessera/core/train/strategy_host.hpp"

namespace tessera::train {

// One piece of one tensor that a rank stored in its file: the full
// tensor's name and shape, and where the piece lives (ShardSlice).
struct SliceRecord {
  std::string tensor;
  std::vector<int64_t> shape;
  ShardSlice slice;
};

// Rank 0, before any rank writes step `step`'s files into `dir`: creates
// `<dir>/step-NNNNNNNN/` and removes what an earlier attempt at the same
// step left there (index.json first, then model.safetensors, rank files and
// stale temporary files), so no file of that attempt can be listed or read
// as part of the new one. Returns the step directory. Throws tessera::Error
// naming the path on a file-system failure.
std::filesystem::path prepare_sharded_step_dir(const std::filesystem::path& dir, int64_t step);

// Writes `state` (this rank's pieces, CollectedState of save(false)) to
// `<step_dir>/rank%05d.safetensors` atomically: f32, one tensor per piece,
// keyed "<tensor>" when the rank holds one piece of it, else
// "<tensor>@<flat index of the piece's first element>"; `metadata` plus
// "rank" goes to its __metadata__. A box piece, and a flat piece that is a
// box (flat_range_as_box), is stored with the box's extents as its shape and
// recorded as a box slice; any other flat piece as a 1-D tensor and a flat
// slice. Returns the slices written (empty pieces are skipped). Throws
// tessera::Error naming the file on an I/O failure.
std::vector<SliceRecord> write_rank_shard(const std::filesystem::path& step_dir, int rank,
                                          const CollectedState& state,
                                          std::map<std::string, std::string> metadata);

// Lossless text form of slice records (JSON) for messages between ranks,
// and its inverse; parse_slice_records throws tessera::Error (invalid
// argument) naming `from` for malformed text.
std::string format_slice_records(const std::vector<SliceRecord>& records);
std::vector<SliceRecord> parse_slice_records(const std::string& text, const std::string& from);

// Collective over `comm`: every rank passes its records; rank 0 gets all of
// them (its own first, then rank 1's, ...), the others an empty vector.
// Small messages through send/recv, so it works for thread and process
// ranks alike. Throws tessera::Error on a communication failure or
// malformed records.
std::vector<SliceRecord> gather_slice_records(Communicator& comm, std::vector<SliceRecord> mine);

// Rank 0, after every rank's file is written: builds the index of `records`
// (the checks of validate_index: every element of every tensor exactly
// once), with `metadata` plus "step", "format" = "sharded" and
// "tensor_order" (a JSON array: the names of `order` present, then the
// rest by name), writes `<dir>/step-NNNNNNNN/index.json` and then `latest`,
// both atomically. Returns the index path. Throws tessera::Error naming the
// tensor (shapes that disagree, a gap or an overlap) or the path; `latest`
// is untouched then.
std::filesystem::path write_sharded_index(const std::filesystem::path& dir, int64_t step,
                                          int world_size, const std::vector<SliceRecord>& records,
                                          const std::vector<std::string>& order,
                                          std::map<std::string, std::string> metadata);

// Opens every rank file `index` (read from `index_path`) refers to and
// checks that each slice's key is there with the index's dtype and element
// count, and that the file was written with the index: the step, seed,
// world size and model its metadata records are the index's, and the rank
// it records is the one its name says, below the world size (a rank file
// copied from another step or run is refused). Throws tessera::Error
// naming the file and the key or the record.
void verify_sharded_files(const std::filesystem::path& index_path, const ShardedIndex& index);

// A state source over a sharded checkpoint (the index at `index_path`):
// tensors by name, f32, shapes checked, any element range or box assembled
// from the rank files whatever world size and slices wrote them. Not thread-safe: one per
// rank.
std::unique_ptr<StateSource> sharded_source(const std::filesystem::path& index_path);

// The source for a checkpoint or weights file: sharded_source for an index
// (a file whose name ends in ".json"), safetensors_source otherwise.
std::unique_ptr<StateSource> checkpoint_source(const std::filesystem::path& file);

// Whether `file` names a sharded index (its name ends in ".json").
bool is_sharded_index(const std::filesystem::path& file);

// Tensor names of `index` in checkpoint order: its "tensor_order" metadata
// (names the index does not hold are skipped), then the rest with the
// parameters before the optimizer state ("optim.*"), each by name.
std::vector<std::string> sharded_tensor_order(const ShardedIndex& index);

// The index a `tessera checkpoint convert` input names: `in` itself when it
// is a file (an index.json), `<in>/index.json` when `in` is a step
// directory holding one, or the sharded checkpoint `<in>/latest` names.
// Throws tessera::Error (invalid argument) naming the path when it does not
// exist, holds neither, or `latest` names a full checkpoint.
std::filesystem::path resolve_sharded_index(const std::filesystem::path& in);

// What convert_to_full wrote.
struct ConversionSummary {
  std::filesystem::path index;  // the index that was read
  std::filesystem::path output;
  size_t tensors = 0;
  uint64_t bytes = 0;  // tensor data bytes
  int world_size = 1;  // ranks that wrote the sharded checkpoint
};

// Turns the sharded checkpoint `in` names (resolve_sharded_index) into one
// safetensors file `out`, written atomically: every tensor whole, with its
// dtype and shape, in sharded_tensor_order (the order of a full checkpoint),
// and the index metadata with "format" = "full" (without "tensor_order").
// Throws tessera::Error naming the index, rank file or tensor at fault, or
// `out` when it cannot be written (then left untouched).
ConversionSummary convert_to_full(const std::filesystem::path& in,
                                  const std::filesystem::path& out);

}  // namespace tessera::train
