// The host side of the strategy ABI (tessera/c/strategy.h, tessera/c/model.h):
// the C tables the core implements for a strategy plugin — the model, the
// optimizer, state readers and writers — and the handle on a loaded strategy.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessera/c/strategy.h"
#include "tessera/core/comm.hpp"
#include "tessera/core/data/batch.hpp"
#include "tessera/core/model/model.hpp"
#include "tessera/core/optim/optimizer.hpp"
#include "tessera/core/options.hpp"
#include "tessera/core/plugin_registry.hpp"
#include "tessera/core/tensor_box.hpp"
#include "tessera/core/train/compressor_host.hpp"
#include "tessera/core/train/model_description.hpp"

namespace tessera::train {

// A tessera_batch* is a tessera::Batch, read through the host's batch
// accessors (tessera_host_api.batch_tensor). The model table a strategy
// gets is the model plugin's own (model::Model::api()).
inline const tessera_batch* as_c_batch(const Batch& batch) noexcept {
  return reinterpret_cast<const tessera_batch*>(&batch);
}

// The optimizer table over core optimizers; state memory is reported as
// TESSERA_MEM_OPTIMIZER of the calling thread's rank.
const tessera_optimizer_api* optimizer_api() noexcept;
const tessera_optimizer* as_c_optimizer(const Optimizer& optimizer) noexcept;

// A tensor's full shape and a slice of it (see tessera_tensor_slice): the
// flat range [offset, offset + count) of its row-major elements, or, when
// `box` is set, that box in row-major order of the box (`offset` 0, `count`
// the box's element count).
struct SliceRef {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t offset = 0;
  uint64_t count = 0;
  std::optional<TensorBox> box = std::nullopt;
};

// Checks a slice a strategy asks `source` for against the tensor's actual
// shape and the output length: the shapes agree, the range or box lies
// inside the tensor and `out_size` is slice.count. Throws tessera::Error
// (invalid argument) naming the source and the tensor.
void check_slice_request(const std::string& source, const SliceRef& slice,
                         std::span<const int64_t> actual, std::size_t out_size);

// How a checked slice's elements lie in its buffer (see SliceLayout).
SliceLayout slice_layout(const SliceRef& slice);

// Where load() reads from. Implementations throw tessera::Error (invalid
// argument) naming the source and the tensor for a missing tensor, another
// shape, or a range outside the tensor.
class StateSource {
 public:
  virtual ~StateSource() = default;
  [[nodiscard]] virtual bool has(const std::string& name) const = 0;
  virtual void read(const SliceRef& slice, std::span<float> out) const = 0;
  // For messages: "model init (seed 42)", "runs/ck/step-000020/model.safetensors".
  [[nodiscard]] virtual std::string describe() const = 0;
};

// The model's own seeded initialisation (Unit::init); parameters only.
std::unique_ptr<StateSource> init_source(const model::Model& model, uint64_t seed);
// A full safetensors file (model.init or a full checkpoint): tensors by
// name, f32, shapes checked; optimizer state present if the file has it.
std::unique_ptr<StateSource> safetensors_source(const std::filesystem::path& file);

// Everything a rank's strategy wrote through save(): slices per tensor.
//
// Replicas. The same element may arrive more than once: with
// TESSERA_STATE_ALL_REPLICAS every rank writes all it holds, so after
// merge() of the ranks a replicated tensor is there once per rank, and a
// rank may also write one element twice (e.g. a tied parameter reached
// through two slots). Wherever two pieces overlap their values must agree
// bit for bit (+0 and -0 differ, a NaN equals only the same NaN bits);
// otherwise tessera::Error (mismatch) names the tensor, the first
// differing element (flat index and value of each) and the ranks that
// wrote them when known. A piece whose range is already fully held is
// dropped after the check, so replicas cost no memory. Without
// TESSERA_STATE_ALL_REPLICAS the ABI promises each element once across the
// world; a writer made without the flag therefore rejects a repeated
// element of its own rank (invalid argument), while merge() accepts
// overlaps that agree, whatever the flag was.
//
// Pieces are flat ranges or boxes (as written); overlaps, replicas and gaps
// are found between any mix of them, and reported as flat ranges, boxes or
// the first element's index.
struct CollectedState {
  struct Piece {
    uint64_t offset = 0;  // first element of a flat piece (0 for a box)
    std::vector<float> values;
    int rank = -1;  // the rank whose strategy wrote it (thread rank), -1 unknown
    // Set for a box piece: `values` are the box's elements in row-major
    // order of the box. Unset: elements [offset, offset + values.size()).
    std::optional<TensorBox> box = std::nullopt;
  };
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<Piece> pieces;  // sorted by the flat index of their first element
  };
  std::map<std::string, Tensor> tensors;

  // The whole of tensor `name` if the pieces cover it. Throws tessera::Error
  // (invalid argument) naming the tensor when it is missing, or naming the
  // first flat element range no piece covers.
  [[nodiscard]] std::vector<float> full(const std::string& name) const;
  // Adds another rank's pieces. Throws tessera::Error (mismatch) naming the
  // tensor and both shapes when shapes disagree, or when overlapping pieces
  // differ (see above); on a throw this state may hold part of `other`.
  void merge(CollectedState&& other);
  // Adds one piece of tensor `name` with full `shape`, checked as above;
  // `allow_repeat` false rejects any overlap with what is held (invalid
  // argument). Throws tessera::Error (invalid argument) when the range or
  // box is outside the tensor, or a box's element count is not
  // piece.values.size().
  void add(const std::string& name, std::span<const int64_t> shape, Piece piece,
           bool allow_repeat = true);
};

