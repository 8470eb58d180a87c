// Writes the sample checkpoint that read_safetensors.py checks: one tensor of
// every dtype (plus a scalar and an empty one) with known sums, and metadata.
// Usage: tessera_checkpoint_sample FILE
#include <cstdio>
#include <exception>
#include <vector>

#include "tessera/core/safetensors.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  try {
    using tessera::bfloat16;
    using tessera::half;
    const std::vector<float> embed = {1, 2, 3, 4, 5, 6};
    const std::vector<double> scale = {0.5, 0.25};
    const std::vector<half> w16 = {tessera::to_half(1), tessera::to_half(2), tessera::to_half(3),
                                   tessera::to_half(-0.5F)};
    const std::vector<bfloat16> wbf = {tessera::to_bfloat16(1.5F), tessera::to_bfloat16(2.5F)};
    const std::vector<int64_t> position = {123456789012};
    const std::vector<int32_t> seed = {-1, 2, 40};
    const std::vector<uint8_t> mask = {1, 2, 3, 4, 5};
    tessera::SafetensorsWriter writer;
    writer.add<float>("embed.weight", {2, 3}, embed);
    writer.add<double>("block0.scale", {2}, scale);
    writer.add<half>("block0.w16", {4}, w16);
    writer.add<bfloat16>("block0.wbf", {2}, wbf);
    writer.add<int64_t>("data.position", {}, position);
    writer.add<int32_t>("rng.seed", {3}, seed);
    writer.add<uint8_t>("head.mask", {5}, mask);
    writer.add("head.empty", TESSERA_F32, {0, 4}, nullptr);
    writer.set_metadata("step", "17");
    writer.set_metadata("format", "pt");
    writer.save(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
