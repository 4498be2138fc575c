"""Where a stage reads and writes: a local folder or an ``s3://`` URI (pyarrow.fs, as Ray Data and Ray Train use),
and the pipeline's environment (the step's own folder, the previous step's, every earlier step's)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

import rtjob_contract as contract

from ..locations import filesystem


def join(uri: str, *parts: str) -> str:
    return "/".join([uri.rstrip("/"), *parts])


def write_bytes(uri: str, data: bytes) -> None:
    fs, path = filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(data)


def read_bytes(uri: str) -> bytes:
    fs, path = filesystem(uri)
    with fs.open_input_stream(path) as f:
        return bytes(f.read())


def write_json(uri: str, obj: Any) -> None:
    write_bytes(uri, json.dumps(obj, indent=1).encode())


def read_json(uri: str) -> Any:
    return json.loads(read_bytes(uri))


def exists(uri: str) -> bool:
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def list_files(uri: str, suffixes: tuple[str, ...] = ()) -> list[str]:
    """Every file under ``uri`` (recursive, sorted), as URIs of the same form, optionally by suffix."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    rels = sorted(i.path[len(path.rstrip("/")) + 1:] for i in infos if i.type == pafs.FileType.File)
    return [join(uri, rel) for rel in rels if not suffixes or rel.lower().endswith(suffixes)]


def list_dirs(uri: str) -> list[str]:
    """Names of the folders directly under ``uri``."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)


def write_table(uri: str, table: Any) -> None:
    import pyarrow.parquet as pq

    fs, path = filesystem(uri)
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    pq.write_table(table, path, filesystem=fs)


def read_table(uri: str, columns: list[str] | None = None) -> Any:
    """One Parquet file, or every ``*.parquet`` under a folder, as one pyarrow Table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, path = filesystem(uri)
    if uri.endswith(".parquet"):
        return pq.read_table(path, filesystem=fs, columns=columns)
    files = list_files(uri, (".parquet",))
    if not files:
        raise FileNotFoundError(f"{uri}: no Parquet files")
    return pa.concat_tables([pq.read_table(filesystem(f)[1], filesystem=fs, columns=columns) for f in files])


def local_copy(uri: str) -> tuple[str, str | None]:
    """``(local folder, temp folder to remove or None)``: from_pretrained needs a local folder."""
    if "://" not in uri:
        return filesystem(uri)[1], None
    import pyarrow.fs as pafs

    tmp = tempfile.mkdtemp(prefix="rtjob-voice-")
    fs, path = filesystem(uri)
    pafs.copy_files(path, tmp, source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
    return tmp, tmp


def remove_local(tmp: str | None) -> None:
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The pipeline's environment: flags win, these are their defaults.


def run_dir(flag: str | None) -> str:
    """The step's output folder: the flag, else the run's storage folder (RTJOB_RUN_URI: Ray Data writes it from
    workers on any node), else RTJOB_RUN_DIR (an older rtjob's, or a run without the companion)."""
    value = flag or os.environ.get(contract.ENV_RUN_URI) or os.environ.get(contract.ENV_RUN_DIR)
    if not value:
        raise ValueError(f"no output folder: pass --run-dir or set {contract.ENV_RUN_URI}")
    return value


def input_uri(flag: str | None, what: str) -> str:
    value = flag or os.environ.get(contract.ENV_INPUT_URI)
    if not value:
        raise ValueError(f"no {what}: pass --input or set {contract.ENV_INPUT_URI} (the previous step's folder)")
    return value


def step_uri(flag: str | None, step: str, option: str) -> str:
    """An earlier step's folder: the flag, else RTJOB_STEP_URIS[step]."""
    if flag:
        return flag
    raw = os.environ.get(contract.ENV_STEP_URIS)
    if raw:
        try:
            uris = json.loads(raw)
        except json.JSONDecodeError:
            raise ValueError(f"{contract.ENV_STEP_URIS} is not JSON: {raw[:80]!r}") from None
        if isinstance(uris, dict) and isinstance(uris.get(step), str):
            return str(uris[step])
    raise ValueError(f"no {step} step folder: pass {option} or set {contract.ENV_STEP_URIS} with a {step!r} entry")
