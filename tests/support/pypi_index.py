"""A package index on loopback (PEP 503 "simple" pages over http.server) serving one tiny wheel the test builds:
a job's requirements.txt can name it with `--index-url`, so the cluster's real pip path installs it, offline."""

from __future__ import annotations

import base64
import hashlib
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def build_wheel(folder: Path, name: str, version: str, module_source: str) -> Path:
    """A pure-Python wheel holding one module (``name`` with '-' → '_'), written by hand: a zip with the
    module, METADATA, WHEEL and RECORD, as the wheel spec (PEP 427) has them; no build backend needed."""
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    files = {
        f"{module}.py": module_source.encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: rtjob-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }

    def digest(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    record = "".join(f"{path},{digest(data)},{len(data)}\n" for path, data in files.items()) + f"{dist_info}/RECORD,,\n"
    files[f"{dist_info}/RECORD"] = record.encode()
    wheel = folder / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as out:
        for path, data in files.items():
            out.writestr(path, data)
    return wheel


class SimpleIndex:
    """Serves ``root/simple/<project>/`` pages linking the wheels in ``root/files/`` (a context manager)."""

    def __init__(self, root: Path, wheels: dict[str, Path]) -> None:
        (root / "files").mkdir(parents=True, exist_ok=True)
        for project, wheel in wheels.items():
            target = root / "files" / wheel.name
            target.write_bytes(wheel.read_bytes())
            sha = hashlib.sha256(target.read_bytes()).hexdigest()
            page = root / "simple" / project
            page.mkdir(parents=True, exist_ok=True)
            (page / "index.html").write_text(
                f'<!DOCTYPE html><html><body><a href="../../files/{wheel.name}#sha256={sha}">{wheel.name}</a>'
                "</body></html>\n")
        handler = partial(_Quiet, directory=str(root))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self) -> SimpleIndex:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass
