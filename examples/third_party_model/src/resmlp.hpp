// resmlp: a residual MLP classifier, a model plugin built outside the
// Tessera tree against the installed SDK only.
//
//   proj     h = x·Wp + bp                          x: the batch's features [B, input]
//   block<i> h = h + relu(h·W1 + b1)·W2 + b2        one unit per residual block
//   head     loss = Σ_rows cross-entropy(h·Wh + bh, target) × loss_scale
//
// The units do their own arithmetic (plain loops with double accumulators)
// and their own initialisation, and read the micro-batch only through
// sdk::model::BatchView. plugin.cpp declares the options and registers the
// model; gradcheck.cpp calls the units directly.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <tessera/sdk/model.hpp>

namespace resmlp {

namespace sdk = tessera::sdk;

// The shape of a resmlp (the [model] options; defaults as declared).
struct Config {
  int64_t input = 16;                   // features per example
  int64_t width = 32;                   // width of the residual stream
  std::vector<int64_t> hidden{64, 64};  // hidden width of each block (one block per entry)
  int64_t classes = 4;                  // number of classes
  double residual_init = 0.5;           // std of W2 × sqrt(hidden width)
};

// Throws tessera::Error (invalid argument) "key '<key>' ..."
// for a value out of range.
void check_config(const Config& config);

// The units: "proj", "block0".."block{k-1}", "head".
std::vector<std::unique_ptr<sdk::model::Unit>> build_units(const Config& config);

}  // namespace resmlp
