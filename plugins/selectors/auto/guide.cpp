// The guide's lookups (guide.hpp).
#include "guide.hpp"

#include <algorithm>
#include <iterator>
#include <sstream>

namespace tessera::selectors {

const char* family_label(Family family) noexcept {
  switch (family) {
    case Family::kDataParallel:
      return "DDP";
    case Family::kShardGradOp:
      return "FSDP ShardGradOp";
    case Family::kFullShard:
      return "FSDP FullShard";
    case Family::kZero3:
      return "FSDP + ZeRO-3";
    case Family::kModelParallel:
      return "Pipeline / Tensor";
    case Family::kMeshSharded:
      return "FSDP + Pipeline + Tensor";
    case Family::kOther:
      break;
  }
  return "other";
}

Family family_of(const std::string& strategy, const std::string& options) {
  for (const FamilyRule& rule : kFamilyRules) {
    if (strategy != rule.strategy) continue;
    if (rule.key == nullptr) return rule.family;
    const std::string set = std::string(rule.key) + " = \"" + rule.value + "\"";
    if (options.find(set) != std::string::npos) return rule.family;
  }
  return Family::kOther;
}

const GuideRow& guide_row(double params) {
  for (const GuideRow& row : kGuide) {
    if (params >= row.min_params && params < row.max_params) return row;
  }
  return kGuide[std::size(kGuide) - 1];
}

int32_t guide_rank(const GuideRow& row, Family family) noexcept {
  for (int32_t i = 0; i < row.num_recommended; ++i) {
    if (row.recommended.at(static_cast<size_t>(i)) == family) return i;
  }
  return row.num_recommended;
}

int32_t ladder_rank(Family family) noexcept {
  const auto* it = std::find(kLadder.begin(), kLadder.end(), family);
  return static_cast<int32_t>(std::distance(kLadder.begin(), it));
}

std::string describe(const GuideRow& row) {
  std::ostringstream out;
  out << row.size_label << " parameters on " << row.min_ranks;
  if (row.max_ranks > 0) {
    out << "-" << row.max_ranks;
  } else {
    out << "+";
  }
  out << " GPUs: " << family_label(row.recommended[0]);
  if (row.num_recommended > 1) out << " (or " << family_label(row.recommended[1]) << ")";
  return out.str();
}

}  // namespace tessera::selectors
