// The tensors of a checkpoint file, and the comparison every multi-process
// test makes between a run's final state and its reference: per tensor,
// max |a - b| / max |b| within kTolerance.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace tessera::mptest {

// Tensor name -> its f32 values.
using Tensors = std::map<std::string, std::vector<float>>;

// Every tensor of one safetensors file.
Tensors tensors_of_file(const std::filesystem::path& file);

// Expects `actual` to hold the tensors of `expected`, each within kTolerance
// (max |a - b| / max |b|), and parameters as well as optimizer state.
// `what` starts every failure message.
void expect_close(const Tensors& actual, const Tensors& expected, const std::string& what);

}  // namespace tessera::mptest
