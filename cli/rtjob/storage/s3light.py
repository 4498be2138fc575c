"""S3 without botocore for the common case of a pull: credentials in the environment and an endpoint and region
known without AWS's config files. Why: importing botocore and building its client cost every pull 0.4-0.5 s,
a third of a 2,000-file checkpoint's pull on SeaweedFS (benchmarks/pull_bench.py), while s5cmd starts in ms.

``target_for`` says whether this path can serve a pull exactly as botocore would (None: botocore must resolve
something: a profile, SSO, a role, a region or endpoint from ~/.aws/config, FIPS/dual-stack, a proxy). The
listing is one signed ListObjectsV2 request per 1,000 keys (SigV4 below, hashlib + hmac); obstore's own listing
is not used because object_store drops a key's trailing '/' (a folder marker would read as a file). Any failure
here is not reported as such: the caller lists again through botocore, whose errors rtjob already words.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import http.client
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from urllib.parse import quote, unquote_plus, urlsplit

from ..core import clock

# Settings in an AWS config file that change where or how S3 is reached: seen there, botocore decides.
_CONFIG_WORDS = ("endpoint_url", "addressing_style", "use_dualstack_endpoint", "use_fips_endpoint",
                 "ca_bundle", "s3 =", "services")
_FLAG_VARS = ("AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT", "AWS_S3_US_EAST_1_REGIONAL_ENDPOINT")
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"  # a streamed body's hash is not signed (S3 allows it; TLS guards it on AWS)
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_DNS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
TIMEOUT_S = 30
_BLOCK = 1 << 18  # a body streamed from a file is sent in blocks of this size (http.client's default: 8 KiB)


class LightError(Exception):
    """This path could not list (the caller falls back to botocore, which says why in rtjob's words). ``status``:
    S3's HTTP answer (0: none came), ``code``: its error code."""

    def __init__(self, text: str, status: int = 0, code: str = "") -> None:
        super().__init__(text)
        self.status, self.code = status, code


@dataclass(frozen=True)
class Target:
    """Where a bucket is and who asks: everything a signed request needs."""

    bucket: str
    endpoint: str | None  # an S3-compatible server's URL (path-style addressing), None for AWS
    region: str
    access_key: str
    secret_key: str
    token: str | None
    ca_bundle: str | None

    @property
    def virtual_host(self) -> bool:
        return self.endpoint is None and virtual_hostable(self.bucket)

    def base(self) -> tuple[str, str, str]:
        """(scheme, host[:port], path) of the bucket's URL; keys are appended to the path after a '/'."""
        if self.endpoint:
            parts = urlsplit(self.endpoint)
            return parts.scheme, parts.netloc, f"{parts.path.rstrip('/')}/{quote(self.bucket, safe='')}"
        host = f"s3.{self.region}.amazonaws.com"
        if self.virtual_host:
            return "https", f"{self.bucket}.{host}", ""
        return "https", host, f"/{quote(self.bucket, safe='')}"

    def __repr__(self) -> str:  # never a credential in a traceback or a log
        return f"Target(bucket={self.bucket!r}, endpoint={self.endpoint!r}, region={self.region!r})"


def virtual_hostable(bucket: str) -> bool:
    """Whether AWS can address the bucket by host name (a dotted name would break TLS host name checks)."""
    return bool(_DNS_BUCKET.match(bucket))


def target_for(bucket: str, endpoint: str | None) -> Target | None:
    """The target when the environment alone says everything botocore would use, else None."""
    env = os.environ
    access, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if not access or not secret:
        return None  # a profile, SSO, a role, the instance's: botocore's chain
    if any(env.get(var, "").strip().lower() in ("true", "1", "regional") for var in _FLAG_VARS):
        return None
    if _config_mentions_s3_settings(env.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config")):
        return None
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if endpoint:
        if urlsplit(endpoint).scheme not in ("http", "https"):
            return None
        region = region or "us-east-1"  # what botocore signs with for a server that has no regions
    elif not region or region.startswith("cn-"):  # the region is in ~/.aws/config; China has its own domain
        return None
    return Target(bucket, endpoint, region, access, secret, env.get("AWS_SESSION_TOKEN") or None,
                  env.get("AWS_CA_BUNDLE") or None)


def keys_target(bucket: str, endpoint: str | None) -> Target | None:
    """The target from the environment's keys alone (the run side's writer: no AWS config is read), None without
    keys. The region: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1 (AWS names a bucket's own region when asked
    wrongly: see ``in_region``)."""
    env = os.environ
    access, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if not access or not secret:
        return None
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
    return Target(bucket, endpoint, region, access, secret, env.get("AWS_SESSION_TOKEN") or None,
                  env.get("AWS_CA_BUNDLE") or None)


def in_region(target: Target, region: str | None) -> Target | None:
    """The same target signed for the bucket's own region, when S3 named another one (None: no change)."""
    if not region or region == target.region:
        return None
    return dataclasses.replace(target, region=region)


def _config_mentions_s3_settings(path: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return False
    return any(word in text for word in _CONFIG_WORDS)


def list_objects(target: Target, prefix: str) -> tuple[list[tuple[str, int, str]], str | None]:
    """Every (key, size, ETag as listed) under ``prefix``, and the bucket's region if the server said it."""
    _, host, path = target.base()
    conn = connect(target)
    files: list[tuple[str, int, str]] = []
    region: str | None = None
    query = {"list-type": "2", "prefix": prefix, "encoding-type": "url"}
    try:
        while True:
            headers = sign("GET", host, path or "/", query, target)
            conn.request("GET", _quote_path(path or "/") + "?" + _query(query), headers=headers)
            response = conn.getresponse()
            body = response.read()
            region = response.getheader("x-amz-bucket-region") or region
            if response.status != 200:
                code = _error_code(body)
                raise LightError(f"HTTP {response.status}" + (f" {code}" if code else ""), response.status, code)
            root = ET.fromstring(body)
            encoded = (root.findtext(f"{_NS}EncodingType") or "") == "url"
            for item in root.iter(f"{_NS}Contents"):
                key = item.findtext(f"{_NS}Key") or ""
                files.append((unquote_plus(key) if encoded else key, int(item.findtext(f"{_NS}Size") or 0),
                              item.findtext(f"{_NS}ETag") or ""))
            token = root.findtext(f"{_NS}NextContinuationToken")
            if (root.findtext(f"{_NS}IsTruncated") or "").lower() != "true" or not token:
                return files, region
            query = {**query, "continuation-token": token}
    except (OSError, http.client.HTTPException, ET.ParseError, ValueError) as exc:
        raise LightError(type(exc).__name__) from None
    finally:
        conn.close()


def _error_code(body: bytes) -> str:
    """The Code of S3's XML error body ('' if there is none)."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return ""
    return (root.findtext("Code") or root.findtext(f"{_NS}Code") or "").strip()[:100]


def connect(target: Target) -> http.client.HTTPConnection:
    """A connection to the bucket's host (TLS with the target's CA bundle for https); the caller closes it."""
    import ssl

    scheme, host, _ = target.base()
    if scheme == "https":
        context = ssl.create_default_context(cafile=target.ca_bundle)
        return http.client.HTTPSConnection(host, timeout=TIMEOUT_S, context=context, blocksize=_BLOCK)
    return http.client.HTTPConnection(host, timeout=TIMEOUT_S, blocksize=_BLOCK)


def sign(method: str, host: str, path: str, query: dict[str, str], target: Target,
         now: datetime.datetime | None = None, headers: dict[str, str] | None = None,
         payload_sha256: str = EMPTY_SHA256) -> dict[str, str]:
    """AWS Signature Version 4 headers for an S3 request (the SigV4 spec, S3's single-encoded path): ``headers``
    (e.g. If-Match) are signed and returned with the rest; ``payload_sha256`` is the body's SHA-256 (hex), or
    ``UNSIGNED_PAYLOAD`` for a body streamed from a file."""
    now = now or clock.now()
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    signed_headers = {name.lower(): value.strip() for name, value in (headers or {}).items()}
    signed_headers.update({"host": host, "x-amz-content-sha256": payload_sha256, "x-amz-date": stamp})
    if target.token:
        signed_headers["x-amz-security-token"] = target.token
    names = sorted(signed_headers)
    signed = ";".join(names)
    canonical = "\n".join([method, _quote_path(path), _query(query),
                           "".join(f"{name}:{signed_headers[name]}\n" for name in names), signed, payload_sha256])
    scope = f"{stamp[:8]}/{target.region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + target.secret_key).encode()
    for part in (stamp[:8], target.region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    signed_headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={target.access_key}/{scope}, "
                                       f"SignedHeaders={signed}, Signature={signature}")
    signed_headers["Host"] = signed_headers.pop("host")
    return signed_headers


def request_target(path: str, query: dict[str, str] | None = None) -> str:
    """The request line's target for a signed ``path`` (the bucket's path, '/', the key quoted) and query."""
    return _quote_path(path) + (f"?{_query(query)}" if query else "")


def _quote_path(path: str) -> str:
    return quote(path, safe="/-_.~%")  # the bucket part is quoted already


def _query(query: dict[str, str]) -> str:
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items()))
