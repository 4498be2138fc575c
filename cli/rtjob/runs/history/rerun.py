"""`rtjob rerun ID`: the recorded spec planned again, as the same request apart from the new run id, the secrets
(found again in this environment) and the working dir (packed and uploaded again); what differs is said."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ...core.errors import BadInput
from ...core.record import RunRecord
from ...core.redact import MASK, redact_data
from ..recorded_spec import restore, unrestorable
from ..records import git_state

if TYPE_CHECKING:
    from ...jobspec.settings import Settings
    from ..runner import Plan


def recorded_settings(record: RunRecord) -> dict[str, Any]:
    """Where the run ran, as flags for the rerun's settings (a flag the user gives wins; a masked address is
    left to this environment's settings, which hold its password)."""
    from ..places import on_this_machine

    spec = record.spec or {}
    recorded = dict(spec.get("settings") or {})
    # The embedded cluster's address is its own.
    if MASK in str(recorded.get("address") or "") or on_this_machine(record.backend):
        recorded["address"] = None
    return {k: v for k, v in recorded.items() if v is not None}


def spec_of(record: RunRecord) -> dict[str, Any]:
    if not record.spec:
        raise BadInput(f"run {record.id} has no recorded spec (rtjob saw it run but did not submit it): "
                       "submit its job file instead")
    return record.spec


def plan_rerun(record: RunRecord, settings: Settings, sets: tuple[str, ...], env: tuple[str, ...],
               nodes: int | None, submission_id: str | None) -> tuple[Plan, list[str]]:
    """The rerun's plan and what the user should know before it is sent (differences from the recording)."""
    from ..runner import plan

    spec = spec_of(record)
    source, overrides = restore(spec, record.id, sets, env, nodes)
    overrides.submission_id = submission_id
    storage = (spec.get("settings") or {}).get("storage")
    planned = plan(str(source.path), settings, overrides, storage_flag=storage, source=source)
    where = unrestorable(planned.job)
    if where:
        raise BadInput(f"rerun {record.id}: {where} held a secret that was masked in the record and cannot be "
                       f"restored; give it again with --set/--env")
    warnings = request_differences(record, planned) + git_differences(record, planned)
    return planned, warnings


def _flatten(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _flatten(item, f"{path}.{key}" if path else str(key), out)
    else:
        out[path] = value


def request_differences(record: RunRecord, planned: Plan) -> list[str]:
    """Where the new request differs from the recorded one, the run id aside (one line, or none)."""
    if record.request is None:
        return []
    new_id = planned.job.run_id
    recorded = json.loads(json.dumps(record.request).replace(record.id, new_id))
    fresh = json.loads(json.dumps(redact_data(planned.backend.render(planned.request), [])))
    old_flat: dict[str, Any] = {}
    new_flat: dict[str, Any] = {}
    _flatten(recorded, "", old_flat)
    _flatten(fresh, "", new_flat)
    # Where it is sent is not what is sent: the embedded cluster gets new ports each time it starts, its dashboard
    # (the address) and its GCS (the RAY_ADDRESS rtjob gives the job there).
    moved = old_flat.pop("address", None) != new_flat.pop("address", None) and not planned.job.embedded
    if planned.job.embedded:
        for flat in (old_flat, new_flat):
            for key in [k for k in flat if k.endswith("env_vars.RAY_ADDRESS")]:
                del flat[key]
    changed = sorted(k for k in old_flat.keys() | new_flat.keys() if old_flat.get(k) != new_flat.get(k))
    warnings = [f"{record.id} was sent to {recorded.get('address')}; this one goes to {fresh.get('address')}"] if moved else []
    if changed:
        shown = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        warnings.append(f"the request differs from {record.id}'s at: {shown}")
    return warnings


def git_differences(record: RunRecord, planned: Plan) -> list[str]:
    """A rerun of other code than the recorded run's: another commit, or uncommitted changes now."""
    then = record.git
    now = git_state(planned.job.working_dir)
    if then is None or now is None:
        return [] if then is None else [f"{record.id} ran from git commit {then['commit'][:12]}; "
                                        f"{planned.job.working_dir} is not a git checkout now"]
    warnings = []
    if now["commit"] != then["commit"]:
        warnings.append(f"the working dir is at commit {now['commit'][:12]}, {record.id} ran from "
                        f"{then['commit'][:12]}")
    if now.get("dirty"):
        warnings.append("the working tree has uncommitted changes: the upload is not the recorded commit")
    elif then.get("dirty"):
        warnings.append(f"{record.id} ran from a working tree with uncommitted changes; this one is clean")
    return warnings
