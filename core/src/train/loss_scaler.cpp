#include "tessera/core/train/loss_scaler.hpp"

#include <cmath>

#include "tessera/sdk/error.hpp"

namespace tessera::train {

LossScaler::LossScaler(double initial, int64_t window) : scale_(initial), window_(window) {
  TESSERA_CHECK(std::isfinite(initial) && initial >= 1.0, TESSERA_ERR_INVALID_ARGUMENT,
                "loss scaling: run.loss_scale ", initial, " must be a finite number >= 1");
  TESSERA_CHECK(window >= 1, TESSERA_ERR_INVALID_ARGUMENT, "loss scaling: run.loss_scale_window ",
                window, " must be >= 1");
}

LossScaler::Change LossScaler::update(bool overflowed) {
  if (overflowed) {
    clean_ = 0;
    TESSERA_CHECK(scale_ / 2.0 >= kMinScale, TESSERA_ERR_INVALID_ARGUMENT,
                  "loss scaling: the f16 gradients overflow at every loss scale down to 2^-24 "
                  "(the last tried ",
                  scale_,
                  "): they do not fit f16 whatever the scale; train with run.precision = "
                  "\"bf16\" or \"f32\"");
    scale_ /= 2.0;
    return Change::lowered;
  }
  if (++clean_ < window_) return Change::kept;
  clean_ = 0;
  if (scale_ * 2.0 > kMaxScale) return Change::kept;
  scale_ *= 2.0;
  return Change::raised;
}

}  // namespace tessera::train
