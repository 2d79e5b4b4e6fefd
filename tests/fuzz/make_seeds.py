#!/usr/bin/env python3
"""make_seeds.py -- writes the initial seed corpora of the fuzz harnesses.

Usage: tests/fuzz/make_seeds.py NAME [COUNT]   (writes tests/fuzz/corpus_NAME/seed_*)

Seeds are deterministic (fixed random seed per harness): each begins with one
configuration byte per harness-defined field, swept over all values, followed by
random operation bytes. libFuzzer grows the corpus from them; inputs that found
crashes are added by hand as crash_<what> files, never by this script."""
import os
import random
import sys

CFG_BYTES = {"heap": 2, "binned": 1, "linear": 1, "hhmap": 0, "vheap": 1}

def main():
    name = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 24
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus_" + name)
    os.makedirs(out, exist_ok=True)
    rng = random.Random(0x48484541 + sum(map(ord, name)))
    for i in range(count):
        cfg = bytes(((i * 37 + k * 11) & 0xFF) if k == 0 else rng.randrange(256) for k in range(CFG_BYTES[name]))
        body = bytes(rng.randrange(256) for _ in range(rng.choice([32, 128, 512, 1536])))
        with open(os.path.join(out, "seed_%02d" % i), "wb") as f:
            f.write(cfg + body)

if __name__ == "__main__":
    main()
