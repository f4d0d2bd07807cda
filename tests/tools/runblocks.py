"""The row ids in each sorted-run block of an embfs spill device file.

run_blocks(path, rs) -> {offset: [row ids]}: every 4 KiB block past the
first that starts with the run-block magic 'RBLK', its record count at +4
and its records (16-byte header: row id, batch; then the row's rs bytes)
from +16 (layout.h: struct emb_rblk, EMB_RBLK_MAGIC).  For the tests that
damage a run block on purpose (range.sh, fsck.sh)."""
import struct


def run_blocks(path, rs):
    d = open(path, 'rb').read()
    rec = 16 + rs
    blocks = {}
    for off in range(4096, len(d) - 4096 + 1, 4096):
        if d[off:off + 4] != b'RBLK':
            continue
        n = struct.unpack_from('<I', d, off + 4)[0]
        blocks[off] = [struct.unpack_from('<Q', d, off + 16 + i * rec)[0]
                       for i in range(min(n, (4096 - 16) // rec))]
    return blocks


def flip_row(path, blocks, rs, row):
    """Flip one data byte (the 8th) of row's record in every block of
    blocks (run_blocks' answer) that holds it; the offsets of those
    blocks."""
    rec = 16 + rs
    hold = [off for off, rows in blocks.items() if row in rows]
    with open(path, 'r+b') as f:
        for off in hold:
            at = off + 16 + blocks[off].index(row) * rec + 16 + 7
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0x5a]))
    return hold
