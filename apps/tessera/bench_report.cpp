#include "bench_report.hpp"

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "bench_buffer.hpp"
#include "tessera/sdk/dtype.hpp"
#include "tessera/sdk/error.hpp"

namespace tessera::cli {

namespace {

// The table's columns; with --compare-raw four more follow #wrong.
std::vector<Column> bench_columns(bool compare_raw) {
  std::vector<Column> columns{
      {"size(B)", Align::kRight, 12},     {"count", Align::kRight, 12},
      {"type", Align::kRight, 5},         {"redop", Align::kRight, 6},
      {"time(us)", Align::kRight, 10},    {"algbw(GB/s)", Align::kRight, 11},
      {"busbw(GB/s)", Align::kRight, 11}, {"#wrong", Align::kRight, 7}};
  if (compare_raw) {
    columns.push_back({"raw(us)", Align::kRight, 10});
    columns.push_back({"tessera/raw", Align::kRight, 11});
    columns.push_back({"overhead(us)", Align::kRight, 12});
    columns.push_back({"#wrong(raw)", Align::kRight, 11});
  }
  return columns;
}

// time / raw time, or "inf" when the raw time is zero.
std::string ratio_text(const BenchRow& r) {
  return r.raw_time_us > 0.0 ? fmt::format("{:.3f}", r.time_us / r.raw_time_us) : "inf";
}

std::string redop_text(const BenchSpec& spec) {
  return op_reduces(spec.op) ? std::string(reduce_op_name(spec.redop)) : "none";
}

// The header's device: rank 0's; process ranks on CUDA each use their own
// LOCAL_RANK's device.
std::string device_header(const tessera_device& device, int ranks, bool thread_ranks) {
  std::string text = device_text(device);
  if (device.type == TESSERA_DEVICE_CUDA && !thread_ranks && ranks > 1) {
    text += " (rank 0; every rank on the device of its LOCAL_RANK)";
  }
  return text;
}

}  // namespace

TextBenchReporter::TextBenchReporter(BenchHeader header, std::ostream& out)
    : header_(std::move(header)), out_(out), table_(bench_columns(header_.spec.compare_raw)) {}

void TextBenchReporter::begin(const BenchPlan& plan, bool thread_ranks) {
  ranks_ = plan.ranks;
  uint64_t largest = 0;
  for (const auto& s : plan.sizes) largest = std::max(largest, s.bytes);
  memcpy_ = measure_memcpy_rate(largest);
  if (!header_.csv_path.empty()) open_csv();
  print_header(plan, thread_ranks);
}

void TextBenchReporter::print_header(const BenchPlan& plan, bool thread_ranks) {
  const BenchSpec& s = header_.spec;
  out_ << "# tessera bench collectives\n"
       << fmt::format("# backend: {} ({} ranks, {})  op: {}  dtype: {}  redop: {}\n",
                      header_.backend, plan.ranks,
                      thread_ranks ? "threads of one process" : "one per process", coll_name(s.op),
                      dtype_name(s.dtype), redop_text(s))
       << fmt::format("# device: {}\n", device_header(s.device, plan.ranks, thread_ranks))
       << fmt::format(
              "# iters: {}  warmup: {}  timeout: {} s  check: every rank vs host reference\n",
              s.iters, s.warmup, header_.timeout_s);
  if (s.compare_raw) {
    out_ << fmt::format(
        "# compare-raw: also the backend's raw library call on the same buffers, {} warm-up "
        "each, then {} rounds of {} timed iterations per path in alternating order\n"
        "# compare-raw: time(us) and raw(us) are each path's best round, overhead = time - raw\n",
        s.warmup, kCompareRounds, s.iters);
  }
  out_ << fmt::format("# memcpy rate: {:.2f} GB/s (single thread, {} B buffers, best of {})\n",
                      memcpy_.gb_per_s, memcpy_.bytes, memcpy_.repetitions);
  for (const auto& p : plan.sizes) {
    if (p.bytes != p.requested) {
      out_ << fmt::format("# note: size {} B rounded down to {} B (a multiple of {} B)\n",
                          p.requested, p.bytes, plan.unit);
    }
  }
  for (const uint64_t d : plan.dropped) {
    out_ << fmt::format("# note: size {} B skipped: smaller than {} B\n", d, plan.unit);
  }
  out_ << table_.format_title() << '\n' << std::flush;
}

void TextBenchReporter::open_csv() {
  csv_.emplace(header_.csv_path, std::ios::out | std::ios::trunc);
  if (!*csv_) {
    const std::string why = std::generic_category().message(errno);
    csv_.reset();
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                "cannot write CSV file '" + header_.csv_path + "': " + why);
  }
  *csv_
      << "backend,ranks,op,size_bytes,count,type,redop,device,time_us,algbw_gbps,busbw_gbps,wrong,"
         "memcpy_gbps"
      << (header_.spec.compare_raw ? ",raw_time_us,tessera_raw_ratio,overhead_us,raw_wrong\n"
                                   : "\n");
}

