"""What every S3 implementation of ``Objects`` shares (objects_s3.py picks one): keys below the location's
prefix, the listing's filter, and its failures as one line each."""

from __future__ import annotations

from ..core.errors import StorageError
from .location import Location
from .objects import PARTIAL_SUFFIX, Listed, Objects, check_key
from .s3errors import _AUTH, _DENIED, no_bucket, transient_answer


class S3Base(Objects):
    """What every implementation shares: keys below the location's prefix, the listing's filter, messages."""

    location: Location
    endpoint: str | None

    def _key(self, rel: str) -> str:
        check_key(rel)
        return f"{self.location.path}/{rel}" if self.location.path else rel

    def _prefix(self, prefix: str) -> str:
        """The key prefix of a folder's relative name ('' for the whole location)."""
        base = f"{self.location.path}/" if self.location.path else ""
        return base + (check_key(prefix.strip("/")) + "/" if prefix.strip("/") else "")

    def _listed(self, key: str, size: int, etag: str | None) -> Listed | None:
        base = f"{self.location.path}/" if self.location.path else ""
        if not key.startswith(base) or key.endswith(("/", PARTIAL_SUFFIX)):
            return None  # a folder marker or a temporary name
        return Listed(key[len(base):], size, etag)

    def _where(self, rel: str = "") -> str:
        return f"{self.uri.rstrip('/')}/{rel}" if rel else self.uri

    def _unreachable(self, rel: str, why: str, *, transient: bool = True) -> StorageError:
        at = f" at {self.endpoint}" if self.endpoint else ""
        return StorageError(f"{self._where(rel)}: S3{at} failed: {why}", transient=transient)

    def _answered(self, rel: str, status: int, code: str, why: str) -> StorageError:
        """S3 answered with an error: typed by its status and code (no bucket: the bucket's own line)."""
        if code == "NoSuchBucket":
            return no_bucket(self.location.bucket, self.endpoint)
        if code in _DENIED or code in _AUTH or status == 403:
            return self._unreachable(rel, why, transient=False)
        return self._unreachable(rel, why, transient=transient_answer(status, code))

