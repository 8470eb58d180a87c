# Tests of `tessera bench strategies` (label `cli`), included from
# tests/cli/CMakeLists.txt after tessera_cli_test is defined. Every run uses
# the tiny two-rank mlp of fixtures/bench_strategies_mlp.toml (676
# parameters, 3 steps), so each test takes well under a second.
set(_mlp "${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bench_strategies_mlp.toml")
set(_bs_out "${CMAKE_CURRENT_BINARY_DIR}/bench_strategies")
file(MAKE_DIRECTORY "${_bs_out}")

# ---- the helpers, and the built executable run from a test ----
add_executable(tessera_cli_bench_strategies_tests bench_strategies_test.cpp)
target_link_libraries(tessera_cli_bench_strategies_tests PRIVATE tessera_cli GTest::gtest_main)
target_compile_definitions(tessera_cli_bench_strategies_tests PRIVATE
  TESSERA_CLI_EXE="$<TARGET_FILE:tessera>"
  TESSERA_CLI_MLP_CONFIG="${_mlp}")
tessera_target_warnings(tessera_cli_bench_strategies_tests)
add_dependencies(tessera_cli_bench_strategies_tests tessera)
foreach(_plugin tessera_backend_inmemory tessera_strategy_ddp tessera_strategy_zero3
                tessera_strategy_pipeline tessera_strategy_elastic)
  if(TARGET ${_plugin})
    add_dependencies(tessera_cli_bench_strategies_tests ${_plugin})
  endif()
endforeach()
gtest_discover_tests(tessera_cli_bench_strategies_tests
  DISCOVERY_MODE PRE_TEST
  PROPERTIES LABELS "cli" TIMEOUT 60 ENVIRONMENT "TESSERA_PLUGIN_PATH=;TESSERA_LOG_LEVEL=")

# ---- the command line ----
set(_bs bench strategies "${_mlp}" --steps 3)
string(REPEAT " +[0-9]+\\.[0-9]+" 10 _nums)  # the 10 numeric cells of a row
set(_no_bubble " +- +- +-")  # a strategy without a pipeline: no bubble columns
# Both rows with a number in every column, the header lines, and the CSV.
tessera_cli_test(bench_strategies_table
  ARGS ${_bs} --strategies ddp,zero3 --csv "${_bs_out}/rows.csv"
  STDOUT "# bench strategies: model mlp [(]676 parameters = P[)], 2 ranks as threads [(]inmemory backend[)]|means over steps 2-3 [(]step 1 is warm-up[)]|all 2 ranks together|strategy +step[(]ms[)] +sent[(]MiB[)] +sent/4P +params +grads +optim +comm +activ +total +rss[(]MiB[)] +bubble +cpu +formula|\nddp${_nums}${_no_bubble}\n|\nzero3${_nums}${_no_bubble}\n"
  CSV "${_bs_out}/rows.csv" CSV_ROWS 2
  CSV_HEADER "^strategy,status,backend,ranks,parameters,steps,step_ms,sent_bytes_per_step,sent_per_4psi,params_bytes,grads_bytes,optimizer_bytes,comm_bytes,activations_bytes,total_bytes,peak_rss_bytes,bubble,bubble_cpu,bubble_formula$")
# A global batch smaller than the ranks: ddp's estimate refuses it before
# any child starts ('cannot run', the reason); elastic, which has no
# estimate, is refused by its ranks, so its child fails (its stderr tail).
# Failed rows both, exit status 1 after the table.
tessera_cli_test(bench_strategies_failed_children
  ARGS ${_bs} --strategies ddp,elastic --set data.batch_size=1
  RC 1
  STDOUT "\nddp +failed( +-)+\n|\nelastic +failed( +-)+\n"
  STDERR "'ddp' cannot run: data.batch_size = 1 is too small: strategy 'ddp' on 2 ranks|'elastic' failed [(]exited with status 1[)]; the last lines of its standard error:\n[^\n]*batch|tessera: error: 2 of 2 strategies failed: ddp, elastic\n$"
  STDERR_NOT "'ddp' failed [(]exited")

# Schedules compared: one row per NAME:KEY=VALUE entry, labelled with it.
tessera_cli_test(bench_strategies_pipeline_schedules
  ARGS ${_bs} --strategies pipeline:schedule=gpipe,pipeline:schedule=1f1b --set data.micro_batches=2
  STDOUT "\npipeline:schedule=gpipe${_nums} +[01][.][0-9]+ +[01][.][0-9]+ +0[.]333\n|\npipeline:schedule=1f1b${_nums} +[01][.][0-9]+ +[01][.][0-9]+ +0[.]333\n")

# ---- wrong command lines: exit code 2 before anything runs ----
tessera_cli_test(usage_bench_strategies_bad_option
  ARGS ${_bs} --strategies pipeline:schedule
  RC 2 STDERR "^tessera: error: --strategies entry 'pipeline:schedule' has an option 'schedule' that is not KEY=VALUE")
tessera_cli_test(usage_bench_strategies_unknown
  ARGS ${_bs} --strategies ddp,zero9
  RC 2 STDERR "^tessera: error: unknown strategy 'zero9' in --strategies [(]available strategy plugins: [^\n]*ddp[^\n]*zero3"
  STDOUT_NOT "strategy +step")
tessera_cli_test(usage_bench_strategies_repeated
  ARGS ${_bs} --strategies ddp,zero3,ddp
  RC 2 STDERR "^tessera: error: strategy 'ddp' is listed twice in --strategies")
tessera_cli_test(usage_bench_strategies_zero_steps
  ARGS ${_bs} --strategies ddp --steps 0
  RC 2 STDERR "^tessera: error: --steps must be at least 1, got 0")
