"""The backend registry: every backend rtjob knows, by name.

Adding a backend = a folder with a ``Backend`` subclass plus one registration: ``register(NAME, "module:Class")``
(rtjob's own are below), or, from another package, an entry point in the ``rtjob.backends`` group
(``NAME = "module:Class"``; docs/ARCHITECTURE.md has the recipe). Every other place takes backend names and what a
backend can do from here: ``--backend`` choices, settings, workflow templates, the backend-specific commands (a
backend's optional capabilities). Modules are imported only when a backend is used; entry points are read when
a name is first looked up.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import BadInput

if TYPE_CHECKING:
    from ..jobspec.resolve import Placement, Registered
    from ..jobspec.settings import Settings
    from .base import Backend

ENTRY_POINT_GROUP = "rtjob.backends"
_registered: dict[str, str] = {}
_plugins_read = False

# Nothing configured: the embedded cluster. An address but no backend named (or a CI workflow): a Ray cluster.
DEFAULT = "local"
WITH_ADDRESS = "ray"


def register(name: str, target: str) -> None:
    """Make backend ``name`` known: ``target`` is "module:Class", imported when the backend is first used."""
    module, sep, attr = target.partition(":")
    if not (name and module and sep and attr):
        raise ValueError(f"backend {name!r}: register it as 'module:Class', not {target!r}")
    _registered[name] = target


register("local", "rtjob.backends.ray.embedded_backend:EmbeddedRayBackend")  # the embedded cluster on this machine
register("ray", "rtjob.backends.ray.backend:RayJobsBackend")  # a Ray cluster's Jobs API at an address
register("anyscale", "rtjob.backends.anyscale.backend:AnyscaleBackend")  # Anyscale jobs through its SDK


def _registry() -> dict[str, str]:
    """The registrations, with installed packages' entry points read once (on first use: not at import, so
    `rtjob --help` does not scan every installed package). A registration here wins over an entry point."""
    global _plugins_read
    if not _plugins_read:
        _plugins_read = True
        from importlib.metadata import entry_points

        for point in entry_points(group=ENTRY_POINT_GROUP):
            _registered.setdefault(point.name, point.value)
    return _registered


def backend_names() -> tuple[str, ...]:
    return tuple(_registry())


def backend_class(name: str) -> type[Backend]:
    target = _registry().get(name)
    if target is None:
        raise BadInput(f"unknown backend {name!r}; expected one of {', '.join(_registry())}")
    module, _, attr = target.partition(":")
    cls: type[Backend] = getattr(importlib.import_module(module), attr)
    return cls


def workflow_backends() -> tuple[str, ...]:
    """The backends a CI workflow can submit to (those that declare the secrets it needs)."""
    return tuple(name for name in _registry() if backend_class(name).ci_secrets)


def registered_compute_configs() -> tuple[Registered, ...]:
    """The compute configs that registered backends' platforms keep by name (their prefixes: `rtjob validate`
    does not look for such a file; resolving tells which backend takes one)."""
    found = (backend_class(name).placement().registered for name in _registry())
    return tuple(r for r in found if r is not None)


def placement_for(backend: Backend) -> Placement:
    """What resolving a job for ``backend`` needs: its placement, with the compute configs the other registered
    backends' platforms keep by name (so a job that names one is told which backend takes it)."""
    import dataclasses

    others = tuple(r for r in registered_compute_configs() if r.backend != backend.name)
    return dataclasses.replace(backend.placement(), registered_elsewhere=others)


def offering(capability: str) -> str:
    """The first registered backend that offers optional capability ``capability`` ("schedules",
    "compute_configs", "local_cluster": a ``Backend`` method that answers None unless the backend overrides it),
    for the commands built on one. NotSupported when none does."""
    from .base import Backend, NotSupported

    default = getattr(Backend, capability)
    for name in _registry():
        if getattr(backend_class(name), capability) is not default:
            return name
    raise NotSupported(f"no registered backend offers {capability.replace('_', ' ')}")


def configured(flags: dict[str, Any], root: Path | None = None, context: str | None = None) -> Settings:
    """Settings (contexts, [tool.rtjob], environment, flags: jobspec.project.load_settings) with the backend
    checked against the registry and defaulted: an address means a Ray cluster, nothing means the embedded one."""
    from ..jobspec.project import load_settings

    settings = load_settings(flags, root, context)
    name = settings.get("backend")
    if name is not None and name not in _registry():
        raise BadInput(f"backend {name!r} ({settings.source('backend')}): expected one of {', '.join(_registry())}")
    if name is None:
        if settings.get("address") and _local_cluster_at(settings):
            # `eval "$(rtjob local env)"` (for Ray's own CLI) leaves rtjob on the embedded cluster, its storage too.
            settings.set("backend", DEFAULT, f"default (the address set by {settings.source('address')} is the "
                                             "running embedded cluster's)")
        elif settings.get("address"):
            settings.set("backend", WITH_ADDRESS, f"default (an address is set by {settings.source('address')})")
        else:
            settings.set("backend", DEFAULT, "default (no address configured)")
    return settings


def _local_cluster_at(settings: Settings) -> bool:
    """Whether the configured address is that of the cluster running on this machine (read from its state)."""
    from ..jobspec.settings import Settings
    from .base import NotSupported

    try:
        name = offering("local_cluster")
    except NotSupported:
        return False
    # Built from no settings: the cluster's state says where it runs, and a context's secret reference (headers)
    # is not resolved for a command that may never need it.
    cluster = backend_class(name)(Settings(settings.root)).local_cluster()
    running = cluster.dashboard() if cluster is not None else None
    return running is not None and running.rstrip("/") == str(settings.get("address")).rstrip("/")


def get_backend(settings: Settings) -> Backend:
    """The backend the settings name, constructed without contacting anything."""
    return backend_class(settings.get("backend"))(settings)
