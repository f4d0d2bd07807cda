"""embfs.errors: the package's exceptions.

EmbfsError is an OSError (.errno, .strerror, .filename = the table's or
snapshot's path); BadArgument (also a ValueError) and BadType (also a
TypeError) are the EINVAL ones raised for arguments refused before anything
is sent.  _oserror turns an OSError of a file call into an EmbfsError that
says what was being done.
"""
import errno as _errno
import os


class EmbfsError(OSError):
    """An operation on a table or the mount failed: .errno says why, the
    message names the table (or snapshot) and the cause."""

    def __init__(self, err, msg, path=None):
        super().__init__(err, msg, path) if path else super().__init__(err, msg)


class BadArgument(EmbfsError, ValueError):
    """Ids or rows that cannot be sent (errno EINVAL); nothing was changed."""

    def __init__(self, msg, path=None):
        super().__init__(_errno.EINVAL, msg, path)


class BadType(EmbfsError, TypeError):
    """Rows of the wrong dtype, or ids that are not integers (EINVAL)."""

    def __init__(self, msg, path=None):
        super().__init__(_errno.EINVAL, msg, path)


def _oserror(e, what, path=None):
    return EmbfsError(e.errno, f"{what}: {os.strerror(e.errno)}", path)
