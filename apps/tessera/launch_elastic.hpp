// Elastic launches (`tessera launch --nnodes MIN:MAX --max-restarts K`):
// the launchers of a job meet in rounds through a TCP store that one of them
// serves on --master-addr:--master-port. A round closes with MIN to MAX
// launchers (nodes); each starts its ranks in a world of that many nodes.
// When a rank of any node fails, every launcher stops its ranks, and the
// launchers still alive, with any that arrived meanwhile, meet in the next
// round and start the command again at the new world size, up to K times.
// The command resumes from its own checkpoints (`tessera train` with
// `checkpoint.resume = true`).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch_env.hpp"

namespace tessera::store {
class TcpStoreClient;
}  // namespace tessera::store

namespace tessera::cli {

struct ElasticSettings {
  int min_nodes = 1;
  int max_nodes = 1;
  int max_restarts = 0;
  int nproc_per_node = 1;
  std::string master_addr;  // the rendezvous store: --master-addr
  int master_port = 0;      // --master-port
  std::string run_id;       // key namespace of the rendezvous
  // How long a round waits for MIN nodes, and how long it stays open for
  // more once MIN have joined (it closes at once with MAX).
  std::chrono::milliseconds join_timeout{300000};
  std::chrono::milliseconds last_call{3000};
};

// This launcher's place in one round.
struct RoundAssignment {
  int round = 0;            // 0 for the first start, then one more per restart
  int node = 0;             // this launcher's index in the round (GROUP_RANK)
  int nodes = 1;            // launchers in the round
  LaunchTopology topology;  // what its ranks are told (MASTER_* of the round)
  // Against the round before (empty in round 0): its launchers that are not
  // in this round, and this round's that were not in it, as "node K (host
  // pid P)" with K the node index in the round they were in.
  std::vector<std::string> left;
  std::vector<std::string> joined;
};

// One launcher's side of the rendezvous. The first launcher on the master
// address starts the store there, in a process of its own that outlives
// it (any launcher may be lost) and stops once no launcher has been
// connected for a few seconds; the others connect to it. Not thread-safe.
class ElasticRendezvous {
 public:
  using Log = std::function<void(const std::string&)>;
  // Returns true when the launcher should give up waiting (SIGINT/SIGTERM).
  using Interrupted = std::function<bool()>;

  // Throws tessera::Error when the store can neither be served nor reached
  // (naming the address and the timeout), or what answers is not a store.
  ElasticRendezvous(ElasticSettings settings, Log log);
  ElasticRendezvous(const ElasticRendezvous&) = delete;
  ElasticRendezvous& operator=(const ElasticRendezvous&) = delete;
  ~ElasticRendezvous();

  // Joins the current round, or the next one if the current has closed
  // without this launcher. Returns std::nullopt when the run has finished
  // (a node reported success) before this launcher took part, or when
  // `interrupted` says so. Throws Error(TIMEOUT) naming the round, how many
  // nodes joined and MIN when the round does not fill in time, and
  // Error(INVALID_ARGUMENT) when the nodes' -n differ.
  std::optional<RoundAssignment> join(const Interrupted& interrupted);

  // Records the first failure of `round` ("node 1: rank 1 (pid 7) exited
  // with status 1"); later ones keep the first.
  void report_failure(int round, const std::string& what);

  // The failure recorded for `round`, if any.
  std::optional<std::string> failure(int round);

  // Moves the job to round `round` + 1 (idempotent over the launchers).
  void advance(int round);

  // Records that the run finished on this node, so launchers waiting to
  // join stop waiting.
  void finished(int round, int node);

 private:
  // Waits until round `round` is over (a failure moved the job on, or the
  // run finished). Returns false when the run finished or `interrupted`.
  bool await_next_round(int round, const Interrupted& interrupted);
  int64_t current_round();
  // The launcher ids ("host pid P") of nodes 0 .. nodes-1 of `round`.
  std::vector<std::string> launchers(int round, int nodes);
  // Fills a.left and a.joined.
  void compare_with_previous(RoundAssignment& a);

  ElasticSettings settings_;
  Log log_;
  std::string id_;  // this launcher: "host pid P"
  std::unique_ptr<store::TcpStoreClient> client_;
};

// Parses --nnodes: "N" or "MIN:MAX" (1 <= MIN <= MAX). Throws UsageError
// naming the text.
std::pair<int, int> parse_nnodes(const std::string& text);

}  // namespace tessera::cli
