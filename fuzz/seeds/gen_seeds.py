#!/usr/bin/env python3
"""Writes the checked-in seed corpus for the fuzz targets: valid NBD handshakes (what a client sends after the
server's greeting: client flags, then options) and valid transmission request headers.
Regenerate with `python3 fuzz/seeds/gen_seeds.py`; the files are a few hundred bytes in all."""

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
IHAVEOPT = 0x49484156454F5054
REQUEST_MAGIC = 0x25609513
OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_INFO, OPT_GO, OPT_STRUCTURED_REPLY = 1, 2, 3, 6, 7, 8
OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT = 9, 10
FLAGS = struct.pack(">I", 3)  # FIXED_NEWSTYLE | NO_ZEROES


def opt(code, data=b""):
    return struct.pack(">QII", IHAVEOPT, code, len(data)) + data


def go_data(name, infos=()):
    n = name.encode()
    return struct.pack(">I", len(n)) + n + struct.pack(">H", len(infos)) + b"".join(struct.pack(">H", i) for i in infos)


def meta_data(name, queries):
    n = name.encode()
    body = struct.pack(">I", len(n)) + n + struct.pack(">I", len(queries))
    for q in queries:
        body += struct.pack(">I", len(q)) + q.encode()
    return body


def req(flags, typ, cookie, offset, length):
    return struct.pack(">IHHQQI", REQUEST_MAGIC, flags, typ, cookie, offset, length)


NEGOTIATION = {
    "export_name": FLAGS + opt(OPT_EXPORT_NAME, b"a"),
    "go_default": FLAGS + opt(OPT_GO, go_data("")),
    "list_then_abort": FLAGS + opt(OPT_LIST) + opt(OPT_ABORT),
    "info_then_go": FLAGS + opt(OPT_INFO, go_data("b", (0, 1, 2, 3))) + opt(OPT_GO, go_data("a", (3,))),
    "structured_meta_go": FLAGS
    + opt(OPT_STRUCTURED_REPLY)
    + opt(OPT_LIST_META_CONTEXT, meta_data("a", ["base:"]))
    + opt(OPT_SET_META_CONTEXT, meta_data("a", ["base:allocation"]))
    + opt(OPT_GO, go_data("a"))
    + req(0, 0, 1, 0, 4096),
}
REQUESTS = {
    "read": req(0, 0, 1, 0, 4096),
    "write_fua": req(1, 1, 2, 8192, 512),
    "flush_trim_zeroes": req(0, 3, 3, 0, 0) + req(0, 4, 4, 4096, 4096) + req(0x12, 6, 5, 0, 1 << 20),
    "block_status_disc": req(8, 7, 6, 0, 1 << 20) + req(0, 2, 7, 0, 0),
}

for target, seeds in (("nbd_negotiation", NEGOTIATION), ("nbd_request", REQUESTS)):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name + ".bin"), "wb") as f:
            f.write(data)
