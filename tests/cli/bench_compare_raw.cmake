# Tests of `tessera bench collectives --compare-raw` (label `cli`), included
# from tests/cli/CMakeLists.txt after tessera_cli_test and the cli_noop
# fixture are defined.
#
# cli_solo_raw: a one-rank process backend whose raw call copies like its
# normal path, so the raw columns and the ratio are exercised without MPI.
set(_raw_dir "${CMAKE_CURRENT_BINARY_DIR}/plugins_raw")
tessera_add_plugin(NAME cli_solo_raw KIND backend SOURCES fixtures/solo_raw_backend.cpp
  OUTPUT_DIRECTORY "${_raw_dir}")

# ---- below the command line: the reporter's columns and launch_bench over
# real plugins, linked from the CLI's own library (apps/tessera). ----
add_executable(tessera_cli_bench_tests bench_compare_raw_test.cpp bench_raw_report_test.cpp
  bench_device_test.cpp)
target_link_libraries(tessera_cli_bench_tests PRIVATE tessera_cli GTest::gtest_main)
target_compile_definitions(tessera_cli_bench_tests PRIVATE
  TESSERA_CLI_PLUGIN_DIR="${TESSERA_PLUGIN_OUTPUT_DIR}"
  TESSERA_CLI_FIXTURE_DIR="${_raw_dir}")
tessera_target_warnings(tessera_cli_bench_tests)
add_dependencies(tessera_cli_bench_tests tessera_backend_cli_solo_raw)
if(TARGET tessera_backend_inmemory)
  add_dependencies(tessera_cli_bench_tests tessera_backend_inmemory)
endif()
gtest_discover_tests(tessera_cli_bench_tests
  DISCOVERY_MODE PRE_TEST
  PROPERTIES LABELS "cli" TIMEOUT 120)

# The stand-in of a build without the CUDA Toolkit, on its own (the CLI's
# library holds the CUDA one where the toolkit was found).
add_executable(tessera_cli_device_none_tests bench_device_none_test.cpp
  "${PROJECT_SOURCE_DIR}/apps/tessera/bench_device_none.cpp")
target_include_directories(tessera_cli_device_none_tests PRIVATE "${PROJECT_SOURCE_DIR}/apps/tessera")
target_link_libraries(tessera_cli_device_none_tests PRIVATE Tessera::sdk GTest::gtest_main)
tessera_target_warnings(tessera_cli_device_none_tests)
gtest_discover_tests(tessera_cli_device_none_tests
  DISCOVERY_MODE PRE_TEST
  PROPERTIES LABELS "cli" TIMEOUT 60)

# ---- the built executable ----
# Every column of every row, and the CSV's extra columns.
tessera_cli_test(bench_compare_raw_columns
  ARGS --plugin-path "${_raw_dir}" bench collectives --backend cli_solo_raw --op allreduce
       --sizes 1K:16K --step-factor 4 --iters 2 --warmup 1 --compare-raw
       --csv "${CMAKE_CURRENT_BINARY_DIR}/bench_raw.csv"
  ROWS 3 COLUMNS 12
  STDOUT "# backend: cli_solo_raw \\(1 ranks, one per process\\)|# compare-raw: [^\n]*3 rounds of 2 timed iterations|time\\(us\\) +algbw\\(GB/s\\) +busbw\\(GB/s\\) +#wrong +raw\\(us\\) +tessera/raw +overhead\\(us\\) +#wrong\\(raw\\)|# tessera / raw at 16384 B: [0-9.]+ / [0-9.]+ us = [0-9.inf]+ \\(overhead -?[0-9.]+ us\\)|#wrong total: 0 \\(tessera 0, raw 0\\) \\(OK\\)"
  CSV "${CMAKE_CURRENT_BINARY_DIR}/bench_raw.csv" CSV_ROWS 3
  CSV_HEADER "^backend,ranks,op,size_bytes,.*,wrong,memcpy_gbps,raw_time_us,tessera_raw_ratio,overhead_us,raw_wrong$")
# A raw call that spoils its result: counted apart, and the command fails.
tessera_cli_test(bench_compare_raw_detects_wrong
  ARGS --plugin-path "${_raw_dir}" bench collectives --backend cli_solo_raw --op broadcast
       --sizes 1K:4K --iters 1 --warmup 0 --compare-raw --option raw_corrupt=true
  RC 1 STDOUT "#wrong total: 3 \\(tessera 0, raw 3\\)"
  STDERR "^tessera: error: 3 mismatching element[^\n]*broadcast[^\n]*cli_solo_raw[^\n]*3 of them from its raw library call")
# No raw call: a usage error naming backend and op, printed before any table.
tessera_cli_test(usage_compare_raw_inmemory
  ARGS bench collectives --backend inmemory --ranks 2 --op allreduce --sizes 1K:4K --compare-raw
  RC 2 STDERR "^tessera: error: --compare-raw: backend 'inmemory' has no raw library call for allreduce"
  STDOUT_NOT "size\\(B\\)")
tessera_cli_test(usage_compare_raw_unsupported_op
  ARGS --plugin-path "${_raw_dir}" bench collectives --backend cli_solo_raw --op gather
       --sizes 1K --compare-raw --option raw_skip=gather
  RC 2 STDERR "^tessera: error: --compare-raw: backend 'cli_solo_raw' has no raw library call for gather"
  STDOUT_NOT "size\\(B\\)")
