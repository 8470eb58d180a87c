#!/bin/sh
# Runs its arguments when this machine has an NVIDIA GPU (/dev/nvidia0);
# otherwise says why and exits 77, which CTest reports as a skip.
if [ ! -e /dev/nvidia0 ]; then
  echo "skipped: no NVIDIA GPU here (/dev/nvidia0 missing); the nccl tests need one"
  exit 77
fi
exec "$@"
