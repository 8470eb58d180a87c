#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: install what is missing, build,
# and run the main job — train the quick-start model (examples/quickstart.toml:
# a small GPT on the GPL text, ddp over 4 in-memory ranks). Its metrics and
# checkpoints go to runs/quickstart/ under the repository; extra arguments go
# to `tessera train` (e.g. --set run.steps=50).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

install_dependencies
configure_and_build "$TESSERA_BUILD_DIR"

tessera="$TESSERA_BUILD_DIR/bin/tessera"
cd "$TESSERA_ROOT"
log "tessera train examples/quickstart.toml"
"$tessera" train examples/quickstart.toml "$@"