// The C reader/writer tables over a StateSource / CollectedState; the
// object must outlive the table. Errors (a bad slice, a missing tensor, a
// shape that differs, a repeated or differing element) reach the plugin as
// a status plus host last_error. A writer records the calling thread's rank
// in each piece and tells the plugin `step`, the step being saved
// (tessera_state_writer.step).
tessera_state_reader make_reader(const StateSource& source) noexcept;
tessera_state_writer make_writer(CollectedState& sink, uint32_t flags = 0,
                                 int64_t step = 0) noexcept;

// One rank's strategy object.
class StrategyInstance {
 public:
  ~StrategyInstance();
  StrategyInstance(const StrategyInstance&) = delete;
  StrategyInstance& operator=(const StrategyInstance&) = delete;

  [[nodiscard]] const tessera_strategy_layout& layout() const noexcept { return layout_; }
  // Each call is collective over the world communicator; failures throw
  // tessera::Error carrying the plugin's message.
  void load(const StateSource& source);
  // One step over this rank's `micro_batches`. `global_examples` is the
  // step's global batch (every data-parallel slice once) and
  // `global_tokens` its tokens (0 for models that are not sequence
  // models); this rank's counts are taken from the micro-batches.
  // `grad_scale` is f16's loss scale (tessera_step_args.grad_scale, 1:
  // none), already included in `loss_scales`.
  tessera_step_result step(std::span<const Batch> micro_batches, std::span<const float> loss_scales,
                           int64_t step, float lr, double max_grad_norm, int64_t global_examples,
                           int64_t global_tokens, float grad_scale = 1.0F);
  // The state after step `step` (tessera_state_writer.step). With
  // all_replicas, every rank writes all it holds (TESSERA_STATE_ALL_REPLICAS).
  CollectedState save(int64_t step, bool all_replicas = false);
  // After a step whose result has world_changed (strategy 2.5, elastic
  // recovery): the strategy's new world; the layout() changes to its
  // layout. Throws Error(INTERNAL) for a strategy without `world`.
  tessera_strategy_world world();

 private:
  friend class StrategyPlugin;
  StrategyInstance() = default;
  // "strategy 'ddp' (rank 1): <what>", the prefix of error messages.
  [[nodiscard]] std::string where(const char* what) const;
  std::shared_ptr<LoadedPlugin> plugin_;
  const tessera_strategy_api* api_ = nullptr;
  tessera_strategy* handle_ = nullptr;
  tessera_strategy_layout layout_{};
  // Handed to create by pointer, so they must live as long as the strategy.
  OptionValues options_;
  tessera_strategy_env env_{};
  std::string compressor_name_;  // env_.compressor_name points into it
  std::string name_;
  int rank_ = 0;
};

// A loaded strategy plugin with validated options.
class StrategyPlugin {
 public:
  // Finds strategy `name` (the error lists the available ones) and checks
  // `options` (may be null) against its declared options; `where` names
  // them in messages ("run.toml: [strategy.options]").
  StrategyPlugin(const PluginRegistry& registry, const std::string& name,
                 const toml::table* options, const std::string& where);

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return plugin_->path(); }
  // The options as the plugin sees them: declared defaults filled in.
  [[nodiscard]] const OptionValues& options() const noexcept { return options_; }

  // Before ranks start: throws tessera::Error when the strategy refuses its
  // options or `world_size` ranks: "strategy 'zero1' refused its options or
  // world size (2 ranks): <the plugin's message>", with the plugin's status.
  void check(int world_size) const;

  // Strategy 2.3: whether the plugin's table has `estimate`.
  [[nodiscard]] bool can_estimate() const noexcept;
  // What the strategy predicts it would hold and send per rank for `model`
  // on `world_size` ranks, `ranks_per_node` to a node (runs check() first),
  // with `compression` the run's compressor (0: none; else 1 + its kind,
  // tessera_estimate_args.compression).
  // Throws tessera::Error: INVALID_ARGUMENT "strategy 'pipeline' cannot run
  // model 'gpt' on 4 ranks: <the plugin's message>" when it refuses,
  // UNSUPPORTED when it has no estimate.
  [[nodiscard]] tessera_estimate estimate(const ModelDescription& model, int world_size,
                                          int ranks_per_node, int32_t compression = 0) const;

  // Creates rank `comm.rank()`'s strategy (collective over `comm`). `model`,
  // `optimizer` and `comm` must outlive the instance.
  // `compressor` (may be null) is the rank's gradient compressor, which
  // must outlive the instance too; a strategy older than interface 2.4 is
  // refused one (invalid argument, naming the strategy, its file and the
  // compressor). `joining`: this rank joins a running world (`comm` is a
  // group of itself alone; strategy 2.7, refused for older plugins).
  // `micro_batches`: how many each step will pass (data.micro_batches),
  // for the strategy to refuse a count its schedule cannot run before any
  // state is loaded (strategy 2.9); 0: not said.
  std::unique_ptr<StrategyInstance> create(Communicator& comm, const model::Model& model,
                                           const Optimizer& optimizer,
                                           const CompressorPlugin::Instance* compressor = nullptr,
                                           const std::string& compressor_name = {},
                                           bool joining = false, int64_t micro_batches = 0) const;

 private:
  std::shared_ptr<LoadedPlugin> plugin_;
  const tessera_strategy_api* api_ = nullptr;
  OptionValues options_;
  std::string name_;
};

}  // namespace tessera::train
