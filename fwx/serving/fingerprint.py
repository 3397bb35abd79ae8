"""What identifies one state of a version folder on disk, so a FAILED version is retried when it changes.

A version copied with plain ``cp`` shows its ``fwx.json`` before its model
file is complete; the load then fails on a checksum mismatch. Keyed on
``fwx.json`` alone that failure was final. The fingerprint therefore covers
every file of the folder (path, size, mtime): when the copy finishes, the
fingerprint changes and the next poll retries the version once more. A
version whose files stop changing and still fail stays FAILED (no retry loop).
Publishing with an atomic rename (what ``fwx export`` does) never shows a
half-written version at all.
"""

from __future__ import annotations

import os
from pathlib import Path

#: (inode of fwx.json, then (relative path, size, mtime_ns) of every file, sorted).
Fingerprint = tuple[object, ...]

#: Walk at most this many entries per version: a fingerprint must stay cheap on every poll.
MAX_ENTRIES = 10_000


def fingerprint(folder: Path, manifest: os.stat_result) -> Fingerprint:
    """The fingerprint of ``folder`` whose ``fwx.json`` stat is ``manifest``; symlinks are not followed."""
    files: list[tuple[str, int, int]] = []
    stack = [folder]
    seen = 0
    while stack and seen < MAX_ENTRIES:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
            else:
                files.append((os.path.relpath(entry.path, folder), st.st_size, st.st_mtime_ns))
    return (manifest.st_ino, *sorted(files))
