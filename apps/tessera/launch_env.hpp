// The environment `tessera launch` gives each rank, following torchrun's
// conventions, and the values it has to choose itself (a free master port,
// a run id, a private rendezvous directory).
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace tessera::cli {

// Where this launcher's ranks sit in the whole job.
struct LaunchTopology {
  int nproc_per_node = 1;      // ranks started by this launcher (LOCAL_WORLD_SIZE)
  int nnodes = 1;              // launchers taking part (one per node)
  int node_rank = 0;           // this launcher's index among them (GROUP_RANK)
  std::string master_addr;     // MASTER_ADDR
  int master_port = 0;         // MASTER_PORT
  std::string run_id;          // TESSERA_RUN_ID
  std::string rendezvous_dir;  // TESSERA_RENDEZVOUS_DIR; empty: not set
};

// The variables of local rank `local_rank` (0 <= local_rank <
// nproc_per_node), in a fixed order: RANK = node_rank * nproc_per_node +
// local_rank, WORLD_SIZE = nnodes * nproc_per_node, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TESSERA_RUN_ID and,
// when the topology has one, TESSERA_RENDEZVOUS_DIR.
std::vector<std::pair<std::string, std::string>> rank_variables(const LaunchTopology& topology,
                                                                int local_rank);

// `base` ("NAME=VALUE" entries, as in environ) with every variable of
// `variables` set: entries of the same name are dropped from `base` and the
// new ones appended; everything else passes through in its order.
std::vector<std::string> merge_environment(
    const std::vector<std::string>& base,
    const std::vector<std::pair<std::string, std::string>>& variables);

// This process's environment as "NAME=VALUE" entries.
std::vector<std::string> current_environment();

// A TCP port that is free on `address` right now: binds port 0 on it and
// returns the port the system chose (the socket is closed again, so another
// process may take it before the ranks do, as with any launcher doing this).
// Throws tessera::Error naming the address if it does not resolve or no
// socket can be bound on it.
int find_free_port(const std::string& address);

// A fresh random run id: 16 lowercase hex digits.
std::string random_run_id();

// A private directory (mode 0700) made with mkdtemp under $TMPDIR, or /tmp
// when TMPDIR is unset or empty, and removed with everything in it when the
// object is destroyed. Throws tessera::Error naming the parent directory if it
// cannot be created.
class RendezvousDir {
 public:
  RendezvousDir();
  RendezvousDir(const RendezvousDir&) = delete;
  RendezvousDir& operator=(const RendezvousDir&) = delete;
  ~RendezvousDir();

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tessera::cli
