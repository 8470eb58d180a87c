// Candidate generation (candidates.hpp). Which variants a strategy gets is
// decided by what its declarations offer: a key it declares, and for a
// string option a value its default or help text names.
#include "candidates.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <sstream>

namespace tessera::selectors {
namespace {

const tessera_option_decl* find_decl(const tessera_strategy_info& info, const char* key) {
  for (uint32_t i = 0; i < info.num_options && info.options != nullptr; ++i) {
    if (std::strcmp(info.options[i].key, key) == 0) return &info.options[i];
  }
  return nullptr;
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// Whether `text` names `word` as a whole word.
bool names_word(const char* text, const std::string& word) {
  if (text == nullptr) return false;
  const std::string t(text);
  for (size_t at = t.find(word); at != std::string::npos; at = t.find(word, at + 1)) {
    const bool start = at == 0 || !word_char(t[at - 1]);
    const size_t end = at + word.size();
    if (start && (end == t.size() || !word_char(t[end]))) return true;
  }
  return false;
}

// The declared string option `key` takes `value`: its default or a value
// its help names.
bool offers(const tessera_strategy_info& info, const char* key, const std::string& value) {
  const tessera_option_decl* d = find_decl(info, key);
  if (d == nullptr || d->type != TESSERA_OPT_STRING) return false;
  const std::string def = d->default_value != nullptr ? d->default_value : "";
  return def == value || def == "\"" + value + "\"" || names_word(d->help, value);
}

bool declares_int(const tessera_strategy_info& info, const char* key) {
  const tessera_option_decl* d = find_decl(info, key);
  return d != nullptr && d->type == TESSERA_OPT_INT;
}

// Group sizes >= 2 and <= limit that divide `world`; only powers of two
// past 16 ranks.
std::vector<int32_t> split_sizes(int32_t world, int64_t limit) {
  std::vector<int32_t> sizes;
  for (int32_t s = 2; s <= world && s <= limit; ++s) {
    if (world % s != 0) continue;
    if (world > 16 && !std::has_single_bit(static_cast<uint32_t>(s))) continue;
    sizes.push_back(s);
  }
  return sizes;
}

std::string quoted(const std::string& v) { return "\"" + v + "\""; }

class Builder {
 public:
  explicit Builder(const sdk::SelectEnv& env) : env_(env) {}

  void add(const tessera_strategy_info& info, std::string options) {
    if (out_.size() >= kMaxCandidates) return;
    Candidate c;
    c.strategy = info.name;
    c.family = family_of(c.strategy, options);
    c.options = std::move(options);
    c.order = static_cast<int32_t>(out_.size());
    out_.push_back(std::move(c));
  }

  void fsdp(const tessera_strategy_info& info) {
    bool any = false;
    for (const char* v : {"full_shard", "shard_grad_op"}) {
      if (!offers(info, "sharding_strategy", v)) continue;
      add(info, std::string("sharding_strategy = ") + quoted(v));
      any = true;
    }
    if (!any) add(info, "");
  }

  void pipeline(const tessera_strategy_info& info) {
    if (!declares_int(info, "stages")) return add(info, "");
    const int64_t units = env_.model().num_units();
    const int64_t micro = env_.model().micro_batches();
    for (const int32_t s : split_sizes(env_.world_size(), units)) {
      for (const char* sched : {"gpipe", "1f1b", "interleaved"}) {
        if (!offers(info, "schedule", sched)) continue;
        // Interleaving needs two chunks per stage and whole rounds of
        // micro-batches; skip it where it cannot run.
        if (std::strcmp(sched, "interleaved") == 0 &&
            (units < 2 * static_cast<int64_t>(s) || micro % s != 0))
          continue;
        add(info, "stages = " + std::to_string(s) + ", schedule = " + quoted(sched));
      }
    }
  }

  void tensor(const tessera_strategy_info& info) {
    if (!declares_int(info, "size")) return add(info, "");
    for (const int32_t t : split_sizes(env_.world_size(), env_.ranks_per_node())) {
      for (const char* mode : {"tensor", "sequence"}) {
        if (!offers(info, "mode", mode)) continue;
        if (std::strcmp(mode, "sequence") == 0 && env_.model().seq_len() <= 0) continue;
        add(info, "size = " + std::to_string(t) + ", mode = " + quoted(mode));
      }
    }
  }

  void hybrid(const tessera_strategy_info& info) {
    if (!declares_int(info, "tp") || !declares_int(info, "pp") || !declares_int(info, "dp")) {
      return add(info, "");
    }
    const int32_t world = env_.world_size();
    const int64_t units = env_.model().num_units();
    for (const int32_t pp : split_sizes(world, units)) {
      for (const int32_t tp : split_sizes(world / pp, env_.ranks_per_node())) {
        const int32_t dp = world / (pp * tp);
        std::string mesh = "dp = " + std::to_string(dp) + ", pp = " + std::to_string(pp) +
                           ", tp = " + std::to_string(tp);
        // The default schedule (1f1b) needs a micro-batch per stage; with
        // fewer, gpipe is the schedule that runs.
        if (pp > 1 && env_.model().micro_batches() < pp && offers(info, "schedule", "gpipe")) {
          mesh += ", schedule = " + quoted("gpipe");
        }
        add(info, mesh);
        if (dp > 1 && offers(info, "dp_shard", "zero1")) {
          add(info, mesh + ", dp_shard = " + quoted("zero1"));
        }
      }
    }
  }

  std::vector<Candidate> take() { return std::move(out_); }

 private:
  const sdk::SelectEnv& env_;
  std::vector<Candidate> out_;
};

}  // namespace

std::string display_name(const std::string& strategy, const std::string& options) {
  return options.empty() ? strategy : strategy + " (" + options + ")";
}

std::vector<const tessera_strategy_info*> chosen_strategies(const sdk::SelectEnv& env,
                                                            const std::string& only) {
  std::vector<const tessera_strategy_info*> out;
  std::string installed;
  for (const auto& s : env.strategies()) {
    installed += std::string(installed.empty() ? "" : ", ") + s.name;
  }
  std::stringstream list(only);
  std::string name;
  while (std::getline(list, name, ',')) {
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name.empty()) continue;
    const tessera_strategy_info* info = env.strategy(name);
    TESSERA_CHECK(info != nullptr, TESSERA_ERR_INVALID_ARGUMENT,
                  "auto: option 'strategies' names '", name,
                  "', which is not installed; installed: ", installed.empty() ? "none" : installed);
    if (std::find(out.begin(), out.end(), info) == out.end()) out.push_back(info);
  }
  if (!out.empty()) return out;
  for (const auto& s : env.strategies()) {
    if (s.can_estimate != 0) out.push_back(&s);
  }
  return out;
}

std::string why_no_candidate(const sdk::SelectEnv& env, const tessera_strategy_info& info) {
  const std::string name = info.name;
  if (!make_candidates(env, {&info}).empty()) return "";
  if (info.can_estimate == 0) return name + " cannot estimate (strategy interface 2.3)";
  if (name == "async_sgd") {
    return "async_sgd is never a candidate (asynchronous updates are not exact; ddp trains as it "
           "does at staleness 0)";
  }
  if (name == "none") return "none trains on a single rank";
  return name + " has no group size or stage count that fits " + std::to_string(env.world_size()) +
         " ranks";
}

std::vector<Candidate> make_candidates(
    const sdk::SelectEnv& env, const std::vector<const tessera_strategy_info*>& strategies) {
  // Proposed in ladder order (replicated first), so generation order is a
  // fair last tie-break; strategies the tables do not know come last.
  std::vector<const tessera_strategy_info*> sorted = strategies;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    return ladder_rank(family_of(a->name, "")) < ladder_rank(family_of(b->name, ""));
  });
  Builder b(env);
  for (const tessera_strategy_info* info : sorted) {
    const std::string name = info->name;
    if (name == "none") {
      if (env.world_size() == 1) b.add(*info, "");
    } else if (name == "async_sgd") {
      // Not a candidate: asynchronous updates are not exact (it trains as
      // ddp only at staleness 0, where ddp does the same with no server).
    } else if (name == "fsdp") {
      b.fsdp(*info);
    } else if (name == "pipeline") {
      b.pipeline(*info);
    } else if (name == "tensor") {
      b.tensor(*info);
    } else if (name == "hybrid") {
      b.hybrid(*info);
    } else {
      b.add(*info, "");
    }
  }
  return b.take();
}

}  // namespace tessera::selectors
