"""An S3 location as a ``Store``: listed through s3light (credentials in the environment) or botocore, read and
written through botocore, downloaded through the first engine that can serve the endpoint (engines.py).

Credentials come from the standard AWS chain (environment, ``~/.aws``, SSO, instance role); an S3-compatible
server (MinIO, moto, ...) is named by ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` or the job's
``storage_endpoint``. Nothing here ever prints a credential. botocore is imported only when needed.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

from ..core.errors import RtjobError
from ..jobspec.run_env import endpoint_from_env
from .botocore_engine import make_client
from .location import Location
from .s3errors import s3_error
from .stores import DoneFn, ProgressFn, RemoteFile, Store, check_rel, read_capped, too_large


class S3Store(Store):
    """An S3 location. botocore is imported only when needed: a pull whose credentials and endpoint the
    environment gives (s3light.target_for) lists through s3light and reads through obstore without it."""

    def __init__(self, location: Location, endpoint: str | None = None, concurrency: int = 16) -> None:
        self.location = location
        self.endpoint = endpoint or endpoint_from_env()  # the client's AWS_ENDPOINT_URL[_S3], if any
        self.concurrency = concurrency
        self.refused = []
        self.special = []
        self.bucket_region: str | None = None  # as the listing's response says (AWS: where the bucket lives)
        self.engine = ""  # which engine downloaded: set by download()
        self._botocore: tuple[Any, Any] | None = None  # (session, client), made on first use
        self._obstore: Any = None
        self.light = self._light_target()

    def _light_target(self) -> Any:
        """s3light's target where obstore serves the endpoint and the environment gives credentials, endpoint and
        region: then s3light lists and obstore reads, without botocore (None: botocore does)."""
        from . import obstore_engine, s3light

        return s3light.target_for(self.location.bucket, self.endpoint) if obstore_engine.serves(self.endpoint) else None

    @property
    def session(self) -> Any:
        return self._clients()[0]

    @property
    def client(self) -> Any:
        return self._clients()[1]

    def _clients(self) -> tuple[Any, Any]:
        if self._botocore is None:
            self._botocore = make_client(self.endpoint, self.concurrency)
        return self._botocore

    def describe(self) -> str:
        return f"{self.location.uri}" + (f" at {self.endpoint}" if self.endpoint else "")

    def _prefix(self) -> str:
        return f"{self.location.path}/" if self.location.path else ""

    def list_files(self) -> list[RemoteFile]:
        prefix = self._prefix()
        if self.light is not None:
            from .s3light import LightError, list_objects

            try:
                listed, region = list_objects(self.light, prefix)
            except LightError:
                self.light = None  # botocore from here on: it lists again, and words whatever went wrong
            else:
                self.bucket_region = region
                return [RemoteFile(key, key[len(prefix):], size, etag) for key, size, etag in listed]
        files: list[RemoteFile] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=prefix
            ):
                headers = (page.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
                self.bucket_region = headers.get("x-amz-bucket-region") or self.bucket_region
                for obj in page.get("Contents", []) or []:
                    key = obj["Key"]
                    files.append(RemoteFile(key, key[len(prefix):], int(obj["Size"]), str(obj.get("ETag", ""))))
        except Exception as exc:
            raise s3_error(exc, self) from None
        return files

    def read(self, item: RemoteFile, limit: int) -> bytes:
        where = f"{self.location.uri}/{item.rel}"
        if item.size > limit:  # refused before the GET: the listing says how big it is
            raise too_large(where, limit)
        if self.light is not None:
            try:
                data = self._obstore_engine().read(item.key, limit)
            except Exception:  # botocore reads it instead, and words what went wrong
                pass
            else:
                return read_capped(io.BytesIO(data), limit, where)
        try:
            body = self.client.get_object(Bucket=self.location.bucket, Key=item.key)["Body"]
            return read_capped(body, limit, where)
        except Exception as exc:
            raise s3_error(exc, self) from None

    def _key(self, rel: str) -> str:
        return self._prefix() + check_rel(rel)

    def put_bytes(self, rel: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.location.bucket, Key=self._key(rel), Body=data)
        except Exception as exc:
            raise s3_error(exc, self) from None

    def get_bytes(self, rel: str, limit: int) -> bytes | None:
        import botocore.exceptions as bex

        try:
            body = self.client.get_object(Bucket=self.location.bucket, Key=self._key(rel))["Body"]
            return read_capped(body, limit, f"{self.location.uri}/{rel}")
        except bex.ClientError as exc:
            if str((exc.response.get("Error", {}) or {}).get("Code", "")) in ("NoSuchKey", "404"):
                return None
            raise s3_error(exc, self) from None
        except Exception as exc:
            raise s3_error(exc, self) from None

    def list_dirs(self, rel: str = "") -> list[str]:
        prefix = self._key(rel) + "/" if rel else self._prefix()
        names: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=prefix, Delimiter="/"
            ):
                for common in page.get("CommonPrefixes", []) or []:
                    name = common["Prefix"][len(prefix):].rstrip("/")
                    if name:  # "prefix//x" lists an empty folder name: nothing rtjob wrote
                        names.append(name)
        except Exception as exc:
            raise s3_error(exc, self) from None
        return sorted(names)

    def download(self, jobs: list[tuple[RemoteFile, Path]], on_progress: ProgressFn | None,
                 on_done: DoneFn) -> None:
        """Through the first engine (engines.py) that can serve the endpoint: obstore, the AWS CRT, botocore."""
        from . import crt, obstore_engine
        from .botocore_engine import BotocoreDownloader

        try:
            if obstore_engine.serves(self.endpoint):
                engine: Any = self._obstore_engine()
                self.engine = "obstore"
            elif crt.unusable_reason(self.client.meta.endpoint_url) is None:
                engine = crt.CrtDownloader(self.session, self.client, self.location.bucket, self.bucket_region)
                self.engine = "crt"
            else:
                engine = BotocoreDownloader(self.client, self.location.bucket, self.concurrency)
                self.engine = "botocore"
        except Exception as exc:
            raise s3_error(exc, self) from None
        engine.download(jobs, on_progress, on_done)

    def same_content(self, item: RemoteFile, path: Path) -> bool:
        return etag_matches(path, item.size, item.etag)

    def translate_error(self, exc: Exception) -> RtjobError:
        return s3_error(exc, self)

    def _obstore_engine(self) -> Any:
        """obstore for this bucket: with the environment's credentials where s3light serves this pull, else with
        botocore's (its whole chain: profiles, SSO, roles), endpoint and the region the listing reported."""
        from .obstore_engine import ObstoreDownloader
        from .s3light import virtual_hostable

        if self._obstore is not None:
            return self._obstore
        bucket = self.location.bucket
        if self.light is not None:
            target = self.light
            self._obstore = ObstoreDownloader(
                bucket, endpoint=target.endpoint, region=target.region, virtual_host=target.virtual_host,
                static=(target.access_key, target.secret_key, target.token), ca_bundle=target.ca_bundle)
            return self._obstore
        from .engines import custom_endpoint

        session, client = self._clients()
        credentials = session.get_credentials()
        if credentials is None:
            import botocore.exceptions

            raise botocore.exceptions.NoCredentialsError()

        def provider() -> tuple[str, str, str | None]:
            frozen = credentials.get_frozen_credentials()  # refreshed by botocore when they expire
            return frozen.access_key, frozen.secret_key, frozen.token

        endpoint = custom_endpoint(str(client.meta.endpoint_url or ""))
        self._obstore = ObstoreDownloader(
            bucket, endpoint=endpoint, region=self.bucket_region or client.meta.region_name or "us-east-1",
            virtual_host=endpoint is None and virtual_hostable(bucket), provider=provider,
            ca_bundle=session.get_config_variable("ca_bundle"))
        return self._obstore


