#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: install what is missing, build
# with warnings as errors, check formatting and clang-tidy, run the whole test
# suite, then rebuild the threaded code under AddressSanitizer +
# UndefinedBehaviorSanitizer and ThreadSanitizer and run the fast tests there.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

install_dependencies

log "checking formatting (clang-format)"
"$TESSERA_ROOT/scripts/format.sh" --check

configure_and_build "$TESSERA_BUILD_DIR" -DTESSERA_WERROR=ON
log "running clang-tidy"
"$TESSERA_ROOT/scripts/tidy.sh" "$TESSERA_BUILD_DIR"
log "running the test suite"
ctest --test-dir "$TESSERA_BUILD_DIR" --output-on-failure -j "$TESSERA_JOBS" --timeout 600

# Sanitizer builds of the in-process test layers (and the plugins they load);
# those layers run there. Process-based backends and the CLI are not rebuilt.
run_sanitized() {
  local name="$1" sanitizers="$2" labels="$3"
  local dir="$TESSERA_BUILD_DIR-$name"
  log "building with -fsanitize=$sanitizers in $dir"
  cmake -S "$TESSERA_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTESSERA_WERROR=ON "-DTESSERA_SANITIZE=$sanitizers"
  cmake --build "$dir" -j "$TESSERA_JOBS" --target tessera_inprocess_tests
  log "running labels '$labels' under $name"
  ctest --test-dir "$dir" --output-on-failure -j "$TESSERA_JOBS" --timeout 600 -L "$labels"
}
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
run_sanitized asan "address;undefined" "unit|conformance|train|strategies"
run_sanitized tsan "thread" "unit|conformance|train|strategies"
log "all tests passed"
