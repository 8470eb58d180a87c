#include "tessera/core/store.hpp"

#include "tessera/core/tcp_store.hpp"

namespace tessera::store {

std::unique_ptr<Store> open(const Config& config) {
  switch (config.kind) {
    case Kind::kFile:
      return open_file(config);
    case Kind::kRedis:
      return open_redis(config);
    case Kind::kTcp:
      break;
  }
  return std::make_unique<TcpStoreClient>(config.host, config.port, config.ns, config.timeout_ms,
                                          config.source);
}

}  // namespace tessera::store
