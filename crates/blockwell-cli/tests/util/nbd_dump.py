"""Reads a whole NBD export to standard output (for the kill -9 tests' check). Usage: nbd_dump.py URI"""

import sys

import nbd

h = nbd.NBD()
h.connect_uri(sys.argv[1])
size = h.get_size()
out = sys.stdout.buffer
off = 0
while off < size:
    n = min(4 << 20, size - off)
    out.write(h.pread(n, off))
    off += n
out.flush()
