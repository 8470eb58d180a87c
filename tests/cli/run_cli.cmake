# Runs the `tessera` executable once and checks its exit code and output.
# Used by tests/cli/CMakeLists.txt as `cmake -D... -P run_cli.cmake`.
#
#   EXE            path of the tessera executable (required)
#   ARGS           its arguments, separated by '|' (';' would be split by add_test)
#   EXPECT_RC      expected exit code (default 0)
#   STDOUT_REGEX   '|'-separated regexes that must all match stdout
#   STDERR_REGEX   '|'-separated regexes that must all match stderr
#   STDOUT_NOT     a regex that must not match stdout
#   STDERR_NOT     a regex that must not match stderr
#   BENCH_ROWS     number of benchmark table rows expected on stdout; every
#                  row must have BENCH_COLUMNS columns and end with a #wrong
#                  of 0
#   BENCH_COLUMNS  columns of a benchmark row (default 8; 12 with
#                  --compare-raw, whose last column is the raw #wrong)
#   CSV_FILE       a file the command must write (removed first); with
#   CSV_ROWS       the number of data lines it must hold after its header
#   CSV_HEADER     a regex its header line must match (default: the columns
#                  of a run without --compare-raw)
#   ENV            'NAME=value' set for the command
#   CACHE_DIR      XDG_CACHE_HOME for the command, emptied first (the plugin
#                  probe's cache starts empty)
#   OUT_FILE       a file the command must write (removed first); with
#   OUT_FILE_REGEX '|'-separated regexes that must all match its content
cmake_minimum_required(VERSION 3.25)

if(NOT EXE)
  message(FATAL_ERROR "run_cli.cmake: EXE is required")
endif()
if(NOT DEFINED EXPECT_RC)
  set(EXPECT_RC 0)
endif()
if(NOT DEFINED BENCH_COLUMNS)
  set(BENCH_COLUMNS 8)
endif()
if(NOT DEFINED CSV_HEADER_REGEX)
  set(CSV_HEADER_REGEX "^backend,ranks,op,size_bytes,.*,wrong,memcpy_gbps$")
endif()
string(REPLACE "|" ";" args "${ARGS}")
if(CSV_FILE)
  file(REMOVE "${CSV_FILE}")
endif()
if(OUT_FILE)
  file(REMOVE "${OUT_FILE}")
endif()
if(CACHE_DIR)
  file(REMOVE_RECURSE "${CACHE_DIR}")
  set(ENV{XDG_CACHE_HOME} "${CACHE_DIR}")
endif()
if(ENV)
  string(REGEX MATCH "^([^=]+)=(.*)$" _ "${ENV}")
  set(ENV{${CMAKE_MATCH_1}} "${CMAKE_MATCH_2}")
endif()

execute_process(COMMAND "${EXE}" ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
set(shown "command: ${EXE} ${args}\nexit code: ${rc}\n--- stdout ---\n${out}--- stderr ---\n${err}")

if(NOT "${rc}" STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "expected exit code ${EXPECT_RC}\n${shown}")
endif()

# Every '|'-separated regex in `patterns` must match `text`.
function(expect_all text patterns what)
  string(REPLACE "|" ";" list "${patterns}")
  foreach(re IN LISTS list)
    if(NOT text MATCHES "${re}")
      message(FATAL_ERROR "${what} does not match '${re}'\n${shown}")
    endif()
  endforeach()
endfunction()

if(STDOUT_REGEX)
  expect_all("${out}" "${STDOUT_REGEX}" "stdout")
endif()
if(STDERR_REGEX)
  expect_all("${err}" "${STDERR_REGEX}" "stderr")
endif()
if(STDOUT_NOT AND out MATCHES "${STDOUT_NOT}")
  message(FATAL_ERROR "stdout matches '${STDOUT_NOT}' but must not\n${shown}")
endif()
if(STDERR_NOT AND err MATCHES "${STDERR_NOT}")
  message(FATAL_ERROR "stderr matches '${STDERR_NOT}' but must not\n${shown}")
endif()

if(DEFINED BENCH_ROWS)
  string(REPLACE "\n" ";" lines "${out}")
  set(rows 0)
  foreach(line IN LISTS lines)
    string(STRIP "${line}" line)
    if(line STREQUAL "" OR line MATCHES "^#" OR line MATCHES "size\\(B\\)")
      continue()
    endif()
    string(REGEX REPLACE " +" ";" cells "${line}")
    list(LENGTH cells n)
    list(GET cells -1 wrong)
    if(NOT n EQUAL BENCH_COLUMNS OR NOT wrong STREQUAL "0")
      message(FATAL_ERROR
        "bad benchmark row '${line}' (want ${BENCH_COLUMNS} columns and #wrong 0)\n${shown}")
    endif()
    math(EXPR rows "${rows} + 1")
  endforeach()
  if(NOT rows EQUAL BENCH_ROWS)
    message(FATAL_ERROR "expected ${BENCH_ROWS} benchmark rows, got ${rows}\n${shown}")
  endif()
endif()

if(CSV_FILE)
  if(NOT EXISTS "${CSV_FILE}")
    message(FATAL_ERROR "CSV file ${CSV_FILE} was not written\n${shown}")
  endif()
  file(STRINGS "${CSV_FILE}" csv)
  list(LENGTH csv n)
  math(EXPR data "${n} - 1")
  list(GET csv 0 header)
  if(NOT header MATCHES "${CSV_HEADER_REGEX}")
    message(FATAL_ERROR "unexpected CSV header '${header}'")
  endif()
  if(DEFINED CSV_ROWS AND NOT data EQUAL CSV_ROWS)
    message(FATAL_ERROR "expected ${CSV_ROWS} CSV rows, got ${data}: ${csv}")
  endif()
endif()

if(OUT_FILE)
  if(NOT EXISTS "${OUT_FILE}")
    message(FATAL_ERROR "${OUT_FILE} was not written\n${shown}")
  endif()
  file(READ "${OUT_FILE}" content)
  if(OUT_FILE_REGEX)
    expect_all("${content}" "${OUT_FILE_REGEX}" "${OUT_FILE}")
  endif()
endif()
