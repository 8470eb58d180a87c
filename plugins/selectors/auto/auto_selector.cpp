// The `auto` selector (auto_selector.hpp).
#include "auto_selector.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "candidates.hpp"
#include "cost_model.hpp"
#include "guide.hpp"

namespace tessera::selectors {
namespace {

struct Settings {
  double headroom = 0.1;
  double noise = 0.1;
  int64_t trial_steps = 0;
  int64_t trials = 3;
  double gemm_flops = 0.0;
  std::string strategies;
};

Settings read_settings(const sdk::Options& opts) {
  Settings s;
  s.headroom = opts.get_float("headroom");
  s.noise = opts.get_float("noise");
  s.trial_steps = opts.get_int("trial_steps");
  s.trials = opts.get_int("trials");
  s.gemm_flops = opts.get_float("gemm_flops");
  s.strategies = opts.get_string("strategies");
  TESSERA_CHECK(s.headroom >= 0.0 && s.headroom < 1.0, TESSERA_ERR_INVALID_ARGUMENT,
                "auto: option 'headroom' = ", s.headroom, " must be in [0, 1)");
  TESSERA_CHECK(s.noise >= 0.0, TESSERA_ERR_INVALID_ARGUMENT, "auto: option 'noise' = ", s.noise,
                " must be at least 0");
  TESSERA_CHECK(s.trial_steps >= 0, TESSERA_ERR_INVALID_ARGUMENT,
                "auto: option 'trial_steps' = ", s.trial_steps, " must be at least 0");
  TESSERA_CHECK(s.trials >= 1, TESSERA_ERR_INVALID_ARGUMENT, "auto: option 'trials' = ", s.trials,
                " must be at least 1");
  TESSERA_CHECK(s.gemm_flops >= 0.0, TESSERA_ERR_INVALID_ARGUMENT,
                "auto: option 'gemm_flops' = ", s.gemm_flops, " must be at least 0");
  return s;
}

std::string fmt(const char* format, double v) {
  std::array<char, 64> buf{};
  std::snprintf(buf.data(), buf.size(), format, v);
  return buf.data();
}

// "28.3 MiB", "61.2 GiB".
std::string bytes_text(double b) {
  constexpr double kMiB = 1024.0 * 1024.0;
  constexpr double kGiB = kMiB * 1024.0;
  if (b >= kGiB) return fmt("%.1f GiB", b / kGiB);
  if (b >= kMiB / 10) return fmt("%.1f MiB", b / kMiB);
  return fmt("%.0f B", b);
}

std::string seconds_text(double s) { return fmt("%.3g s", s); }
std::string percent_text(double f) { return fmt("%.0f%%", f * 100.0); }

struct Scored {
  Candidate cand;
  std::optional<tessera_estimate> est;
  std::string refusal;
  bool fits = false;
  Prediction pred;
  std::optional<sdk::TrialResult> trial;
  std::string reason;

  [[nodiscard]] std::string name() const { return display_name(cand.strategy, cand.options); }
  [[nodiscard]] double step() const { return pred.step(); }
};

std::string parts_text(const Prediction& p) {
  std::string t = seconds_text(p.step()) + " per step (compute " + seconds_text(p.compute) +
                  ", communication " + seconds_text(p.comm);
  if (p.bubble > 0) t += ", bubble " + seconds_text(p.bubble);
  return t + ")";
}

class Ranking {
 public:
  Ranking(const sdk::SelectEnv& env, const Settings& s) : env_(env), s_(s) {
    budget_ = static_cast<double>(env.memory_budget());
    limit_ = budget_ * (1.0 - s.headroom);
    row_ = &guide_row(static_cast<double>(env.model().params()));
  }

  void estimate_all(const std::vector<Candidate>& cands, const Rates& rates) {
    for (const Candidate& c : cands) {
      Scored r;
      r.cand = c;
      sdk::CandidateEstimate ce = env_.estimate(c.strategy, c.options);
      if (ce.estimate) {
        r.est = ce.estimate;
        r.fits = static_cast<double>(ce.estimate->memory_total) <= limit_;
        r.pred = predict(*ce.estimate, rates);
      } else {
        r.refusal = ce.refusal.empty() ? "refused (no reason given)" : ce.refusal;
      }
      rows_.push_back(std::move(r));
    }
  }

  // Orders the rows: the choice, the other fitting rows by predicted time,
  // the rows over the budget by memory, the refused ones.
  void rank() {
    std::vector<size_t> fit;
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (rows_[i].fits) fit.push_back(i);
    }
    TESSERA_CHECK(!fit.empty(), TESSERA_ERR_INVALID_ARGUMENT, nothing_fits());
    std::stable_sort(fit.begin(), fit.end(), [&](size_t a, size_t b) { return faster(a, b); });
    fastest_ = fit.front();
    const double cutoff = rows_[fastest_].step() * (1.0 + s_.noise);
    chosen_ = fastest_;
    for (const size_t i : fit) {
      if (rows_[i].step() <= cutoff && preferred(i, chosen_)) chosen_ = i;
    }
    order_ = {chosen_};
    for (const size_t i : fit) {
      if (i != chosen_) order_.push_back(i);
    }
    std::vector<size_t> over;
    std::vector<size_t> refused;
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (rows_[i].fits) continue;
      (rows_[i].est ? over : refused).push_back(i);
    }
    std::stable_sort(over.begin(), over.end(), [&](size_t a, size_t b) {
      return rows_[a].est->memory_total < rows_[b].est->memory_total;
    });
    order_.insert(order_.end(), over.begin(), over.end());
    order_.insert(order_.end(), refused.begin(), refused.end());
    num_fit_ = fit.size();
  }

  // Runs the first `trials` fitting rows and chooses the measured fastest
  // whose peak is within the budget.
  void run_trials() {
    if (s_.trial_steps <= 0) return;
    const size_t n = std::min<size_t>(static_cast<size_t>(s_.trials), num_fit_);
    std::optional<size_t> best;
    for (size_t k = 0; k < n; ++k) {
      Scored& r = rows_[order_[k]];
      std::string why;
      r.trial = env_.trial(r.cand.strategy, r.cand.options, s_.trial_steps, &why);
      if (!r.trial) {
        trial_note_ = "trials unavailable (" + (why.empty() ? std::string("unsupported") : why) +
                      "); chosen by prediction";
        return;
      }
      if (static_cast<double>(r.trial->peak_bytes) > budget_) continue;
      if (!best || r.trial->seconds_per_step < rows_[*best].trial->seconds_per_step) {
        best = order_[k];
      }
    }
    if (!best) {
      trial_note_ = "no trial stayed within the budget; chosen by prediction";
      return;
    }
    trial_chosen_ = true;
    chosen_ = *best;
    std::vector<size_t> tried(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n));
    std::stable_sort(tried.begin(), tried.end(), [&](size_t a, size_t b) {
      return rows_[a].trial->seconds_per_step < rows_[b].trial->seconds_per_step;
    });
    std::rotate(tried.begin(), std::find(tried.begin(), tried.end(), chosen_),
                std::find(tried.begin(), tried.end(), chosen_) + 1);
    std::copy(tried.begin(), tried.end(), order_.begin());
  }

  void explain() {
    for (Scored& r : rows_) r.reason = reason_of(r);
  }

  void report() const {
    for (const size_t i : order_) {
      const Scored& r = rows_[i];
      sdk::SelectionRow row;
      row.strategy = r.cand.strategy;
      row.options = r.cand.options;
      row.estimate = r.est;
      row.fits = r.fits;
      row.chosen = i == chosen_;
      if (r.est) {
        row.step_seconds = r.step();
        row.compute_seconds = r.pred.compute;
        row.comm_seconds = r.pred.comm;
        row.bubble_seconds = r.pred.bubble;
      }
      if (r.trial) row.measured_seconds = r.trial->seconds_per_step;
      row.reason = r.reason;
      env_.report(row);
    }
  }

  [[nodiscard]] const Scored& chosen() const { return rows_[chosen_]; }

 private:
  [[nodiscard]] bool faster(size_t a, size_t b) const {
    if (rows_[a].step() != rows_[b].step()) return rows_[a].step() < rows_[b].step();
    return rows_[a].cand.order < rows_[b].cand.order;
  }

  // Among rows within noise: the guide's recommendation for the model's
  // size, then the least sharding, then the prediction.
  [[nodiscard]] bool preferred(size_t a, size_t b) const {
    const Family fa = rows_[a].cand.family;
    const Family fb = rows_[b].cand.family;
    if (guide_rank(*row_, fa) != guide_rank(*row_, fb)) {
      return guide_rank(*row_, fa) < guide_rank(*row_, fb);
    }
    if (ladder_rank(fa) != ladder_rank(fb)) return ladder_rank(fa) < ladder_rank(fb);
    return faster(a, b);
  }

  [[nodiscard]] std::string limit_text() const {
    if (s_.headroom <= 0.0) return "budget " + bytes_text(budget_);
    return "budget " + bytes_text(limit_) + " (" + bytes_text(budget_) + " less " +
           percent_text(s_.headroom) + " headroom)";
  }

  [[nodiscard]] std::string nothing_fits() const {
    std::string m = "auto: no candidate fits " + bytes_text(limit_) + " per rank (budget " +
                    bytes_text(budget_);
    if (*env_.budget_source() != '\0') m += std::string(" from ") + env_.budget_source();
    if (s_.headroom > 0.0) m += " minus headroom " + percent_text(s_.headroom);
    m += "):";
    const char* sep = " ";
    for (const Scored& r : rows_) {
      m += sep + r.name();
      m += r.est ? " needs " + bytes_text(static_cast<double>(r.est->memory_total))
                 : " refused: " + r.refusal;
      sep = ", ";
    }
    return m;
  }

  // The guide's recommendation and, when the choice is not it, why.
  [[nodiscard]] std::string guide_note(const Scored& chosen) const {
    const std::string guide = "the guide recommends " + describe(*row_);
    if (guide_rank(*row_, chosen.cand.family) < row_->num_recommended) {
      return "the guide's choice (" + describe(*row_) + ")";
    }
    std::optional<size_t> best;
    bool any = false;
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (guide_rank(*row_, rows_[i].cand.family) >= row_->num_recommended) continue;
      any = true;
      if (rows_[i].fits && (!best || faster(i, *best))) best = i;
    }
    if (!any) return guide + "; no such candidate is installed";
    if (!best) return guide + "; none of its candidates fits or runs here";
    const Scored& g = rows_[*best];
    return guide + "; its best candidate " + g.name() + " is predicted " +
           percent_text(g.step() / chosen.step() - 1.0) + " slower";
  }

  [[nodiscard]] std::string reason_of(const Scored& r) const {
    if (!r.est) return r.refusal;
    if (!r.fits) {
      return bytes_text(static_cast<double>(r.est->memory_total)) + " per rank > " + limit_text();
    }
    const Scored& c = rows_[chosen_];
    if (&r == &c) {
      std::string t;
      if (trial_chosen_) {
        t = "measured fastest in trial: " + seconds_text(r.trial->seconds_per_step) +
            " per step, peak " + bytes_text(static_cast<double>(r.trial->peak_bytes)) +
            " (predicted " + seconds_text(r.step()) + ")";
      } else if (&r == &rows_[fastest_]) {
        t = "fastest predicted: " + parts_text(r.pred);
      } else {
        const Scored& f = rows_[fastest_];
        t = "predicted " + parts_text(r.pred) + ", within " + percent_text(s_.noise) +
            " of the fastest (" + f.name() + ", " + seconds_text(f.step()) + ")";
        if (guide_rank(*row_, r.cand.family) == guide_rank(*row_, f.cand.family)) {
          t += "; start with data parallel, shard only when needed";
        }
      }
      t += "; " + guide_note(r);
      if (!trial_note_.empty()) t += "; " + trial_note_;
      return t;
    }
    std::string t;
    if (r.trial) {
      t = "measured " + seconds_text(r.trial->seconds_per_step) + " per step in trial";
      if (static_cast<double>(r.trial->peak_bytes) > budget_) {
        return t + ", peak " + bytes_text(static_cast<double>(r.trial->peak_bytes)) + " > budget " +
               bytes_text(budget_);
      }
      if (c.trial) {
        t += ", " + percent_text(r.trial->seconds_per_step / c.trial->seconds_per_step - 1.0) +
             " slower than the choice";
      }
      return t + " (predicted " + seconds_text(r.step()) + ")";
    }
    const double slower = r.step() / c.step() - 1.0;
    t = "predicted " + seconds_text(r.step()) + " per step, ";
    t += slower >= 0 ? percent_text(slower) + " slower than the choice"
                     : percent_text(-slower) + " faster than the choice";
    if (!trial_chosen_ && r.step() <= rows_[fastest_].step() * (1.0 + s_.noise)) {
      t += "; within noise, the choice is preferred (" + std::string(family_label(c.cand.family)) +
           ")";
    }
    return t;
  }

  const sdk::SelectEnv& env_;
  const Settings& s_;
  double budget_ = 0.0;
  double limit_ = 0.0;
  const GuideRow* row_ = nullptr;
  std::vector<Scored> rows_;
  std::vector<size_t> order_;
  size_t num_fit_ = 0;
  size_t fastest_ = 0;
  size_t chosen_ = 0;
  bool trial_chosen_ = false;
  std::string trial_note_;
};

}  // namespace

