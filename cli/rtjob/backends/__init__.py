"""Backends: turn a resolved job into a wire request, submit it, and follow the run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import BadInput

if TYPE_CHECKING:
    from ..project import Settings
    from .base import Backend


def get_backend(
    settings: Settings, *, start_local: bool = False, offline: bool = False, nodes: int = 1, cpus_per_node: int = 1
) -> Backend:
    """The backend the settings name.

    ``start_local`` starts (or grows) the embedded cluster; ``offline`` (render, dry-run) contacts nothing.
    """
    name = settings.get("backend")
    if name in ("ray", "local"):
        from .ray_jobs import RayJobsBackend

        return RayJobsBackend.from_settings(
            settings, start_local=start_local, offline=offline, nodes=nodes, cpus_per_node=cpus_per_node
        )
    if name == "anyscale":
        from .anyscale_jobs import AnyscaleBackend

        return AnyscaleBackend.from_settings(settings, offline=offline)
    raise BadInput(f"unknown backend {name!r}; expected local, ray or anyscale")