def etag_matches(path: Path, size: int, etag: str) -> bool:
    """Whether a local file has this S3 ETag (plain MD5, or a multipart ETag for a common part size)."""
    import hashlib

    etag = etag.strip('"').lower()
    digest, _, count = etag.partition("-")
    if len(digest) != 32:
        return False  # not an MD5-based ETag (e.g. SSE-KMS): cannot be checked locally
    if not count:
        md5 = hashlib.md5(usedforsecurity=False)
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                md5.update(chunk)
        return md5.hexdigest() == digest
    parts = int(count) if count.isdigit() else 0
    if parts < 1:
        return False
    mib = 1024 * 1024
    candidates = [size] if parts == 1 else []
    candidates += [n * mib for n in (5, 8, 10, 16, 32, 64, 100, 128, 256, 512)]
    candidates.append(math.ceil(size / parts / mib) * mib)
    tried = 0
    for part_size in dict.fromkeys(candidates):
        if part_size <= 0 or max(1, math.ceil(size / part_size)) != parts:
            continue
        tried += 1
        if tried > 3:
            break
        outer = hashlib.md5(usedforsecurity=False)
        with open(path, "rb") as f:
            for _ in range(parts):
                inner = hashlib.md5(usedforsecurity=False)
                left = part_size
                while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                    inner.update(chunk)
                    left -= len(chunk)
                outer.update(inner.digest())
        if outer.hexdigest() == digest:
            return True
    return False
