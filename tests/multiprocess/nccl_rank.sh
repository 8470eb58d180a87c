#!/bin/sh
# Starts one rank of a multi-process nccl test (under `tessera launch`).
# With at least as many GPUs as local ranks, each rank takes its own
# (LOCAL_RANK). With fewer, every rank plays a machine of its own on GPU 0:
# a distinct NCCL_HOSTID makes NCCL take the ranks for separate hosts, so it
# accepts them on one device and connects them through its socket
# transport (over loopback unless NCCL_SOCKET_IFNAME says otherwise).
gpus=$(ls /dev 2>/dev/null | grep -c '^nvidia[0-9][0-9]*$')
if [ "${LOCAL_WORLD_SIZE:-1}" -gt "$gpus" ]; then
  NCCL_HOSTID="${TESSERA_RUN_ID:-tessera}-node-${RANK:-0}"
  LOCAL_RANK=0
  NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
  export NCCL_HOSTID LOCAL_RANK NCCL_SOCKET_IFNAME
fi
exec "$@"
