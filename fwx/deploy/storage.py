"""Where the repository comes from: the storage URIs KServe's storage initializer understands.

fwx itself only ever reads a local folder (``/mnt/models``); getting the
files there is the engine's job. A ``pvc://CLAIM/PATH`` is mounted read-only;
anything else the initializer handles is copied by it into an ``emptyDir``
before ``fwx serve`` starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from fwx.errors import UsageError

#: Schemes KServe's storage initializer downloads (plus pvc://, which it mounts).
SCHEMES = ("s3", "gs", "pvc", "https", "http", "hdfs", "webhdfs", "hf", "oci")
STORAGE_INITIALIZER = "kserve/storage-initializer:v0.20.0"


@dataclass(frozen=True)
class StorageUri:
    uri: str
    scheme: str
    claim: str = ""  # pvc:// only
    sub_path: str = ""  # pvc:// only: the repository's folder inside the claim

    @property
    def is_pvc(self) -> bool:
        return self.scheme == "pvc"


def parse_storage_uri(uri: str) -> StorageUri:
    """Check the URI names a repository an engine can fetch; a local path is refused with the fix."""
    if not uri.isprintable() or any(c.isspace() for c in uri):
        raise UsageError(
            f"{uri!r} holds whitespace or control characters", hint="percent-encode them (%20, %0A) in the URI"
        )
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise UsageError(
            f"{uri!r} is not a storage URI a cluster can read",
            hint="copy the repository (the folder `fwx export --out` wrote) to object storage or a "
            "volume and pass s3://..., gs://..., pvc://CLAIM/PATH or https://...",
        )
    if not rest.strip("/"):
        raise UsageError(f"{uri!r} names no bucket, claim or host", hint="e.g. s3://bucket/fwx-artifacts")
    if scheme != "pvc":
        return StorageUri(uri, scheme)
    claim, _, sub = rest.partition("/")
    return StorageUri(uri, scheme, claim, sub.strip("/"))
