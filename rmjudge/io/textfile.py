"""Small text files an option names (`--criteria @FILE`, `--prompt-template`,
`--chat-template`), read whole and bounded.

Such a file is a short piece of text, so it is read into memory whole; `read_text_file` refuses,
before reading a byte of it, anything that is not a regular file (`/dev/zero`, a FIFO, a
folder, a socket: reading one could block or never end) and a file over `TEXT_FILE_LIMIT`
(1 MiB; a sparse file of any apparent size included), and it reads at most one byte more than
the limit, so a file that grows while it is read is refused too. The text is decoded as UTF-8
with universal newlines, as `open(path, encoding="utf-8")` reads it.
"""

from __future__ import annotations

import io
import os
import stat

from rmjudge.core.errors import UserError

TEXT_FILE_LIMIT = 1 << 20  # bytes: 1 MiB

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"))


def size_words(n: int) -> str:
    """A byte count as a person reads it ("1 MiB", "8.0 GiB", "512 bytes")."""
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def read_text_file(path: str, what: str, fix: str, error: type[UserError] = UserError,
                   limit: int = TEXT_FILE_LIMIT) -> str:
    """The UTF-8 text of the regular file `path`, at most `limit` bytes; anything else raises
    `error` with one line: `what` (the option as given, e.g. "--criteria @rubric.txt"), the
    fault, and `fix` (what to give instead)."""
    try:
        # O_NONBLOCK: opening a FIFO for reading does not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"{what}: cannot read {path} ({exc.strerror or exc}); {fix}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a plain file")
            raise error(f"{what}: {path} is not a regular file ({kind}); {fix}")
        if st.st_size > limit:
            raise error(f"{what}: {path} is {size_words(st.st_size)}, over the "
                        f"{size_words(limit)} limit of this option; {fix}")
        chunks, n = [], 0
        while n <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - n))
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
        if n > limit:  # it grew while being read
            raise error(f"{what}: {path} is over the {size_words(limit)} limit of this option; "
                        f"{fix}")
    except OSError as exc:
        raise error(f"{what}: cannot read {path} ({exc.strerror or exc}); {fix}") from None
    finally:
        os.close(fd)
    try:
        return io.TextIOWrapper(io.BytesIO(b"".join(chunks)), encoding="utf-8").read()
    except UnicodeDecodeError as exc:
        raise error(f"{what}: cannot read {path} (not UTF-8 text: {exc.reason} at byte "
                    f"{exc.start}); {fix}") from None
