// How `tessera launch` handles ranks that fail, signals, and commands that
// cannot run: every test checks the exit code, the messages, and that no
// process is left behind.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "cli_process.hpp"

namespace tessera::launch_test {
namespace {

// The pid the launcher reported for `rank` ("rank R (pid P) ..."), or -1.
pid_t reported_pid(const std::string& err, int rank) {
  const std::regex pattern("rank " + std::to_string(rank) + " \\(pid ([0-9]+)\\)");
  std::smatch match;
  if (!std::regex_search(err, match, pattern)) return -1;
  return static_cast<pid_t>(std::stol(match[1].str()));
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(LaunchFailure, AllRanksSucceed) {
  const CliResult r = run_cli({"launch", "-n", "3", "--", "/bin/sh", "-c", "exit 0"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
}

TEST(LaunchFailure, NonZeroExitIsReported) {
  const CliResult r = run_cli(
      {"launch", "-n", "3", "--", "/bin/sh", "-c", "if [ $RANK = 1 ]; then exit 3; fi; exit 0"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("tessera launch: rank 1 \\(pid [0-9]+\\) exited with status 3\n")))
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "tessera launch: 1 of 3 ranks failed: rank 0 exit 0, rank 1 exit "
                       "3, rank 2 exit 0\n"))
      << r.err;
}

// An elastic launch on one node: every start sees TESSERA_RESTART_COUNT and
// TESSERA_MAX_RESTARTS; rank 1 fails the first start only, so the second
// one finishes.
TEST(LaunchFailure, ElasticRestartAfterAFailedRank) {
  const CliResult r = run_cli({"launch", "-n", "2", "--max-restarts", "2", "--rdzv-last-call", "0",
                               "--", "/bin/sh", "-c",
                               "echo start $TESSERA_RESTART_COUNT of $TESSERA_MAX_RESTARTS; "
                               "if [ $RANK = 1 ] && [ $TESSERA_RESTART_COUNT = 0 ]; then exit 3; "
                               "fi; exit 0"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 1] start 0 of 2\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 1] start 1 of 2\n")) << r.out;
  EXPECT_FALSE(contains(r.out, "start 2 of 2")) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("elastic: round 0 failed \\(node 0: rank 1 \\(pid [0-9]+\\) exited with "
                        "status 3\\); restarting on the nodes left \\(restart 1 of 2\\)")))
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "elastic: round 1: 1 node (--nnodes 1), this is node 0: world size "
                       "2, ranks 0..1"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "elastic: round 1 finished on this node")) << r.err;
}

TEST(LaunchFailure, ElasticRestartsRunOut) {
  const CliResult r = run_cli({"launch", "-n", "1", "--max-restarts", "1", "--rdzv-last-call", "0",
                               "--", "/bin/sh", "-c", "exit 4"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "restarting on the nodes left (restart 1 of 1)")) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("elastic: round 1 failed \\(node 0: rank 0 \\(pid [0-9]+\\) exited with "
                        "status 4\\); no restarts left \\(--max-restarts 1\\)")))
      << r.err;
}

TEST(LaunchFailure, KilledRankStopsASleepingSiblingAfterGrace) {
  // Rank 0 kills itself once rank 1 sleeps; rank 1 would sleep forever.
  const CliResult r = run_cli({"launch", "-n", "2", "--grace", "1", "--", "/bin/sh", "-c",
                               "if [ $RANK = 0 ]; then sleep 0.2; kill -KILL $$; fi; "
                               "sleep 1000"},
                              {}, 20s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err,
      std::regex("tessera launch: rank 0 \\(pid [0-9]+\\) was killed by signal 9 \\(SIGKILL\\)")))
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "tessera launch: rank 1 still running 1 s after rank 0 failed "
                       "(--grace); sending SIGTERM"))
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "2 of 2 ranks failed: rank 0 SIGKILL, rank 1 SIGTERM (stopped by "
                       "the launcher)"))
      << r.err;
  // The sibling's whole process group (the shell and its sleep) is gone.
  const pid_t sibling = reported_pid(r.err, 1);
  ASSERT_GT(sibling, 0) << r.err;
  EXPECT_TRUE(eventually(5s, [&] { return !group_alive(sibling); }));
}

