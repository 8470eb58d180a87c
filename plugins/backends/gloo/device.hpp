// The TCP transport device: which local address every gloo pair of this
// process listens on and connects from.
#pragma once

#include <memory>
#include <string>

#include <gloo/transport/device.h>

#include "settings.hpp"

namespace tessera::gloo_backend {

// A created device and how its address was chosen (for logs and errors).
struct DeviceChoice {
  std::shared_ptr<gloo::transport::Device> device;
  std::string description;  // e.g. "interface lo" or "127.0.0.1 (MASTER_ADDR is loopback)"
};

// Picks the address, in this order: option `interface`; option `hostname`;
// 127.0.0.1 when MASTER_ADDR is unset or a loopback address (one machine);
// otherwise the local address the kernel would use to reach MASTER_ADDR, so
// that ranks on several machines listen on a routable address without any
// option. Throws Error(INVALID_ARGUMENT) naming the option or MASTER_ADDR
// when the address cannot be resolved or bound.
DeviceChoice make_device(const Settings& settings);

}  // namespace tessera::gloo_backend
