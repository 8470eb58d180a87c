# The files a run reads and its checkpoint directory (label `cli`), included
# from tests/cli/CMakeLists.txt after tessera_cli_test is defined.

# ---- in a test program: a run in progress holding checkpoint.dir while the
# CLI starts a second one, a FIFO as the config, --dry-run creating nothing.
add_executable(tessera_cli_files_tests files_test.cpp)
target_link_libraries(tessera_cli_files_tests PRIVATE Tessera::core GTest::gtest_main)
target_compile_definitions(tessera_cli_files_tests PRIVATE
  TESSERA_CLI_EXE="$<TARGET_FILE:tessera>"
  TESSERA_CLI_PLUGIN_DIR="${TESSERA_PLUGIN_OUTPUT_DIR}")
tessera_target_warnings(tessera_cli_files_tests)
add_dependencies(tessera_cli_files_tests tessera)
foreach(_plugin tessera_backend_inmemory tessera_model_mlp tessera_strategy_none)
  if(TARGET ${_plugin})
    add_dependencies(tessera_cli_files_tests ${_plugin})
  endif()
endforeach()
gtest_discover_tests(tessera_cli_files_tests
  DISCOVERY_MODE PRE_TEST
  PROPERTIES LABELS "cli" TIMEOUT 120 ENVIRONMENT "TESSERA_PLUGIN_PATH=;TESSERA_LOG_LEVEL=")

# ---- the command line ----
set(_files_quickstart "${PROJECT_SOURCE_DIR}/examples/quickstart.toml")
tessera_cli_test(train_config_is_a_device ARGS train /dev/zero
  RC 1 STDERR "^tessera: error: config file '/dev/zero' is a character device, not a regular file\n$")
# A file given as checkpoint.dir: refused before any rank starts, by the run
# and by --dry-run alike.
foreach(_dry "" "--dry-run")
  set(_suffix "")
  if(_dry)
    set(_suffix "_dry_run")
  endif()
  tessera_cli_test(train_checkpoint_dir_is_a_file${_suffix}
    ARGS train "${_files_quickstart}" ${_dry} --set "checkpoint.dir=${_files_quickstart}"
    RC 1 STDERR "^tessera: error: checkpoint.dir '[^\n]*quickstart\\.toml' is a regular file, not a directory\n$"
    STDOUT_NOT "step ")
endforeach()