TEST(LaunchFailure, RankFailingAtOnceStartsTheGracePeriod) {
  const CliResult r = run_cli({"launch", "-n", "3", "--grace", "0.2", "--", "/bin/sh", "-c",
                               "if [ $RANK = 0 ]; then exit 5; fi; sleep 1000"},
                              {}, 20s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "tessera launch: ranks 1, 2 still running 0.2 s after rank 0 "
                       "failed (--grace); sending SIGTERM"))
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "3 of 3 ranks failed: rank 0 exit 5, rank 1 SIGTERM (stopped by "
                       "the launcher), rank 2 SIGTERM (stopped by the launcher)"))
      << r.err;
}

TEST(LaunchFailure, RankIgnoringSigtermIsKilled) {
  // Rank 1 (and the sleep it starts) ignores SIGTERM: SIGKILL follows 5 s
  // after SIGTERM. Rank 0 fails once rank 1 has set up its trap.
  const CliResult r = run_cli({"launch", "-n", "2", "--grace", "0", "--", "/bin/sh", "-c",
                               "ready=\"$TESSERA_RENDEZVOUS_DIR/ready\"; if [ $RANK = 0 ]; then "
                               "while [ ! -e \"$ready\" ]; do sleep 0.05; done; exit 2; fi; "
                               "trap '' TERM; touch \"$ready\"; sleep 1000"},
                              {}, 30s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 1 still running 5 s after SIGTERM; sending SIGKILL")) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 exit 2, rank 1 SIGKILL (stopped by the launcher)")) << r.err;
  const pid_t sibling = reported_pid(r.err, 1);
  ASSERT_GT(sibling, 0) << r.err;
  EXPECT_TRUE(eventually(5s, [&] { return !group_alive(sibling); }));
}

// Counts the (non-overlapping) occurrences of `part` in `text`.
size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(LaunchFailure, ToleratedKilledRankLetsTheOthersFinish) {
  const CliResult r =
      run_cli({"launch", "-n", "3", "--tolerate-failures", "1", "--", "/bin/sh", "-c",
               "if [ \"$RANK\" = 1 ]; then kill -9 $$; fi; sleep 0.5; "
               "echo done $RANK"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] done 0\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 2] done 2\n")) << r.out;
  EXPECT_FALSE(contains(r.out, "done 1")) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("tessera launch: rank 1 \\(pid [0-9]+\\) was killed by signal 9 "
                        "\\(SIGKILL\\); the other ranks go on \\(--tolerate-failures 1: 1 of 1 "
                        "used\\)\n")))
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "tessera launch: 1 of 3 ranks failed, tolerated (--tolerate-failures 1): "
                       "rank 0 exit 0, rank 1 SIGKILL, rank 2 exit 0\n"))
      << r.err;
}

// A rank stopped by a signal cannot end on its own: once every other rank
// has ended and it stays stopped for --grace, the launcher kills it, and it
// counts as a failure (tolerated under --tolerate-failures), instead of
// waiting for it forever.
TEST(LaunchFailure, ARankStoppedAfterTheOthersEndedIsKilledAfterTheGrace) {
  const std::vector<std::string> ranks = {"/bin/sh", "-c",
                                          "if [ \"$RANK\" = 2 ]; then kill -STOP $$; fi; "
                                          "echo done $RANK"};
  std::vector<std::string> args = {"launch", "-n", "3", "--grace", "0.5", "--"};
  args.insert(args.end(), ranks.begin(), ranks.end());
  const CliResult r = run_cli(args, {}, 20s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "tessera launch: rank 2 stopped by a signal for 0.5 s while every other "
                       "rank has ended (--grace): it cannot end on its own; sending SIGKILL\n"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "3 ranks failed: rank 0 exit 0, rank 1 exit 0, rank 2 SIGKILL\n"))
      << r.err;

  args = {"launch", "-n", "3", "--grace", "0.5", "--tolerate-failures", "1", "--"};
  args.insert(args.end(), ranks.begin(), ranks.end());
  const CliResult tolerated = run_cli(args, {}, 20s);
  ASSERT_FALSE(tolerated.timed_out) << tolerated.err;
  EXPECT_EQ(tolerated.exit_code, 0) << tolerated.err;
  EXPECT_TRUE(contains(tolerated.err,
                       "1 of 3 ranks failed, tolerated (--tolerate-failures 1): rank 0 exit 0, "
                       "rank 1 exit 0, rank 2 SIGKILL\n"))
      << tolerated.err;
}