void TextBenchReporter::row(const BenchRow& r) {
  const BenchSpec& s = header_.spec;
  rows_.push_back(r);
  total_wrong_ += r.wrong;
  raw_wrong_ += r.raw_wrong;  // 0 without --compare-raw
  std::vector<std::string> cells{std::to_string(r.bytes),
                                 std::to_string(r.count),
                                 std::string(dtype_name(s.dtype)),
                                 redop_text(s),
                                 fmt::format("{:.2f}", r.time_us),
                                 fmt::format("{:.3f}", r.algbw_gbps),
                                 fmt::format("{:.3f}", r.busbw_gbps),
                                 std::to_string(r.wrong)};
  if (s.compare_raw) {
    cells.push_back(fmt::format("{:.2f}", r.raw_time_us));
    cells.push_back(ratio_text(r));
    cells.push_back(fmt::format("{:.2f}", r.time_us - r.raw_time_us));
    cells.push_back(std::to_string(r.raw_wrong));
  }
  out_ << table_.format_row(cells) << '\n' << std::flush;
  if (csv_) {
    *csv_ << fmt::format("{},{},{},{},{},{},{},{},{:.3f},{:.4f},{:.4f},{},{:.4f}", header_.backend,
                         ranks_, coll_name(s.op), r.bytes, r.count, dtype_name(s.dtype),
                         redop_text(s), device_text(s.device), r.time_us, r.algbw_gbps,
                         r.busbw_gbps, r.wrong, memcpy_.gb_per_s);
    if (s.compare_raw) {
      *csv_ << fmt::format(",{:.3f},{},{:.3f},{}", r.raw_time_us, ratio_text(r),
                           r.time_us - r.raw_time_us, r.raw_wrong);
    }
    *csv_ << '\n' << std::flush;
    if (!*csv_) {
      throw Error(TESSERA_ERR_INTERNAL, "writing CSV file '" + header_.csv_path +
                                            "' failed: " + std::generic_category().message(errno));
    }
  }
}

void TextBenchReporter::end() {
  if (rows_.empty()) return;
  auto pick = std::find_if(rows_.begin(), rows_.end(),
                           [](const BenchRow& r) { return r.bytes == kRatioBytes; });
  if (pick == rows_.end()) {
    pick = std::max_element(rows_.begin(), rows_.end(),
                            [](const BenchRow& a, const BenchRow& b) { return a.bytes < b.bytes; });
  }
  if (memcpy_.gb_per_s > 0.0) {
    out_ << fmt::format("# busbw / memcpy rate at {} B: {:.3f} / {:.2f} GB/s = {:.2f}\n",
                        pick->bytes, pick->busbw_gbps, memcpy_.gb_per_s,
                        pick->busbw_gbps / memcpy_.gb_per_s);
  }
  if (header_.spec.compare_raw) {
    out_ << fmt::format("# tessera / raw at {} B: {:.2f} / {:.2f} us = {} (overhead {:.2f} us)\n",
                        pick->bytes, pick->time_us, pick->raw_time_us, ratio_text(*pick),
                        pick->time_us - pick->raw_time_us);
  }
  const uint64_t all_wrong = total_wrong_ + raw_wrong_;
  out_ << fmt::format("# #wrong total: {}", all_wrong);
  if (header_.spec.compare_raw) {
    out_ << fmt::format(" (tessera {}, raw {})", total_wrong_, raw_wrong_);
  }
  out_ << (all_wrong == 0 ? " (OK)\n" : "\n");
  out_ << std::flush;
  if (csv_) csv_->close();
}

}  // namespace tessera::cli
