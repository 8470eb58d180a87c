# The files a run reads (label `cli`), included from tests/cli/CMakeLists.txt
# after tessera_cli_test is defined.

# ---- in a test program: a FIFO as the config, run with a deadline ----
add_executable(tessera_cli_files_tests files_test.cpp)
target_link_libraries(tessera_cli_files_tests PRIVATE Tessera::core GTest::gtest_main)
target_compile_definitions(tessera_cli_files_tests PRIVATE
  TESSERA_CLI_EXE="$<TARGET_FILE:tessera>")
tessera_target_warnings(tessera_cli_files_tests)
add_dependencies(tessera_cli_files_tests tessera)
gtest_discover_tests(tessera_cli_files_tests
  DISCOVERY_MODE PRE_TEST
  PROPERTIES LABELS "cli" TIMEOUT 120 ENVIRONMENT "TESSERA_PLUGIN_PATH=;TESSERA_LOG_LEVEL=")

# ---- the command line ----
tessera_cli_test(train_config_is_a_device ARGS train /dev/zero
  RC 1 STDERR "^tessera: error: config file '/dev/zero' is a character device, not a regular file\n$")
