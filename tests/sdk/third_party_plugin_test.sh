#!/usr/bin/env bash
# End-to-end test of the installed SDK: installs the whole project into a
# fresh prefix, builds examples/third_party_plugin against that prefix with
# clang++ and libc++, checks the plugin's ELF (libc++ only, one exported
# symbol), then loads and runs it with the INSTALLED tessera CLI and the
# backend conformance suite.
#
# Usage: third_party_plugin_test.sh <tessera build dir> <example source dir>
#            <work dir> <cmake generator> [<conformance test binary>]
# Every step prints what it does; the first failing check stops the test with
# a message naming the step and showing the evidence.
set -euo pipefail

if [[ $# -lt 4 ]]; then
  echo "usage: $0 BUILD_DIR EXAMPLE_DIR WORK_DIR GENERATOR [CONFORMANCE_EXE]" >&2
  exit 2
fi
build_dir=$1
example_dir=$2
work=$3
generator=$4
conformance=${5:-}

sdk_test_label="sdk test"
# shellcheck source=tests/sdk/sdk_test_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/sdk_test_lib.sh"

# Hermetic: nothing from the caller's environment picks plugins or compilers.
fresh_work_dir "$work"
prefix=$work/prefix
plugin_dir=$work/plugins.d
example_build=$work/example-build
plugin_file=libtessera_backend_example_threads.so

step a "install the project into a fresh prefix"
install_project "$build_dir" "$prefix" "$work/install.log" "$prefix/bin/tessera" \
  "$prefix/include/tessera/c/backend.h" "$prefix/include/tessera/sdk/backend.hpp"
for f in TesseraConfigVersion.cmake TesseraTargets.cmake TesseraAddPlugin.cmake tessera_plugin.map; do
  [[ -e $package_dir/$f ]] || fail "the install has no $package_dir/$f" "$work/install.log"
done
echo "installed: $(find "$prefix" -type f | wc -l) files, package in $package_dir"

step b "build examples/third_party_plugin with clang++ and libc++ against the prefix"
command -v clang++ >/dev/null || fail "clang++ is not installed (Debian: clang, libc++-dev, libc++abi-dev)"
CC=clang CXX=clang++ run_logged "$work/configure.log" \
  cmake -S "$example_dir" -B "$example_build" -G "$generator" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS=-stdlib=libc++ \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -DEXAMPLE_THREADS_WERROR=ON
cache=$example_build/CMakeCache.txt
grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$cache" ||
  fail "the example was not configured with clang++: $(grep '^CMAKE_CXX_COMPILER:' "$cache")"
grep -qx "Tessera_DIR:PATH=$package_dir" "$cache" ||
  fail "find_package(Tessera) did not use the fresh prefix: $(grep '^Tessera_DIR' "$cache")"
run_logged "$work/build.log" cmake --build "$example_build" -j2
built=$example_build/$plugin_file
[[ -f $built ]] || fail "the build produced no $plugin_file" "$work/build.log"
echo "built: $built"

step c "the plugin links libc++ (not libstdc++), the host libstdc++; one exported symbol"
needed=$(readelf -d "$built" | grep NEEDED || true)
echo "$needed"
grep -q 'libc++\.so\.1' <<<"$needed" || fail "the plugin does not need libc++.so.1"
if grep -q 'libstdc++' <<<"$needed"; then fail "the plugin needs libstdc++"; fi
if ldd "$built" | grep -q 'libstdc++'; then
  fail "libstdc++ is among the plugin's libraries: $(ldd "$built")"
fi
host_needed=$(readelf -d "$prefix/bin/tessera" | grep NEEDED || true)
grep -q 'libstdc++\.so' <<<"$host_needed" ||
  fail "the installed host does not use libstdc++: $host_needed"
echo "host: $(grep -o 'libstdc++[^]]*' <<<"$host_needed")"
exports=$(nm -D --defined-only "$built" | awk '{print $NF}')
echo "exported: $exports"
[[ $exports == "tessera_plugin_entry" ]] ||
  fail "the plugin must export only tessera_plugin_entry, it exports: $(tr '\n' ' ' <<<"$exports")"
# std::exception_ptr is unsafe when the plugin's C++ runtime differs from the
# host's (docs/sdk.md, "A plugin with another C++ runtime than the host").
unsafe=$(nm -D --undefined-only "$built" | grep -E '_ZSt17(current|rethrow)_exception' || true)
[[ -z $unsafe ]] || fail "the plugin uses std::exception_ptr across runtimes: $unsafe"

step d "the installed CLI loads the plugin from a fresh directory"
mkdir -p "$plugin_dir"
cp "$built" "$plugin_dir/"
run_logged "$work/plugins.log" "$prefix/bin/tessera" plugins --plugin-path "$plugin_dir"
cat "$work/plugins.log"
awk -v file="$plugin_dir/$plugin_file" \
  '$1 == "backend" && $2 == "example_threads" && $6 == "loaded" && $7 == file { found = 1 }
   END { exit found ? 0 : 1 }' "$work/plugins.log" ||
  fail "example_threads is not listed as a loaded backend from $plugin_dir" "$work/plugins.log"
run_logged "$work/describe.log" "$prefix/bin/tessera" plugins --plugin-path "$plugin_dir" \
  --describe example_threads
grep -q 'check_calls' "$work/describe.log" ||
  fail "--describe does not show the declared option check_calls" "$work/describe.log"

step e "tessera bench collectives: allreduce over 3 thread ranks, no wrong elements"
run_logged "$work/bench.log" "$prefix/bin/tessera" bench collectives --backend example_threads \
  --plugin-path "$plugin_dir" --ranks 3 --op allreduce --sizes 1K:64K --iters 2 --warmup 1
cat "$work/bench.log"
# Rows are the non-comment lines after the title; #wrong is the last column.
awk '/^#/ { next }
     $NF == "#wrong" { title = 1; next }
     title && NF > 0 { rows++; if ($NF != "0") bad++ }
     END { if (!title) { print "no table title with #wrong"; exit 1 }
           if (rows == 0) { print "no result rows"; exit 1 }
           if (bad > 0) { print bad " of " rows " rows have wrong elements"; exit 1 }
           print rows " rows, #wrong 0 on every row" }' "$work/bench.log" ||
  fail "the benchmark's correctness check failed" "$work/bench.log"

step f "the backend conformance suite on example_threads"
if [[ -z $conformance ]]; then
  fail "no conformance test binary was given (target tessera_conformance_tests is missing)"
fi
[[ -x $conformance ]] || fail "conformance test binary $conformance does not exist"
echo "+ TESSERA_PLUGIN_PATH=$plugin_dir $conformance --gtest_filter='*example_threads*'"
if ! TESSERA_PLUGIN_PATH="$plugin_dir" "$conformance" --gtest_filter='*example_threads*' \
  --gtest_brief=1 >"$work/conformance.log" 2>&1; then
  fail "conformance cases failed on example_threads" "$work/conformance.log"
fi
tail -n 5 "$work/conformance.log"
passed=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) test.*/\1/p' "$work/conformance.log")
[[ -n $passed && $passed -gt 0 ]] ||
  fail "no conformance case ran for example_threads (filter matched nothing?)" \
    "$work/conformance.log"
if grep -q '^\[  SKIPPED \]' "$work/conformance.log"; then
  fail "conformance cases were skipped for example_threads" "$work/conformance.log"
fi
echo "conformance: $passed cases passed"

echo
echo "=== sdk test: all steps passed"
