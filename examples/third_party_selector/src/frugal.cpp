// frugal: a memory-first strategy selector, built outside the Tessera tree.
//
// The built-in selector `auto` looks for the FASTEST strategy that fits the
// memory budget. On a node shared with other jobs, speed is not what a
// polite tenant optimises: it wants to leave as much memory as possible to
// the others. `frugal` therefore chooses the candidate that needs the LEAST
// memory per rank among those that fit, and breaks ties by the bytes a rank
// sends per step (less traffic on the shared links). It never predicts
// step times; it reads only what each strategy's own `estimate` says.
//
// The host runs a selector when a configuration says
//
//   [strategy]
//   name = "auto"
//   [strategy.options]
//   selector = "frugal"   # every other key here is one of frugal's options
//
// and for `tessera select CONFIG --selector frugal`. It calls select() once,
// in one process, and hands the choice to every rank.
//
// The descriptor name comes from the compile definition FRUGAL_NAME (see
// CMakeLists.txt): built with -DFRUGAL_REPLACE_AUTO=ON the same code
// registers itself as `auto`, and a plugin directory searched before the
// built-in one makes it replace the built-in selector for every run whose
// strategy is "auto", without changing any configuration.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "tessera/sdk/selector.hpp"

#ifndef FRUGAL_NAME
#define FRUGAL_NAME "frugal"
#endif

