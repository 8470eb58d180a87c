// Entry point of the `tessera` command-line tool: parses the command line
// with CLI11, runs the chosen subcommand and turns every failure into one
// line "tessera: error: <message>" on stderr with exit code 2 (usage) or 1
// (run time).
#include <cstdio>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "bench_command.hpp"
#include "bench_strategies.hpp"
#include "checkpoint_command.hpp"
#include "cli11.hpp"
#include "cli_error.hpp"
#include "global_options.hpp"
#include "launch_command.hpp"
#include "plugins_command.hpp"
#include "select_command.hpp"
#include "train_command.hpp"
#include "version_command.hpp"

namespace {

// One write of the whole line, so that ranks sharing a pipe (under mpirun)
// never interleave inside each other's error line.
int report(const char* message, int code) {
  const std::string line = std::string("tessera: error: ") + message + '\n';
  std::cerr.flush();
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  return code;
}

// When a command word was read as the value of a global option
// (`tessera --log-level version`): says so, for the "missing command"
// message; else "".
std::string swallowed_command(const CLI::App& app, const tessera::cli::GlobalOptions& global) {
  const auto is_command = [&](const std::string& word) {
    return !word.empty() &&
           !app.get_subcommands([&](const CLI::App* sub) { return sub->get_name() == word; })
                .empty();
  };
  std::string flag;
  std::string word;
  if (is_command(global.log_level)) {
    flag = "--log-level";
    word = global.log_level;
  } else if (is_command(global.config_file)) {
    flag = "--config";
    word = global.config_file;
  } else if (!global.plugin_paths.empty() && is_command(global.plugin_paths.back())) {
    flag = "--plugin-path";
    word = global.plugin_paths.back();
  } else {
    return {};
  }
  return " ('" + word + "' was read as the value of " + flag + ")";
}

// CLI11's message, made specific when a (sub)command name is missing or
// unknown: names the word that was not understood and the valid choices.
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e,
                                const tessera::cli::GlobalOptions& global) {
  const auto chosen = app.get_subcommands();
  const bool in_bench = !chosen.empty() && chosen.front()->get_name() == "bench";
  // `tessera train --config FILE`: the global flag took the file that the
  // command wants as its argument.
  if (!chosen.empty() && !global.config_file.empty() &&
      std::string(e.what()).find("CONFIG is required") != std::string::npos) {
    const CLI::App* command = chosen.front();
    if (in_bench && !command->get_subcommands().empty()) command = command->get_subcommands()[0];
    std::string name = command->get_name();
    if (in_bench) name = "bench " + name;
    return "CONFIG is required: give the configuration as the argument (tessera " + name + " " +
           global.config_file + "); the global --config is not read by '" + name + "'";
  }
  if (!in_bench && !chosen.empty()) return e.what();
  if (in_bench && !chosen.front()->get_subcommands().empty()) return e.what();
  const CLI::App& level = in_bench ? *chosen.front() : app;
  const std::string prefix = in_bench ? "bench " : "";
  const std::string choices =
      in_bench ? "collectives or strategies"
               : "train, select, plugins, bench collectives, bench strategies or version; launch "
                 "to start ranks; checkpoint convert to merge a sharded checkpoint";
  // Global flags fall through to the top level, and the words `bench` did
  // not take with them.
  auto left = level.remaining();
  if (left.empty() && in_bench) left = app.remaining();
  if (!left.empty()) {
    if (left.front().rfind('-', 0) == 0) {
      return "unknown option '" + left.front() + "' for 'tessera" + (in_bench ? " bench" : "") +
             "' (see --help)";
    }
    return "unknown command '" + prefix + left.front() + "' (use " + prefix + choices +
           "; see --help)";
  }
  if (std::string(e.what()).find("subcommand") != std::string::npos) {
    return "missing command (use " + prefix + choices + "; see --help)" +
           (in_bench ? "" : swallowed_command(app, global));
  }
  return e.what();
}

// Builds the command line, parses it and runs the chosen subcommand.
// Returns the exit code; failures of a subcommand are reported here.
int run(int argc, char** argv) {
  CLI::App app("Tessera: distributed training where everything that varies is a plugin", "tessera");
  app.fallthrough();  // global flags are accepted after the subcommand too
  app.require_subcommand(1);

  tessera::cli::GlobalOptions global;
  tessera::cli::PluginsArgs plugins_args;
  tessera::cli::BenchArgs bench_args;
  tessera::cli::BenchStrategiesArgs strategies_args;
  tessera::cli::TrainArgs train_args;
  tessera::cli::LaunchArgs launch_args;
  tessera::cli::CheckpointArgs checkpoint_args;
  tessera::cli::SelectArgs select_args;
  tessera::cli::add_global_options(app, global);
  CLI::App* train = tessera::cli::add_train_command(app, train_args);
  CLI::App* plugins = tessera::cli::add_plugins_command(app, plugins_args);
  CLI::App* bench = tessera::cli::add_bench_command(app, bench_args);
  CLI::App* bench_strategies =
      tessera::cli::add_bench_strategies_command(*bench->get_parent(), strategies_args);
  CLI::App* version = tessera::cli::add_version_command(app);
  CLI::App* launch = tessera::cli::add_launch_command(app, launch_args);
  CLI::App* checkpoint = tessera::cli::add_checkpoint_command(app, checkpoint_args);
  CLI::App* select = tessera::cli::add_select_command(app, select_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report(parse_error_message(app, e, global).c_str(), tessera::cli::kExitUsage);
  }

  try {
    if (*train) return tessera::cli::run_train_command(global, train_args, std::cout);
    if (*plugins) return tessera::cli::run_plugins_command(global, plugins_args, std::cout);
    if (*bench) return tessera::cli::run_bench_command(global, bench_args, std::cout);
    if (*bench_strategies) {
      return tessera::cli::run_bench_strategies_command(global, strategies_args, std::cout);
    }
    if (*version) {
      tessera::cli::check_unused_global_options(global, "tessera version");
      return tessera::cli::run_version_command(std::cout);
    }
    if (*checkpoint) {
      tessera::cli::check_unused_global_options(global, "tessera checkpoint");
      return tessera::cli::run_checkpoint_command(checkpoint_args, std::cout);
    }
    if (*select) return tessera::cli::run_select_command(global, select_args, std::cout);
    if (*launch) {
      return tessera::cli::run_launch_command(launch_args, {argv, static_cast<std::size_t>(argc)});
    }
    return report(
        "no subcommand given (use train, select, plugins, bench collectives, bench strategies or "
        "version; launch to start ranks; checkpoint convert to merge a sharded checkpoint)",
        tessera::cli::kExitUsage);
  } catch (const tessera::cli::UsageError& e) {
    return report(e.what(), tessera::cli::kExitUsage);
  } catch (const std::bad_alloc&) {
    return report("out of memory", tessera::cli::kExitFailure);
  } catch (const std::exception& e) {
    return report(e.what(), tessera::cli::kExitFailure);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (...) {
    std::cerr << "tessera: error: unexpected failure while setting up the command line\n";
    return tessera::cli::kExitFailure;
  }
}
