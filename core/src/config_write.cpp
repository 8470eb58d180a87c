// to_toml: the resolved configuration printed back as TOML, every key of
// every section with its value, in the order of docs/config.md.
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/config.hpp"
#include "toml_text.hpp"

namespace tessera {
namespace {

// Writes section headers and "key = literal" lines.
class Writer {
 public:
  void section(std::string_view name) {
    if (out_.tellp() > 0) out_ << '\n';
    out_ << '[' << name << "]\n";
  }
  // `literal` is already TOML text.
  void literal(std::string_view key, std::string_view literal) {
    out_ << detail::toml_key(key) << " = " << literal << '\n';
  }
  void text(std::string_view key, std::string_view value) {
    literal(key, detail::quote_toml_string(value));
  }
  void integer(std::string_view key, int64_t value) { literal(key, std::to_string(value)); }
  void number(std::string_view key, double value) { literal(key, detail::format_float(value)); }
  void boolean(std::string_view key, bool value) { literal(key, value ? "true" : "false"); }
  void strings(std::string_view key, const std::vector<std::string>& values) {
    toml::array array;
    for (const auto& value : values) array.push_back(value);
    literal(key, detail::toml_literal(array));
  }
  // Every entry of `table` (sub-tables as inline tables).
  void entries(const toml::table& table) {
    for (const auto& [key, value] : table) literal(key.str(), detail::toml_literal(value));
  }
  [[nodiscard]] std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

// [<section>] with the plugin's name, then [<section>.options], even empty.
void write_plugin(Writer& w, std::string_view section, const PluginChoice& choice,
                  const BackendSection* backend = nullptr) {
  w.section(section);
  w.text("name", choice.name);
  if (backend != nullptr) {
    w.number("timeout_s", backend->timeout_s);
    w.boolean("check_collectives", backend->check_collectives);
  }
  w.section(std::string(section) + ".options");
  w.entries(choice.options);
}

}  // namespace

std::string to_toml(const Config& c) {
  Writer w;
  w.section("run");
  w.integer("world_size", c.run.world_size);
  w.integer("steps", c.run.steps);
  // TOML integers are signed 64-bit; the loader accepts no larger seed.
  w.integer("seed", static_cast<int64_t>(c.run.seed));
  w.integer("log_every", c.run.log_every);
  w.text("metrics", c.run.metrics);
  w.text("log_level", c.run.log_level);
  // In bytes; 0 (detected) is the key left out.
  if (c.run.memory_per_rank > 0) w.text("memory_per_rank", std::to_string(c.run.memory_per_rank));
  // 0 (the default) is the key left out.
  if (c.run.threads_per_rank > 0) w.integer("threads_per_rank", c.run.threads_per_rank);
  if (c.run.device != ComputeDevice::cpu) {
    w.text("device", std::string(compute_device_name(c.run.device)));
  }
  if (c.run.precision != ComputePrecision::f32) {
    w.text("precision", std::string(compute_precision_name(c.run.precision)));
  }
  if (c.run.precision == ComputePrecision::f16) {
    w.number("loss_scale", c.run.loss_scale);
    w.integer("loss_scale_window", c.run.loss_scale_window);
  }

  w.section("plugins");
  std::vector<std::string> paths;
  for (const auto& path : c.plugins.paths) paths.push_back(path.string());
  w.strings("paths", paths);
  w.strings("allow", c.plugins.allow);

  write_plugin(w, "backend", c.backend, &c.backend);
  write_plugin(w, "strategy", c.strategy);
  if (c.compression) write_plugin(w, "compression", *c.compression);

  w.section("model");
  w.text("name", c.model.name);
  w.text("init", c.model.init);
  w.entries(c.model.params);

  w.section("data");
  // Only the keys the chosen kind and rule read: the others are refused.
  w.text("kind", c.data.kind);
  if (c.data.kind != "synthetic") w.text("path", c.data.path);
  w.integer("batch_size", c.data.batch_size);
  w.integer("micro_batches", c.data.micro_batches);
  if (c.data.kind == "tokens") w.integer("token_bytes", c.data.token_bytes);

  w.section("optimizer");
  w.text("name", c.optimizer.name);
  w.number("lr", c.optimizer.lr);
  w.number("weight_decay", c.optimizer.weight_decay);
  w.number("grad_clip", c.optimizer.grad_clip);
  w.integer("warmup_steps", c.optimizer.warmup_steps);
  if (c.optimizer.name == "momentum") w.number("momentum", c.optimizer.momentum);
  if (c.optimizer.name == "adam" || c.optimizer.name == "adamw") {
    w.number("beta1", c.optimizer.beta1);
    w.number("beta2", c.optimizer.beta2);
    w.number("eps", c.optimizer.eps);
  }

  w.section("checkpoint");
  w.text("dir", c.checkpoint.dir);
  w.integer("every", c.checkpoint.every);
  w.boolean("resume", c.checkpoint.resume);
  w.text("format", c.checkpoint.format);
  return w.str();
}

}  // namespace tessera
