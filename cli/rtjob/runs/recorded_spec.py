"""What a run record keeps of how a run was asked for (its job and compute-config documents, the overrides, the
settings that decided where it ran), secrets taken out, and how `rtjob rerun` puts them back from this environment.

A secret is never recorded: a value that is secret by its name or shape in `env_vars`, `args` or `tags` (or an
`--env`/`--set` override) becomes ``SECRET`` and its path is listed; rerun finds an env var's value again in this
process's environment (or ``--env NAME=...``), an arg's from ``--set``. A secret inside free text (a token in
the entrypoint) is masked by the redactor and cannot come back: rerun refuses it by name.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import BadInput
from ..core.redact import MASK, REDACTOR, is_secret, mask_url

if TYPE_CHECKING:
    from ..jobspec.resolve import JobSource, Overrides, ResolvedJob

SECRET = "<rtjob:secret>"  # where a secret was: rerun fills it from this environment or refuses
_SECRET_MAPPINGS = frozenset({"env_vars", "args", "tags"})  # mappings whose values may be secret by name


def _masked(value: Any, path: tuple[str, ...], secret_paths: list[str]) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            here = (*path, str(key))
            scalar = isinstance(item, (str, int, float)) and not isinstance(item, bool)
            if scalar and path and path[-1] in _SECRET_MAPPINGS and is_secret(str(key), str(item)):
                out[key] = SECRET
                secret_paths.append(".".join(here))
            else:
                out[key] = _masked(item, here, secret_paths)
        return out
    if isinstance(value, list):
        return [_masked(item, path, secret_paths) for item in value]
    if isinstance(value, str):
        return REDACTOR.text(value)  # a known secret inside free text: masked, not restorable
    return value


def _masked_items(items: Iterable[str], secret_paths: list[str], prefix: str) -> list[str]:
    """``--set a.b=V`` / ``--env K=V`` items with secret values replaced (the key stays: rerun names it)."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        leaf = key.rsplit(".", 1)[-1]
        if sep and is_secret(leaf, value):
            out.append(f"{key}={SECRET}")
            secret_paths.append(f"{prefix} {key}")
        else:
            out.append(REDACTOR.text(item))
    return out


def record_spec(job: ResolvedJob, overrides: Overrides, settings: dict[str, Any]) -> dict[str, Any]:
    """The recorded spec: what rerun replays, with every secret taken out (``secrets`` lists where they were)."""
    secret_paths: list[str] = []
    cc = job.compute_config_document
    return {
        "job_path": str(job.job_path) if job.job_path else None,
        "job_file": job.job_file,
        "document": _masked(job.document, (), secret_paths),
        "compute_config": ({"name": job.compute_config_name, "document": _masked(cc, (), secret_paths)}
                           if cc is not None else None),
        "overrides": {
            "nodes": overrides.nodes,
            "name": overrides.name,
            "sets": _masked_items(overrides.sets, secret_paths, "--set"),
            "env": _masked_items(overrides.env, secret_paths, "--env"),
            "forward_aws_credentials": overrides.forward_aws_credentials,
        },
        # Where it ran, as decided (not where each value came from): rerun passes them as flags.
        "settings": {
            "backend": job.backend,
            "address": mask_url(settings["address"]) if settings.get("address") else None,
            "storage": job.storage_root,
            "compute_config": job.compute_config_name,
            "cloud": settings.get("cloud"),
            "project": settings.get("project"),
        },
        "secrets": secret_paths,
    }


def _fill_env(document: dict[str, Any], given: set[str], missing: list[str]) -> None:
    """A recorded env var secret: from this environment (unless an --env of the rerun gives it)."""
    for mapping in (document.get("env_vars"), (document.get("local") or {}).get("env_vars")):
        if not isinstance(mapping, dict):
            continue
        for name, value in mapping.items():
            if value != SECRET or name in given:
                continue
            if name in os.environ:
                mapping[name] = os.environ[name]
            else:
                missing.append(f"env_vars.{name} (set {name} in this environment or pass --env {name}=...)")


def restore(spec: dict[str, Any], run_id: str, sets: tuple[str, ...], env: tuple[str, ...],
            nodes: int | None) -> tuple[JobSource, Overrides]:
    """The recorded job as a source to resolve again, and the recorded overrides with the rerun's own after
    them (they win); secrets filled from this environment. BadInput names every secret that cannot be found."""
    from ..jobspec.resolve import JobSource, Overrides

    document = copy.deepcopy(spec.get("document") or {})
    recorded = spec.get("overrides") or {}
    given_env = {item.partition("=")[0] for item in env}
    given_sets = {item.partition("=")[0] for item in sets}
    missing: list[str] = []
    _fill_env(document, given_env, missing)
    rec_env: list[str] = []
    for item in recorded.get("env") or []:
        key, _, value = item.partition("=")
        if value == SECRET and key not in given_env:
            if key in os.environ:
                rec_env.append(f"{key}={os.environ[key]}")
            else:
                missing.append(f"--env {key} (set {key} in this environment or pass --env {key}=...)")
        elif key not in given_env:
            rec_env.append(item)
    rec_sets: list[str] = []
    for item in recorded.get("sets") or []:
        key, _, value = item.partition("=")
        if key in given_sets:
            continue
        if value == SECRET:
            missing.append(f"--set {key} (pass --set {key}=...)")
        rec_sets.append(item)
    args = document.get("args")
    if isinstance(args, dict):
        for key, value in args.items():
            if value == SECRET and f"args.{key}" not in given_sets:
                missing.append(f"args.{key} (pass --set args.{key}=...)")
    if missing:
        raise BadInput(f"rerun {run_id}: secrets are never recorded; give them again: {'; '.join(missing)}")
    cc = spec.get("compute_config")
    source = JobSource(
        path=Path(spec.get("job_path") or spec.get("job_file") or "job.yaml"),
        job_file=spec.get("job_file") or "job.yaml",
        shown=f"{spec.get('job_file') or 'job'} (recorded with {run_id})",
        document=document,
        compute_config=(cc["name"], cc["document"]) if isinstance(cc, dict) and cc.get("document") is not None else None,
    )
    overrides = Overrides(
        nodes=nodes if nodes is not None else recorded.get("nodes"),
        sets=(*rec_sets, *sets),
        env=(*rec_env, *env),
        name=recorded.get("name"),
        forward_aws_credentials=bool(recorded.get("forward_aws_credentials")),
    )
    return source, overrides


def unrestorable(job: ResolvedJob) -> str | None:
    """A place in the resolved job that still holds a secret's placeholder or a masked value, or None."""
    def hunt(value: Any, path: str) -> str | None:
        if isinstance(value, dict):
            return next((found for k, v in value.items() if (found := hunt(v, f"{path}.{k}" if path else str(k)))),
                        None)
        if isinstance(value, list):
            return next((found for i, v in enumerate(value) if (found := hunt(v, f"{path}[{i}]"))), None)
        if isinstance(value, str) and (SECRET in value or MASK in value):
            return path or "value"
        return None

    return hunt(job.spec.model_dump(mode="json"), "") or hunt(job.env_vars, "env")
