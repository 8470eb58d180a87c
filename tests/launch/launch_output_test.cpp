// `tessera launch` copies every rank's stdout and stderr line by line with a
// "[rank R] " prefix, keeps lines whole, and flushes a last partial line.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cli_process.hpp"

namespace tessera::launch_test {
namespace {

// The lines of `text` that carry the prefix of `rank`, prefix removed.
std::vector<std::string> lines_of_rank(const std::string& text, int rank) {
  const std::string prefix = "[rank " + std::to_string(rank) + "] ";
  std::vector<std::string> found;
  for (const std::string& line : lines_of(text)) {
    if (line.rfind(prefix, 0) == 0) found.push_back(line.substr(prefix.size()));
  }
  return found;
}

TEST(LaunchOutput, PrefixesStdoutAndStderrLines) {
  const CliResult r =
      run_cli({"launch", "-n", "2", "--", "/bin/sh", "-c",
               "printf 'out one\\nout two rank %s\\n' $RANK; printf 'err one\\nerr partial' >&2; "
               "printf 'out partial'"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(lines_of_rank(r.out, rank),
              (std::vector<std::string>{"out one", "out two rank " + std::to_string(rank),
                                        "out partial"}));
    EXPECT_EQ(lines_of_rank(r.err, rank), (std::vector<std::string>{"err one", "err partial"}));
  }
  // Nothing else, and every line (the partial ones too) ends with a newline.
  EXPECT_EQ(lines_of(r.out).size(), 6U) << r.out;
  EXPECT_EQ(lines_of(r.err).size(), 4U) << r.err;
  EXPECT_EQ(r.out.back(), '\n');
  EXPECT_EQ(r.err.back(), '\n');
}

TEST(LaunchOutput, LongLinesOfSeveralRanksDoNotMix) {
  // Each rank writes 3 lines of 150000 copies of its rank digit, in many
  // small writes, at the same time as the others.
  const CliResult r = run_cli({"launch", "-n", "3", "--", "/bin/sh", "-c",
                               "for i in 1 2 3; do head -c 150000 /dev/zero | tr '\\0' $RANK; "
                               "echo; done"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 9U);
  std::map<int, int> count;
  for (const std::string& line : lines) {
    ASSERT_EQ(line.rfind("[rank ", 0), 0U) << line.substr(0, 40);
    const int rank = line[6] - '0';
    const std::string body = line.substr(9);
    EXPECT_EQ(body, std::string(150000, static_cast<char>('0' + rank)))
        << "line of rank " << rank << " mixed with other output";
    ++count[rank];
  }
  EXPECT_EQ(count, (std::map<int, int>{{0, 3}, {1, 3}, {2, 3}}));
}

TEST(LaunchOutput, NoPrefixPassesOutputThrough) {
  const CliResult r = run_cli({"launch", "--no-prefix", "-n", "1", "--", "/bin/sh", "-c",
                               "printf 'plain\\npartial'; printf 'to stderr' >&2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "plain\npartial");
  EXPECT_EQ(r.err, "to stderr");
}

TEST(LaunchOutput, ArgumentsAfterTheSeparatorReachTheCommand) {
  // Words that look like launch flags or subcommands belong to the command.
  const CliResult r = run_cli({"launch", "-n", "1", "--", "/bin/sh", "-c",
                               "printf '%s|' \"$@\"; echo", "sh", "-n", "3", "--", "train"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] -n|3|--|train|\n");
}

TEST(LaunchOutput, RanksReadNothingFromStdin) {
  const CliResult r = run_cli({"launch", "-n", "1", "--", "/bin/sh", "-c",
                               "if read line; then echo got; else echo eof; fi"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] eof\n");
}

}  // namespace
}  // namespace tessera::launch_test