TEST(LaunchFailure, FailuresBeyondTheToleratedOnesStopTheOthers) {
  const CliResult r =
      run_cli({"launch", "-n", "3", "--tolerate-failures", "1", "--grace", "0.2", "--", "/bin/sh",
               "-c", "if [ \"$RANK\" != 0 ]; then kill -9 $$; fi; sleep 1000"},
              {}, 20s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  // Ranks 1 and 2 die together: whichever is reaped first is tolerated.
  EXPECT_EQ(count_of(r.err, "; the other ranks go on (--tolerate-failures 1: 1 of 1 used)\n"), 1U)
      << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("tessera launch: rank [12] \\(pid [0-9]+\\) was killed by signal 9 "
                        "\\(SIGKILL\\); --tolerate-failures 1 is used up, so the job stops\n")))
      << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("tessera launch: rank 0 still running 0.2 s after rank [12] failed "
                        "\\(--grace\\); sending SIGTERM\n")))
      << r.err;
  EXPECT_TRUE(contains(r.err,
                       "3 of 3 ranks failed: rank 0 SIGTERM (stopped by the launcher), rank 1 "
                       "SIGKILL, rank 2 SIGKILL\n"))
      << r.err;
  const pid_t sibling = reported_pid(r.err, 0);
  ASSERT_GT(sibling, 0) << r.err;
  EXPECT_TRUE(eventually(5s, [&] { return !group_alive(sibling); }));
}

TEST(LaunchFailure, EveryRankFailingIsAFailureDespiteTolerance) {
  const CliResult r =
      run_cli({"launch", "-n", "2", "--tolerate-failures", "5", "--", "/bin/sh", "-c", "exit 3"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "2 of 2 ranks failed: rank 0 exit 3, rank 1 exit 3\n")) << r.err;
}

// In an elastic launch each round may tolerate as many failures: round 0
// has two (rank 1 and rank 2) and restarts, round 1 one and finishes.
TEST(LaunchFailure, ElasticToleratesFailuresPerRound) {
  const CliResult r = run_cli(
      {"launch", "-n", "3", "--max-restarts", "1", "--rdzv-last-call", "0", "--tolerate-failures",
       "1", "--", "/bin/sh", "-c",
       "if [ \"$RANK\" = 1 ] || { [ \"$RANK\" = 2 ] && [ \"$TESSERA_RESTART_COUNT\" = 0 ]; }; "
       "then kill -9 $$; fi; sleep 0.5; echo done $RANK in $TESSERA_RESTART_COUNT"});
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] done 0 in 1\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 2] done 2 in 1\n")) << r.out;
  EXPECT_EQ(count_of(r.err, "the other ranks go on (--tolerate-failures 1: 1 of 1 used)"), 2U)
      << r.err;
  EXPECT_TRUE(contains(r.err, "restarting on the nodes left (restart 1 of 1)")) << r.err;
  EXPECT_TRUE(contains(r.err, "elastic: round 1 finished on this node")) << r.err;
}

TEST(LaunchFailure, CommandNotFound) {
  const TempDir tmp;
  const CliResult r = run_cli({"launch", "-n", "2", "--", "tessera-test-no-such-command", "x"},
                              env_setting({"TMPDIR=" + tmp.path().string()}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "tessera: error: cannot start rank 0: command 'tessera-test-no-such-command' was not "
            "found on PATH\n");
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(std::filesystem::is_empty(tmp.path()));  // rendezvous directory removed
}

TEST(LaunchFailure, CommandNotExecutable) {
  const TempDir tmp;
  const std::filesystem::path script = tmp.path() / "script.sh";
  { std::ofstream(script) << "#!/bin/sh\necho never\n"; }
  std::filesystem::permissions(
      script, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const CliResult r = run_cli({"launch", "-n", "1", "--", script.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "tessera: error: cannot start rank 0: cannot execute '" +
                                  script.string() + "': Permission denied"))
      << r.err;
}

// Starts `tessera launch -n 2 FLAGS -- sh -c "TRAP; echo ready; <loop>"`,
// waits until both ranks are ready, sends the launcher `sig` and waits for
// it to end (failing the test if it does not within 10 s).
CliResult signal_ready_ranks(const std::vector<std::string>& flags, const std::string& trap,
                             int sig) {
  std::vector<std::string> args = {"launch", "-n", "2"};
  args.insert(args.end(), flags.begin(), flags.end());
  args.insert(args.end(),
              {"--", "/bin/sh", "-c", trap + "; echo ready; while :; do sleep 0.05; done"});
  CliProcess launcher(args);
  EXPECT_TRUE(launcher.wait_for_output(
      [](const std::string& out, const std::string&) {
        return contains(out, "[rank 0] ready\n") && contains(out, "[rank 1] ready\n");
      },
      10s));
  launcher.signal(sig);
  CliResult r = launcher.finish(10s);
  EXPECT_FALSE(r.timed_out) << r.err;
  return r;
}

TEST(LaunchFailure, SigtermIsForwardedToEveryRank) {
  const CliResult r = signal_ready_ranks({}, "trap 'echo got TERM; exit 7' TERM", SIGTERM);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] got TERM\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "[rank 1] got TERM\n")) << r.out;
  EXPECT_TRUE(contains(r.err, "tessera launch: received SIGTERM; forwarding it to ranks 0, 1"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "2 of 2 ranks failed: rank 0 exit 7, rank 1 exit 7")) << r.err;
}

