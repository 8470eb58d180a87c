#include "waits.hpp"

#include <algorithm>
#include <utility>

namespace tessera::gloo_backend {

Waits::Watched::Watched(Waits* waits, gloo::transport::UnboundBuffer* buffer)
    : waits_(waits), buffer_(buffer) {
  if (waits_ != nullptr) waits_->add(buffer_);
}

Waits::Watched::Watched(Watched&& other) noexcept
    : waits_(std::exchange(other.waits_, nullptr)),
      buffer_(std::exchange(other.buffer_, nullptr)) {}

Waits::Watched& Waits::Watched::operator=(Watched&& other) noexcept {
  if (this != &other) {
    if (waits_ != nullptr) waits_->remove(buffer_);
    waits_ = std::exchange(other.waits_, nullptr);
    buffer_ = std::exchange(other.buffer_, nullptr);
  }
  return *this;
}

Waits::Watched::~Watched() {
  if (waits_ != nullptr) waits_->remove(buffer_);
}

void Waits::add(gloo::transport::UnboundBuffer* buffer) {
  const std::lock_guard<std::mutex> lock(mu_);
  buffers_.push_back(buffer);
  // A buffer handed to gloo after the interruption: its first wait ends at
  // once too.
  if (interrupted_) {
    buffer->abortWaitSend();
    buffer->abortWaitRecv();
  }
}

void Waits::remove(gloo::transport::UnboundBuffer* buffer) noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  const auto at = std::find(buffers_.begin(), buffers_.end(), buffer);
  if (at != buffers_.end()) buffers_.erase(at);
}

void Waits::interrupt() noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  interrupted_ = true;
  for (auto* buffer : buffers_) {
    buffer->abortWaitSend();
    buffer->abortWaitRecv();
  }
}

bool Waits::interrupted() const noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  return interrupted_;
}

WaitRegistry::Enlisted::Enlisted(WaitRegistry& registry, Waits& waits)
    : registry_(registry), waits_(waits) {
  const std::lock_guard<std::mutex> lock(registry_.mu_);
  registry_.running_.push_back(&waits_);
}

WaitRegistry::Enlisted::~Enlisted() {
  const std::lock_guard<std::mutex> lock(registry_.mu_);
  std::erase(registry_.running_, &waits_);
}

void WaitRegistry::interrupt_all() noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  for (auto* waits : running_) waits->interrupt();
}

}  // namespace tessera::gloo_backend
