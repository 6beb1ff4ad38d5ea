"""A libnbd client for the kill -9 tests: writes verifiable patterns at queue depth 1 until the server goes away.

Every 512-byte sector written holds (write id, sector number) repeated, so a reader can tell which write a sector
holds. The client prints one line per event, flushed at once, so that the test knows what was issued and what was
acknowledged when the server was killed:

  w ID OFFSET LENGTH FUA   a write is about to be sent
  W ID                     it was acknowledged
  f / F                    a flush is about to be sent / was acknowledged

Usage: python3 nbd_writer.py URI SIZE SEED FIRST_ID
"""

import random
import struct
import sys

import nbd


def pattern(wid, offset, length):
    out = bytearray()
    for s in range(offset // 512, (offset + length) // 512):
        out += struct.pack("<QQ", wid, s) * 32
    return bytes(out)


def main():
    uri, size, seed, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    rnd = random.Random(seed)
    h = nbd.NBD()
    h.connect_uri(uri)
    sectors = size // 512
    hot = sectors // 4
    wid = first
    try:
        while True:
            r = rnd.random()
            if r < 0.12:
                print("f", flush=True)
                h.flush()
                print("F", flush=True)
                continue
            # Mostly a hot quarter (overwrites, dirty blocks), sometimes anywhere (evictions, cleaning).
            start = rnd.randrange(hot) if rnd.random() < 0.7 else rnd.randrange(sectors)
            n = min(rnd.choice([1, 1, 2, 8, 8, 16, 64]), sectors - start)
            fua = rnd.random() < 0.05
            off, length = start * 512, n * 512
            print(f"w {wid} {off} {length} {int(fua)}", flush=True)
            h.pwrite(pattern(wid, off, length), off, nbd.CMD_FLAG_FUA if fua else 0)
            print(f"W {wid}", flush=True)
            wid += 1
    except Exception as e:  # the server was killed
        print(f"# {type(e).__name__}", flush=True)


main()
