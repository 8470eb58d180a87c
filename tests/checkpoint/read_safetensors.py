#!/usr/bin/env python3
"""Reads a safetensors file with nothing but the Python standard library and
prints its metadata and, per tensor in data order, name, dtype, shape and the
sum of its elements. Checks the layout on the way: header length within the
file, header padded to a multiple of 8, tensors tiling the data section, and
each tensor's byte size equal to dtype size times the number of elements.

Usage: read_safetensors.py FILE
"""
import json
import struct
import sys

# struct format character and element size of each dtype
FORMATS = {"F64": ("d", 8), "F32": ("f", 4), "F16": ("e", 2), "BF16": ("H", 2),
           "I64": ("q", 8), "I32": ("i", 4), "U8": ("B", 1)}


def bf16_to_float(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def main(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise SystemExit(f"{path}: header length {n} exceeds the file")
    if n % 8 != 0:
        raise SystemExit(f"{path}: header length {n} is not a multiple of 8")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    for key, value in sorted(header.pop("__metadata__", {}).items()):
        print(f"metadata {key}={value}")
    position = 0
    for name, entry in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        begin, end = entry["data_offsets"]
        if begin != position:
            raise SystemExit(f"{path}: tensor {name} starts at {begin}, expected {position}")
        fmt, size = FORMATS[entry["dtype"]]
        count = 1
        for dim in entry["shape"]:
            count *= dim
        if end - begin != count * size:
            raise SystemExit(f"{path}: tensor {name} has {end - begin} bytes, expected {count * size}")
        values = struct.unpack(f"<{count}{fmt}", data[begin:end])
        if entry["dtype"] == "BF16":
            values = [bf16_to_float(v) for v in values]
        total = sum(values)
        shown = str(total) if entry["dtype"] in ("I64", "I32", "U8") else format(float(total), "g")
        print(f"tensor {name} {entry['dtype']} {entry['shape']} sum={shown}")
        position = end
    if position != len(data):
        raise SystemExit(f"{path}: {len(data) - position} bytes after the last tensor")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
