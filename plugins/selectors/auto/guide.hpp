// The strategy selection guide as data: which family of strategies it
// recommends for a model size, the order "start with data parallel, shard
// only when needed" puts the families in, and which candidate belongs to
// which family. The selector consults these tables where predictions tie.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace tessera::selectors {

// Families of candidates, as the guide names them.
enum class Family : int32_t {
  kDataParallel,   // none, ddp, fsdp no_shard: everything replicated
  kShardGradOp,    // zero1, zero2, fsdp shard_grad_op: state sharded, parameters whole in compute
  kFullShard,      // fsdp full_shard: parameters sharded too
  kZero3,          // zero3: the same sharding as full_shard, ZeRO's scheduling
  kModelParallel,  // pipeline, tensor, hybrid with replicated data axis
  kMeshSharded,    // hybrid with state sharded over its data axis (FSDP + pipeline + tensor)
  kOther,          // a strategy the tables do not know (third-party)
};

// The guide's wording of a family ("FSDP FullShard").
const char* family_label(Family family) noexcept;

// One row of the guide: models of [min_params, max_params) parameters,
// typically trained on min_ranks..max_ranks GPUs (max_ranks 0: no upper
// end), and the families it recommends, best first.
struct GuideRow {
  double min_params;
  double max_params;
  int32_t min_ranks;
  int32_t max_ranks;
  std::array<Family, 2> recommended;
  int32_t num_recommended;
  const char* size_label;  // "7B-13B"
};

inline constexpr double kBillion = 1e9;
inline constexpr double kNoLimit = 1e300;

inline constexpr GuideRow kGuide[] = {
    {0.0, 1 * kBillion, 1, 4, {Family::kDataParallel, Family::kOther}, 1, "under 1B"},
    {1 * kBillion, 7 * kBillion, 2, 8, {Family::kDataParallel, Family::kShardGradOp}, 2, "1B-7B"},
    {7 * kBillion, 13 * kBillion, 4, 8, {Family::kFullShard, Family::kZero3}, 2, "7B-13B"},
    {13 * kBillion, 70 * kBillion, 8, 16, {Family::kZero3, Family::kFullShard}, 2, "13B-70B"},
    {70 * kBillion, kNoLimit, 16, 0, {Family::kMeshSharded, Family::kModelParallel}, 2, "over 70B"},
};

// "Start with DDP, use sharding only when necessary": the families from
// the least to the most split state. Among candidates the guide does not
// separate, the earlier family wins.
inline constexpr std::array<Family, 7> kLadder = {
    Family::kDataParallel,  Family::kShardGradOp, Family::kFullShard, Family::kZero3,
    Family::kModelParallel, Family::kMeshSharded, Family::kOther};

// Which family a candidate is in: the first rule whose strategy matches
// and, when it names an option, whose options text sets that value.
struct FamilyRule {
  const char* strategy;
  const char* key;    // nullptr: any options
  const char* value;  // the option's value (a string option)
  Family family;
};

inline constexpr FamilyRule kFamilyRules[] = {
    {"none", nullptr, nullptr, Family::kDataParallel},
    {"ddp", nullptr, nullptr, Family::kDataParallel},
    {"zero1", nullptr, nullptr, Family::kShardGradOp},
    {"zero2", nullptr, nullptr, Family::kShardGradOp},
    {"fsdp", "sharding_strategy", "shard_grad_op", Family::kShardGradOp},
    {"fsdp", "sharding_strategy", "no_shard", Family::kDataParallel},
    {"fsdp", nullptr, nullptr, Family::kFullShard},
    {"zero3", nullptr, nullptr, Family::kZero3},
    {"pipeline", nullptr, nullptr, Family::kModelParallel},
    {"tensor", nullptr, nullptr, Family::kModelParallel},
    {"hybrid", "dp_shard", "zero1", Family::kMeshSharded},
    {"hybrid", "dp_shard", "zero2", Family::kMeshSharded},
    {"hybrid", nullptr, nullptr, Family::kModelParallel},
};

// The family of `strategy` with `options` ("key = value, ...").
Family family_of(const std::string& strategy, const std::string& options);

// The row for a model of `params` parameters (the size band decides; the
// GPU column is the guide's typical world, shown but not required).
const GuideRow& guide_row(double params);

// Position of `family` among the row's recommendations (num_recommended
// when it is not one of them) and on the ladder.
int32_t guide_rank(const GuideRow& row, Family family) noexcept;
int32_t ladder_rank(Family family) noexcept;

// "7B-13B parameters on 4-8 GPUs: FSDP FullShard (or FSDP + ZeRO-3)".
std::string describe(const GuideRow& row);

}  // namespace tessera::selectors