namespace {

namespace sdk = tessera::sdk;

// The name this library registers under ("frugal", or "auto"); it starts
// every error message, so the user sees which selector refused.
constexpr const char* kName = FRUGAL_NAME;

// The options of [strategy.options] (besides `selector`, which the host
// takes). `tessera plugins --describe frugal` prints them; the host checks
// types and refuses keys not declared here before select() runs.
constexpr tessera_option_decl kFrugalOptions[] = {
    {"headroom", TESSERA_OPT_FLOAT, "0.2",
     "fraction of the memory budget per rank left free for the node's other tenants: a "
     "candidate fits when its predicted peak is at most budget x (1 - headroom)"},
    {"without_prefetch", TESSERA_OPT_BOOL, "true",
     "also propose `prefetch = false` for each strategy that declares a bool option `prefetch` "
     "defaulting to true (fewer parameters gathered at once: less memory, slower steps)"},
};

// ---------------------------------------------------------------------------
// Formatting: the reasons are read by people, in the run log and in the
// `tessera select` table.

// "819 B", "1.0 KiB", "28.3 MiB", "61.2 GiB".
std::string bytes_text(int64_t bytes) {
  const auto b = static_cast<double>(bytes);
  std::array<char, 32> buf{};
  if (b >= 1024.0 * 1024.0 * 1024.0) {
    std::snprintf(buf.data(), buf.size(), "%.1f GiB", b / (1024.0 * 1024.0 * 1024.0));
  } else if (b >= 1024.0 * 1024.0) {
    std::snprintf(buf.data(), buf.size(), "%.1f MiB", b / (1024.0 * 1024.0));
  } else if (b >= 1024.0) {
    std::snprintf(buf.data(), buf.size(), "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(buf.data(), buf.size(), "%lld B", static_cast<long long>(bytes));
  }
  return buf.data();
}

std::string percent(double fraction) {
  std::array<char, 16> buf{};
  std::snprintf(buf.data(), buf.size(), "%.0f%%", fraction * 100.0);
  return buf.data();
}

// A candidate as the user would write it: `zero3` or `zero3 (prefetch = false)`.
std::string label(const std::string& strategy, const std::string& options) {
  return options.empty() ? strategy : strategy + " (" + options + ")";
}

// Bytes one rank sends per step, over every communication axis.
int64_t sent_per_step(const tessera_estimate& e) {
  int64_t sum = 0;
  for (int32_t a = 0; a < std::min(e.num_axes, TESSERA_ESTIMATE_MAX_AXES); ++a) {
    sum += e.axes[a].bytes;
  }
  return sum;
}

// ---------------------------------------------------------------------------
// Candidates.

struct Candidate {
  std::string strategy;
  std::string options;  // TOML `key = value` pairs separated by ", "; "" = defaults

  std::optional<tessera_estimate> estimate;  // the strategy's estimate, or
  std::string refusal;                       // why the strategy cannot run it
  bool fits = false;
  std::string reason;

  [[nodiscard]] std::string name() const { return label(strategy, options); }
  [[nodiscard]] int64_t memory() const { return estimate->memory_total; }
  [[nodiscard]] int64_t sent() const { return sent_per_step(*estimate); }
};

// The declared bool option `prefetch` of a strategy, when it defaults to true.
bool prefetches_by_default(const tessera_strategy_info& info) {
  for (uint32_t i = 0; i < info.num_options && info.options != nullptr; ++i) {
    const tessera_option_decl& d = info.options[i];
    if (std::strcmp(d.key, "prefetch") == 0) {
      return d.type == TESSERA_OPT_BOOL && d.default_value != nullptr &&
             std::strcmp(d.default_value, "true") == 0;
    }
  }
  return false;
}

// Every installed strategy that can estimate (strategy interface 2.3),
// with its declared defaults, and, where the option exists, without
// prefetching. A strategy that cannot run this world or model (e.g. `none`
// on several ranks) refuses in its estimate; it is reported, not hidden.
std::vector<Candidate> propose(const sdk::SelectEnv& env, bool without_prefetch) {
  std::vector<Candidate> out;
  for (const tessera_strategy_info& info : env.strategies()) {
    if (info.can_estimate == 0) continue;
    Candidate defaults;
    defaults.strategy = info.name;
    out.push_back(defaults);
    if (without_prefetch && prefetches_by_default(info)) {
      Candidate lean = defaults;
      lean.options = "prefetch = false";
      out.push_back(lean);
    }
  }
  return out;
}

// The memory-first order: less memory per rank, then fewer bytes sent.
// Between candidates equal in both, the first proposed stays the choice
// (the search below replaces it only with a strictly leaner one).
bool leaner(const Candidate& a, const Candidate& b) {
  if (a.memory() != b.memory()) return a.memory() < b.memory();
  return a.sent() < b.sent();
}

}  // namespace

// ---------------------------------------------------------------------------
// The selector: one static function, registered below.

struct FrugalSelector {
  static void select(const sdk::Host& host, const sdk::Options& opts, sdk::SelectEnv& env) {
    // 1. Options and the budget. The host has already checked the types;
    //    the ranges are ours to check.
    const double headroom = opts.get_float("headroom");
    TESSERA_CHECK(headroom >= 0.0 && headroom < 1.0, TESSERA_ERR_INVALID_ARGUMENT, kName,
                  ": option 'headroom' = ", headroom, " must be in [0, 1)");
    TESSERA_CHECK(env.memory_budget() > 0, TESSERA_ERR_INVALID_ARGUMENT, kName,
                  ": the memory budget per rank must be positive, got ", env.memory_budget(),
                  " bytes");
    const int64_t budget = env.memory_budget();
    const auto limit = static_cast<int64_t>(static_cast<double>(budget) * (1.0 - headroom));
    std::string allowed = bytes_text(limit) + " allowed (budget " + bytes_text(budget);
    if (*env.budget_source() != '\0') allowed += std::string(" from ") + env.budget_source();
    allowed += " less " + percent(headroom) + " headroom)";

    // 2. Candidates, each estimated by its own strategy. env.estimate()
    //    checks the options text against the strategy's declarations and
    //    returns the strategy's refusal instead of throwing.
    std::vector<Candidate> cands = propose(env, opts.get_bool("without_prefetch"));
    TESSERA_CHECK(!cands.empty(), TESSERA_ERR_INVALID_ARGUMENT, kName,
                  ": no installed strategy can estimate its memory (strategy interface 2.3), "
                  "so there is nothing to choose from");
    for (Candidate& c : cands) {
      sdk::CandidateEstimate e = env.estimate(c.strategy, c.options);
      c.estimate = e.estimate;
      if (!c.estimate) c.refusal = e.refusal.empty() ? "refused (no reason given)" : e.refusal;
      c.fits = c.estimate && c.memory() <= limit;
    }

    // 3. The choice: the leanest candidate that fits. When none fits, the
    //    error lists what each one would need, so the user can size the
    //    budget (run.memory_per_rank) or the model.
    const Candidate* chosen = nullptr;
    for (const Candidate& c : cands) {
      if (c.fits && (chosen == nullptr || leaner(c, *chosen))) chosen = &c;
    }
    if (chosen == nullptr) {
      std::string m = std::string(kName) + ": no candidate fits " + allowed + " on " +
                      std::to_string(env.world_size()) + " ranks:";
      const char* sep = " ";
      for (const Candidate& c : cands) {
        m += sep + c.name() +
             (c.estimate ? " needs " + bytes_text(c.memory()) + " per rank"
                         : " refused: " + c.refusal);
        sep = "; ";
      }
      throw tessera::Error(TESSERA_ERR_INVALID_ARGUMENT, m);
    }

    // 4. One reason per candidate: why it was chosen, or why not.
    for (Candidate& c : cands) {
      if (!c.estimate) {
        c.reason = c.refusal;
      } else if (!c.fits) {
        c.reason = "needs " + bytes_text(c.memory()) + " per rank > " + allowed;
      } else if (&c == chosen) {
        c.reason = "least memory per rank: needs " + bytes_text(c.memory()) + " of " + allowed +
                   ", sends " + bytes_text(c.sent()) + " per step";
      } else if (c.memory() == chosen->memory() && c.sent() == chosen->sent()) {
        c.reason = "ties with the choice (same memory and traffic); the first proposed wins";
      } else if (c.memory() == chosen->memory()) {
        c.reason = "fits with the same memory per rank as the choice but sends " +
                   bytes_text(c.sent() - chosen->sent()) + " more per step";
      } else {
        c.reason = "fits (needs " + bytes_text(c.memory()) + " per rank) but takes " +
                   bytes_text(c.memory() - chosen->memory()) + " more than the choice";
      }
    }

    // 5. Report every candidate, best first: the choice, the others that
    //    fit and those over the budget from lean to heavy, then the refused.
    std::vector<const Candidate*> order;
    order.reserve(cands.size());
    for (const Candidate& c : cands) order.push_back(&c);
    std::stable_sort(order.begin(), order.end(), [&](const Candidate* a, const Candidate* b) {
      const auto rank = [&](const Candidate* c) {
        if (c == chosen) return 0;
        if (!c->estimate) return 3;
        return c->fits ? 1 : 2;
      };
      if (rank(a) != rank(b)) return rank(a) < rank(b);
      return a->estimate && b->estimate && leaner(*a, *b);
    });
    for (const Candidate* c : order) {
      sdk::SelectionRow row;
      row.strategy = c->strategy;
      row.options = c->options;
      row.estimate = c->estimate;
      row.fits = c->fits;
      row.chosen = c == chosen;
      row.reason = c->reason;  // step_seconds stays -1: frugal predicts no time
      env.report(row);
    }
    host.debug(kName, ": chose ", chosen->name(), ": ", chosen->reason);
  }
};

TESSERA_REGISTER_SELECTOR(FrugalSelector, FRUGAL_NAME, "0.1.0",
                          "example selector (examples/third_party_selector): the strategy that "
                          "needs the least memory per rank within the budget less headroom",
                          kFrugalOptions)
