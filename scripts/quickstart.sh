#!/usr/bin/env bash
# One command on a fresh Debian 12 machine: install what is missing, build,
# and run the main job — list the plugins, then benchmark allreduce on the
# in-memory backend.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

install_dependencies
configure_and_build "$TESSERA_BUILD_DIR"

tessera="$TESSERA_BUILD_DIR/bin/tessera"
log "tessera plugins"
"$tessera" plugins
log "tessera bench collectives (in-memory backend, 2 ranks)"
"$tessera" bench collectives --backend inmemory --ranks 2 --op allreduce --sizes 1M:64M