void AutoSelector::select(const sdk::Host& host, const sdk::Options& opts, sdk::SelectEnv& env) {
  const Settings s = read_settings(opts);
  TESSERA_CHECK(env.world_size() >= 1, TESSERA_ERR_INVALID_ARGUMENT, "auto: world size ",
                env.world_size(), " must be at least 1");
  TESSERA_CHECK(env.memory_budget() > 0, TESSERA_ERR_INVALID_ARGUMENT,
                "auto: memory budget per rank must be positive, got ", env.memory_budget(),
                " bytes");
  const auto strategies = chosen_strategies(env, s.strategies);
  const std::vector<Candidate> cands = make_candidates(env, strategies);
  std::string installed;
  for (const auto& i : env.strategies()) {
    installed += std::string(installed.empty() ? "" : ", ") + i.name;
  }
  std::string why;
  for (const tessera_strategy_info* info : strategies) {
    const std::string reason = why_no_candidate(env, *info);
    if (!reason.empty()) why += (why.empty() ? "" : "; ") + reason;
  }
  TESSERA_CHECK(!cands.empty(), TESSERA_ERR_INVALID_ARGUMENT, "auto: no candidate strategy for ",
                env.world_size(), " ranks", why.empty() ? "" : ": " + why,
                "; installed strategies: ", installed.empty() ? "none" : installed,
                " (a strategy takes part when it can estimate: strategy interface 2.3)");
  const Rates rates = make_rates(env, s.gemm_flops);
  host.debug("auto: compute ", rates.flops, " FLOP/s per rank (", rates.flops_source, "); links ",
             rates.intra_bandwidth, " B/s within a node, ", rates.inter_bandwidth,
             " B/s across nodes, latency ", rates.latency, " s (", rates.link_source, ")");
  Ranking ranking(env, s);
  ranking.estimate_all(cands, rates);
  ranking.rank();
  ranking.run_trials();
  ranking.explain();
  ranking.report();
  const Scored& c = ranking.chosen();
  host.debug("auto: chose ", c.name(), ": ", c.reason);
}

}  // namespace tessera::selectors
