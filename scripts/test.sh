#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: install what is missing, check
# formatting, build everything with warnings as errors (g++), run clang-tidy
# and the whole test suite, then build the in-process test layers with clang
# under AddressSanitizer + UndefinedBehaviorSanitizer and under
# ThreadSanitizer and run them there. The wall time of every phase and the
# total are printed at the end (docs/testing.md says what each phase covers
# and what it costs).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

phase "install check"
install_dependencies

phase "format check (clang-format)"
"$TESSERA_ROOT/scripts/format.sh" --check

phase "configure $TESSERA_BUILD_DIR"
configure "$TESSERA_BUILD_DIR" -DTESSERA_WERROR=ON -DTESSERA_TESTS_OPTIMIZATION=-O1
phase "build (g++, -Werror, every target)"
build "$TESSERA_BUILD_DIR"
phase "clang-tidy"
"$TESSERA_ROOT/scripts/tidy.sh" "$TESSERA_BUILD_DIR"
phase "tests (every label)"
ctest --test-dir "$TESSERA_BUILD_DIR" --output-on-failure -j "$TESSERA_JOBS" --timeout 600

# Sanitizer builds of the in-process test layers and the plugins they load
# (target tessera_inprocess_tests); the process-based backends and the CLI
# are not rebuilt there. clang at -O1: the sanitizers' usual level, and
# several times faster to compile than g++ -O2 here; the test code itself
# at -O0 (TESSERA_TESTS_OPTIMIZATION, tests/CMakeLists.txt), a third of the
# -O1 compile time for code that mostly runs once.
sanitized_labels="unit|conformance|train|strategies"
# Left out under the sanitizers (the plain build runs all of them):
# - the tests that compare memory estimates with measured peaks: they run the
#   training paths that the equivalence suites already run there;
# - the equivalence sweeps over llama: the sharding, pipeline and hybrid
#   paths they run are the model-independent ones gpt and mlp run, and
#   llama's own kernels are the model tests' (label unit);
# - the equivalence suites again with two intra-op threads per rank
#   (`threads2.`) under ASan, where the second thread finds nothing new, and
#   under TSan all but the two-rank ones.
sanitized_exclude='^(threads2[.])?(EstimateTest|EstimateParallel|CheckpointingPeak)[.]|Equivalence.*llama'
asan_exclude="$sanitized_exclude|^threads2[.]"
# Under TSan also:
# - checkpoint.python_reader, whose writer is one of the single-threaded
#   targets that tree does not build;
# - the strategies' option, byte, traffic, memory, dtype and resume suites,
#   and the byte counts of compression and of the hierarchical collectives:
#   they vary what is counted, cast or saved over the same threaded
#   collectives and runners the equivalence suites run there (ASan and the
#   plain build run them).
tsan_strategy_suites='(Ddp|Fsdp|Hybrid|Pipeline|Tensor|Zero1|Zero2|Zero3|AsyncSgd)(Options|Bytes|Traffic|Memory|Resume)|FsdpDtype|ShardedReshard|StrategyResume'
tsan_exclude="$sanitized_exclude|^threads2[.].*world[134]|^checkpoint[.]python_reader$"
tsan_exclude="$tsan_exclude|^(threads2[.])?([A-Za-z]+/)?($tsan_strategy_suites)[.]"
tsan_exclude="$tsan_exclude|^Compression[.]BytesSent|^Hierarchy[.].*Bytes"
run_sanitized() {
  local name="$1" sanitizers="$2" exclude="$3" target="$4"
  local dir="$TESSERA_BUILD_DIR-$name"
  phase "$name build (clang, -fsanitize=$sanitizers)"
  configure "$dir" -DTESSERA_WERROR=ON "-DTESSERA_SANITIZE=$sanitizers" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DTESSERA_TESTS_OPTIMIZATION=-O0 \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  build "$dir" "$target"
  phase "$name tests ($sanitized_labels)"
  ctest --test-dir "$dir" --output-on-failure -j "$TESSERA_JOBS" --timeout 600 \
    -L "$sanitized_labels" -E "$exclude"
}
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
run_sanitized asan "address;undefined" "$asan_exclude" tessera_inprocess_tests
# ThreadSanitizer only where threads meet: tessera_threaded_tests leaves out
# the test layers that run on one thread (tests/CMakeLists.txt); their tests
# are then not registered in that tree, so the same labels select the rest.
run_sanitized tsan "thread" "$tsan_exclude" tessera_threaded_tests
log "all tests passed"
