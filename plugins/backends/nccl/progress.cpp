#include "progress.hpp"

#include <exception>
#include <utility>

#include "tessera/sdk/error.hpp"

namespace tessera::nccl_backend {
namespace {

std::string at_key(const std::string& group, uint64_t seq, int32_t rank) {
  return detail::concat(group, "/at/", seq, "/", rank);
}

std::string aborted_key(const std::string& group) { return group + "/aborted"; }

}  // namespace

sdk::Store* ProgressBoard::store_locked() {
  if (!opened_) {
    opened_ = true;
    try {
      store_ = open_();
    } catch (const std::exception& e) {
      trouble_ = e.what();
    }
  }
  return store_.get();
}

void ProgressBoard::arrived(const std::string& group, int32_t rank, uint64_t seq) {
  const std::lock_guard<std::mutex> lock(mu_);
  sdk::Store* store = store_locked();
  if (store == nullptr) return;
  try {
    store->set(at_key(group, seq, rank), {'1'});
  } catch (const std::exception& e) {
    trouble_ = e.what();
  }
}

std::vector<int32_t> ProgressBoard::absent(const std::string& group, int32_t size, int32_t self,
                                           uint64_t seq) {
  const std::lock_guard<std::mutex> lock(mu_);
  std::vector<int32_t> missing;
  sdk::Store* store = store_locked();
  if (store == nullptr) return missing;
  try {
    for (int32_t r = 0; r < size; ++r) {
      if (r != self && !store->has({at_key(group, seq, r)})) missing.push_back(r);
    }
  } catch (const std::exception& e) {
    trouble_ = e.what();
    missing.clear();
  }
  return missing;
}

void ProgressBoard::abort(const std::string& group, int32_t rank, const std::string& reason) {
  const std::lock_guard<std::mutex> lock(mu_);
  sdk::Store* store = store_locked();
  if (store == nullptr) return;
  try {
    const std::string key = aborted_key(group);
    const std::string text = detail::concat("rank ", rank, ": ", reason);
    (void)store->put_if_absent(key,
                               std::vector<char>(text.begin(), text.end()));  // the first stays
  } catch (const std::exception& e) {
    trouble_ = e.what();
  }
}

std::optional<std::string> ProgressBoard::aborted(const std::string& group) {
  const std::lock_guard<std::mutex> lock(mu_);
  sdk::Store* store = store_locked();
  if (store == nullptr) return std::nullopt;
  try {
    const std::string key = aborted_key(group);
    if (!store->has({key})) return std::nullopt;
    const std::vector<char> text = store->await(key, 1000, "the reason of an abort");
    return std::string(text.begin(), text.end());
  } catch (const std::exception& e) {
    trouble_ = e.what();
  }
  return std::nullopt;
}

std::string ProgressBoard::trouble() {
  const std::lock_guard<std::mutex> lock(mu_);
  return trouble_;
}

std::string absent_text(const std::vector<int32_t>& ranks) {
  if (ranks.empty()) return {};
  std::string text = ranks.size() == 1 ? " (rank " : " (ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return text + " never arrived)";
}

}  // namespace tessera::nccl_backend
