#include "inner_strategy.hpp"

#include <cstddef>

#include "tessera/sdk/error.hpp"

namespace tessera::strategies::elastic {

InnerPlugin InnerPlugin::find(const sdk::Host& host, const std::string& name,
                              const std::string& options) {
  const tessera_host_api* api = host.raw();
  TESSERA_CHECK(api != nullptr &&
                    api->struct_size >= offsetof(tessera_host_api, find_strategy) + sizeof(void*) &&
                    api->find_strategy != nullptr,
                TESSERA_ERR_UNSUPPORTED,
                "elastic needs a host that finds other strategy plugins (host ABI 1.6)");
  TESSERA_CHECK(name != "elastic", TESSERA_ERR_INVALID_ARGUMENT,
                "inner = \"elastic\": elastic wraps a data-parallel strategy, not itself");
  InnerPlugin p;
  p.name = name;
  const tessera_status status = api->find_strategy(api->ctx, name.c_str(), options.c_str(), &p.api,
                                                   &p.host, &p.options, &p.version);
  if (status != TESSERA_OK) {
    const char* why = api->last_error(api->ctx);
    throw Error(TESSERA_ERR_INVALID_ARGUMENT,
                detail::concat("inner = \"", name, "\", inner_options = \"", options,
                               "\": ", why != nullptr ? why : status_name(status)));
  }
  TESSERA_CHECK((p.version >> 16U) == TESSERA_STRATEGY_API_MAJOR, TESSERA_ERR_INVALID_ARGUMENT,
                "inner = \"", name, "\": strategy interface ", p.version >> 16U, ".",
                p.version & 0xffffU, ", this plugin speaks ", TESSERA_STRATEGY_API_MAJOR, ".x");
  // Elastic hands the step's arguments through whole: the inner strategy
  // itself must unscale and skip under f16's loss scaling.
  TESSERA_CHECK(host.compute_precision() != TESSERA_F16 || (p.version & 0xffffU) >= 6U,
                TESSERA_ERR_UNSUPPORTED, "inner = \"", name, "\": strategy interface ",
                p.version >> 16U, ".", p.version & 0xffffU,
                " has no loss scaling; run.precision = \"f16\" needs 2.6");
  return p;
}

void InnerPlugin::check(int32_t world_size) const {
  const tessera_status status = api->check(host, options, world_size);
  if (status == TESSERA_OK) return;
  const char* why = host->last_error(host->ctx);
  throw Error(status, detail::concat("inner strategy '", name,
                                     "': ", why != nullptr ? why : status_name(status)));
}

InnerStrategy::InnerStrategy(const InnerPlugin& plugin, const tessera_strategy_env& env)
    : plugin_(plugin) {
  layout_.struct_size = sizeof layout_;
  layout_.data_rank = 0;
  layout_.data_size = 1;
  tessera_strategy* handle = nullptr;
  const tessera_status status =
      plugin_.api->create(plugin_.host, plugin_.options, &env, &handle, &layout_);
  if (status == TESSERA_OK) handle_ = handle;
  sdk::detail::check_host_call(sdk::Host(plugin_.host), status, what("create").c_str());
  TESSERA_CHECK(handle_ != nullptr, TESSERA_ERR_INTERNAL, what("create"), ": no strategy");
}

InnerStrategy::~InnerStrategy() {
  if (handle_ != nullptr) plugin_.api->destroy(handle_);
}

std::string InnerStrategy::what(const char* call) const {
  return detail::concat("inner strategy '", plugin_.name, "' ", call);
}

void InnerStrategy::load(const tessera_state_reader& reader) {
  sdk::detail::check_host_call(sdk::Host(plugin_.host), plugin_.api->load(handle_, &reader),
                               what("load").c_str());
}

tessera_step_result InnerStrategy::step(const tessera_step_args& args) {
  tessera_step_result result{};
  result.struct_size = sizeof result;
  sdk::detail::check_host_call(sdk::Host(plugin_.host), plugin_.api->step(handle_, &args, &result),
                               what("step").c_str());
  return result;
}

void InnerStrategy::save(const tessera_state_writer& writer) {
  sdk::detail::check_host_call(sdk::Host(plugin_.host), plugin_.api->save(handle_, &writer),
                               what("save").c_str());
}

}  // namespace tessera::strategies::elastic
