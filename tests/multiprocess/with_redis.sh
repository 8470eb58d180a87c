#!/usr/bin/env bash
# with_redis.sh COMMAND [ARGS...]: starts a private redis-server on a free
# loopback port, runs COMMAND with every "@REDIS_PORT@" in its arguments
# replaced by that port, stops the server and exits with COMMAND's status.
# The server keeps nothing on disk and dies with this script.
set -euo pipefail

server="$(command -v redis-server || true)"
if [[ -z "$server" ]]; then
  echo "with_redis.sh: redis-server not found (Debian package redis-server)" >&2
  exit 1
fi
workdir="$(mktemp -d)"
pid=""
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$workdir"
}
trap cleanup EXIT

# Try random ports until one binds; redis-server exits at once when a port is taken.
for _ in $(seq 1 20); do
  port=$((20000 + RANDOM % 20000))
  "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir" \
    --logfile "$workdir/redis.log" &
  pid=$!
  for _ in $(seq 1 50); do
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    if grep -q "Ready to accept connections" "$workdir/redis.log" 2>/dev/null; then
      args=()
      for a in "$@"; do args+=("${a//@REDIS_PORT@/$port}"); done
      set +e
      "${args[@]}"
      status=$?
      set -e
      exit "$status"
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
done
echo "with_redis.sh: could not start redis-server on a free port; last log:" >&2
cat "$workdir/redis.log" >&2 || true
exit 1
