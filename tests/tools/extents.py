#!/usr/bin/python3
"""A table's stored rows as its SEEK_DATA/SEEK_HOLE extents (e2e tests).

    extents.py FILE          one "start end" line per extent of data
    extents.py --rows PATH   rows stored (extents / user.embfs.row_size); for a
                             directory, the sum over its tables (names not
                             starting with a dot)
"""
import os
import sys


def extents(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        o, end = 0, os.fstat(fd).st_size
        while o < end:
            try:
                o = os.lseek(fd, o, os.SEEK_DATA)
            except OSError:  # ENXIO: no data past o
                return
            h = os.lseek(fd, o, os.SEEK_HOLE)
            yield o, h
            o = h
    finally:
        os.close(fd)


def rows(path):
    rs = int(os.getxattr(path, "user.embfs.row_size"))
    return sum((h - o) // rs for o, h in extents(path))


def main(argv):
    if len(argv) == 3 and argv[1] == "--rows":
        p = argv[2]
        if os.path.isdir(p):
            print(sum(rows(os.path.join(p, n)) for n in sorted(os.listdir(p))
                      if not n.startswith(".") and os.path.isfile(os.path.join(p, n))))
        else:
            print(rows(p))
    elif len(argv) == 2:
        for o, h in extents(argv[1]):
            print(o, h)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
