"""Recompute hash_vectors.json with the C reference xxHash library (libxxhash)
through ctypes, following the README section "Router block hash"; exit 1 on any mismatch.

Usage: python3 check_hash_vectors.py hash_vectors.json
"""
import ctypes
import ctypes.util
import json
import struct
import sys

lib = ctypes.CDLL(ctypes.util.find_library("xxhash"))
lib.XXH64.restype = ctypes.c_uint64
lib.XXH64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]


def xxh64(data: bytes, seed: int = 0) -> int:
    return lib.XXH64(data, len(data), seed)


def seed(lora: str, ns: str) -> int:
    return xxh64(struct.pack("<QQ", xxh64(lora.encode()), xxh64(ns.encode())))


def mm_hash(ident: str) -> int:
    if len(ident) == 64 and all(c in "0123456789abcdefABCDEF" for c in ident):
        return int(ident[:16], 16)
    return xxh64(ident.encode())


def block_hash(s: int, tokens, mm) -> int:
    data = b"".join(struct.pack("<I", t) for t in tokens)
    data += b"".join(struct.pack("<Q", h) for h in mm)
    return xxh64(data, s)


def hash_prompt(s, tokens, bs, items):
    out = []
    for start in range(0, len(tokens) - bs + 1, bs):
        end = start + bs
        mm = [h for (h, off, ln) in items if ln > 0 and off < end and off + ln > start]
        out.append(block_hash(s, tokens[start:end], mm))
    return out


def main() -> int:
    v = json.load(open(sys.argv[1]))
    bad = 0
    n = 0
    for e in v["seeds"]:
        n += 1
        if seed(e["lora_name"], e["cache_namespace"]) != int(e["seed"], 16):
            print("seed mismatch", e)
            bad += 1
    for e in v["mm_hashes"]:
        n += 1
        if mm_hash(e["id"]) != int(e["hash"], 16):
            print("mm hash mismatch", e)
            bad += 1
    for e in v["block_hashes"]:
        n += 1
        mm = [int(h, 16) for h in (e["mm"] or [])]
        if block_hash(int(e["seed"], 16), e["tokens"], mm) != int(e["hash"], 16):
            print("block hash mismatch", e)
            bad += 1
    for e in v["prompts"]:
        n += 1
        items = [(mm_hash(i["id"]), i["offset"], i["length"]) for i in (e["mm_items"] or [])]
        got = hash_prompt(seed(e["lora_name"], e["cache_namespace"]), e["tokens"], e["block_size"], items)
        if got != [int(h, 16) for h in (e["hashes"] or [])]:
            print("prompt mismatch", e)
            bad += 1
    print(f"{n} vectors checked with libxxhash, {bad} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
