#include "run_fixture.hpp"

#include <unistd.h>

#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#ifndef TESSERA_TRAIN_PLUGIN_DIR
#error "TESSERA_TRAIN_PLUGIN_DIR must name the build tree's plugin directory"
#endif
#ifndef TESSERA_TRAIN_FIXTURE_DIR
#error "TESSERA_TRAIN_FIXTURE_DIR must name the directory of the test plugins"
#endif

namespace tessera::test {

const PluginRegistry& plugins() {
  static const std::unique_ptr<PluginRegistry> registry = [] {
    auto r = std::make_unique<PluginRegistry>();
    r->scan({TESSERA_TRAIN_PLUGIN_DIR});
    return r;
  }();
  return *registry;
}

const PluginRegistry& with_fixtures() {
  static const std::unique_ptr<PluginRegistry> registry = [] {
    auto r = std::make_unique<PluginRegistry>();
    r->scan({TESSERA_TRAIN_PLUGIN_DIR, TESSERA_TRAIN_FIXTURE_DIR});
    return r;
  }();
  return *registry;
}

bool has_strategy(const std::string& name) {
  return plugins().find(TESSERA_KIND_STRATEGY, name) != nullptr;
}

Config make_config(const std::string& text, const std::vector<std::string>& overrides) {
  return parse_config(text, "run.toml", overrides);
}

std::string mlp_toml(const std::string& strategy, int world_size, int steps) {
  std::ostringstream t;
  t << "[run]\nworld_size = " << world_size << "\nsteps = " << steps
    << "\nseed = 42\nlog_every = 1\n"
    << "[strategy]\nname = \"" << strategy << "\"\n"
    << "[model]\nname = \"mlp\"\ninput = 8\nhidden = [16]\nclasses = 4\n"
    << "[data]\nkind = \"synthetic\"\nbatch_size = 16\n"
    << "[optimizer]\nname = \"adamw\"\nlr = 0.01\nweight_decay = 0.01\n";
  return t.str();
}

std::string gpt_toml(const std::string& strategy, int world_size, int steps) {
  std::ostringstream t;
  t << "[run]\nworld_size = " << world_size << "\nsteps = " << steps
    << "\nseed = 7\nlog_every = 2\n"
    << "[strategy]\nname = \"" << strategy << "\"\n"
    << "[model]\nname = \"gpt\"\nlayers = 1\nd_model = 16\nheads = 2\nseq_len = 8\nvocab = 32\n"
    << "[data]\nkind = \"synthetic\"\nbatch_size = 8\n"
    << "[optimizer]\nname = \"adamw\"\nlr = 0.01\ngrad_clip = 1.0\nwarmup_steps = 2\n";
  return t.str();
}

ScratchDir::ScratchDir() {
  std::random_device rd;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string test = info != nullptr ? info->name() : "test";
  path_ = std::filesystem::temp_directory_path() /
          ("tessera_train_" + test + "_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
  std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void expect_same_state(const train::CollectedState& a, const train::CollectedState& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, tensor] : a.tensors) {
    ASSERT_EQ(b.tensors.count(name), 1U) << "missing tensor " << name;
    EXPECT_EQ(tensor.shape, b.tensors.at(name).shape) << name;
    const std::vector<float> x = a.full(name);
    const std::vector<float> y = b.full(name);
    ASSERT_EQ(x.size(), y.size()) << name;
    size_t differing = 0;
    for (size_t i = 0; i < x.size(); ++i) differing += x[i] != y[i] ? 1 : 0;
    EXPECT_EQ(differing, 0U) << name << ": " << differing << " of " << x.size()
                             << " elements differ";
  }
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace tessera::test