// Ranks that ignore SIGINT: the launcher forwards it, and --grace later
// stops them with SIGTERM as after a failure; the launch exits 1.
TEST(LaunchFailure, RanksThatIgnoreSigintGetSigtermAfterTheGrace) {
  const CliResult r = signal_ready_ranks({"--grace", "1"}, "trap '' INT", SIGINT);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "received SIGINT; forwarding it to ranks 0, 1 (SIGTERM to those "
                       "still running 1 s later, --grace; SIGINT again sends it now)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "ranks 0, 1 still running after SIGINT; sending SIGTERM")) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "2 of 2 ranks failed: rank 0 SIGTERM (stopped by the launcher), "
                       "rank 1 SIGTERM (stopped by the launcher)"))
      << r.err;
}

// A second SIGINT does not wait for the grace.
TEST(LaunchFailure, ASecondSigintStopsTheRanksNow) {
  CliProcess launcher({"launch", "-n", "1", "--grace", "600", "--", "/bin/sh", "-c",
                       "trap '' INT; echo ready; while :; do sleep 0.05; done"});
  ASSERT_TRUE(launcher.wait_for_output(
      [](const std::string& out, const std::string&) { return contains(out, "ready\n"); }, 10s));
  launcher.signal(SIGINT);
  ASSERT_TRUE(launcher.wait_for_output(
      [](const std::string&, const std::string& err) {
        return contains(err, "received SIGINT; forwarding it");
      },
      10s));
  launcher.signal(SIGINT);
  const CliResult r = launcher.finish(10s);
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(contains(r.err, "received SIGINT again; stopping the ranks now")) << r.err;
  EXPECT_TRUE(contains(r.err, "1 of 1 ranks failed: rank 0 SIGTERM (stopped by the launcher)"))
      << r.err;
}

// Ranks that end cleanly on SIGINT: still not a successful launch.
TEST(LaunchFailure, AnInterruptedLaunchExitsOneThoughEveryRankExitsZero) {
  const CliResult r = signal_ready_ranks({}, "trap 'exit 0' INT", SIGINT);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(
      contains(r.err, "tessera launch: interrupted by SIGINT; every rank exited with status 0"))
      << r.err;
}

TEST(LaunchFailure, RanksDieWithAKilledLauncher) {
  const TempDir tmp;  // holds the rendezvous directory a killed launcher cannot remove
  CliProcess launcher({"launch", "-n", "2", "--", "/bin/sh", "-c", "echo pid $$; exec sleep 1000"},
                      env_setting({"TMPDIR=" + tmp.path().string()}));
  std::vector<pid_t> pids;
  ASSERT_TRUE(launcher.wait_for_output(
      [&](const std::string& out, const std::string&) {
        pids.clear();
        const std::regex pattern("\\] pid ([0-9]+)\n");
        for (std::sregex_iterator it(out.begin(), out.end(), pattern), end; it != end; ++it) {
          pids.push_back(static_cast<pid_t>(std::stol((*it)[1].str())));
        }
        return pids.size() == 2;
      },
      10s));
  launcher.signal(SIGKILL);
  (void)launcher.finish(10s);
  for (const pid_t pid : pids) {
    EXPECT_TRUE(eventually(5s, [&] { return !process_alive(pid); })) << "pid " << pid;
  }
}

}  // namespace
}  // namespace tessera::launch_test
