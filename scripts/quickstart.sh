#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: install what is missing, build
# what `tessera train` needs (the CLI and the plugins, not the test suite;
# target tessera_runtime), and run the main job: train the quick-start model
# (examples/quickstart.toml: a small GPT on the GPL text, ddp over 4
# in-memory ranks). Its metrics and checkpoints go to runs/quickstart/ under
# the repository; extra arguments go to `tessera train` (e.g. --set
# run.steps=50). The same build directory serves scripts/test.sh, which
# builds the rest.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

phase "install check"
install_dependencies
phase "configure $TESSERA_BUILD_DIR"
configure "$TESSERA_BUILD_DIR"
phase "build (CLI and plugins)"
build "$TESSERA_BUILD_DIR" tessera_runtime

phase "tessera train examples/quickstart.toml"
cd "$TESSERA_ROOT"
"$TESSERA_BUILD_DIR/bin/tessera" train examples/quickstart.toml "$@"
