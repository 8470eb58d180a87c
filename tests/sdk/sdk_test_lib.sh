# Helpers shared by the sdk tests (sourced, not run): step headers, failing
# with the evidence, logged commands, a hermetic work directory and the
# install of the project into a fresh prefix.
#
# The sourcing script sets `sdk_test_label` ("sdk model test") first.

step_name=""
# step ID TEXT: starts step ID.
step() {
  step_name=$1
  echo
  echo "=== ${sdk_test_label}, step $1: $2"
}
# fail MESSAGE [LOG]: stops the test naming the step, with LOG's tail.
fail() {
  echo "FAILED in step ${step_name}: $1" >&2
  if [[ $# -gt 1 && -f $2 ]]; then
    echo "----- $2 (last 60 lines) -----" >&2
    tail -n 60 "$2" >&2
  fi
  exit 1
}
# run_logged LOG CMD...: runs a command with its output in LOG; fails the
# step if it fails.
run_logged() {
  local log=$1
  shift
  echo "+ $*"
  local status=0
  "$@" >"$log" 2>&1 || status=$?
  [[ $status -eq 0 ]] || fail "command failed (exit $status): $*" "$log"
}
# fresh_work_dir DIR: an empty DIR, and nothing from the caller's
# environment that could pick plugins, compilers or log levels.
fresh_work_dir() {
  unset TESSERA_PLUGIN_PATH CMAKE_PREFIX_PATH CXXFLAGS LDFLAGS TESSERA_LOG_LEVEL
  rm -rf "$1"
  mkdir -p "$1"
}
# install_project BUILD_DIR PREFIX LOG FILE...: installs the project into
# PREFIX, sets `package_dir` to its cmake/Tessera directory (under lib,
# lib64 or lib/<multiarch>) and checks that every FILE was installed.
install_project() {
  local build_dir=$1 prefix=$2 log=$3
  shift 3
  run_logged "$log" cmake --install "$build_dir" --prefix "$prefix"
  local package
  package=$(find "$prefix" -path '*/cmake/Tessera/TesseraConfig.cmake' | head -n 1)
  [[ -n $package ]] || fail "the install has no cmake/Tessera/TesseraConfig.cmake" "$log"
  package_dir=$(dirname "$package")
  local f
  for f in "$@"; do
    [[ -e $f ]] || fail "the install has no $f" "$log"
  done
}
