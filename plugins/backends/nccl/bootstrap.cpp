#include "bootstrap.hpp"

#include "tessera/sdk/error.hpp"

namespace tessera::nccl_backend {

std::vector<char> share_unique_id(sdk::Store& store, const std::string& prefix,
                                  const std::string& group, int32_t rank, int32_t root,
                                  size_t bytes, const std::function<std::vector<char>()>& make,
                                  int64_t timeout_ms) {
  const std::string key = prefix + "/unique_id";
  if (rank == root) {
    std::vector<char> id = make();
    TESSERA_CHECK(id.size() == bytes, TESSERA_ERR_INTERNAL, "nccl: the unique id of group '", group,
                  "' has ", id.size(), " bytes, expected ", bytes);
    TESSERA_CHECK(store.put_if_absent(key, id), TESSERA_ERR_INVALID_ARGUMENT,
                  "nccl: cannot write the unique id of group '", group, "': key '", key,
                  "' already exists in the ", store.description(),
                  " (a key of this run already exists: use another run_id)");
    return id;
  }
  std::vector<char> id =
      store.await(key, timeout_ms,
                  detail::concat("the NCCL unique id of group '", group, "' from rank ", root));
  TESSERA_CHECK(id.size() == bytes, TESSERA_ERR_MISMATCH, "nccl: the unique id of group '", group,
                "' read from key '", key, "' in the ", store.description(), " has ", id.size(),
                " bytes, expected ", bytes, " (another program wrote it? use another run_id)");
  return id;
}

}  // namespace tessera::nccl_backend
