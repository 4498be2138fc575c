"""The backend registry: every backend rtjob knows, by name.

Adding a backend = a new folder under ``backends/`` with a ``Backend`` subclass, plus one line in
``_REGISTRY`` (docs/ARCHITECTURE.md has the recipe). Every other place takes backend names from here:
``--backend`` choices, settings, workflow templates. Modules are imported only when a backend is used.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import BadInput

if TYPE_CHECKING:
    from ..jobspec.settings import Settings
    from .base import Backend

_REGISTRY: dict[str, str] = {
    "local": "rtjob.backends.ray.backend:EmbeddedRayBackend",  # the embedded cluster on this machine
    "ray": "rtjob.backends.ray.backend:RayJobsBackend",  # a Ray cluster's Jobs API at an address
    "anyscale": "rtjob.backends.anyscale.backend:AnyscaleBackend",  # Anyscale jobs through its SDK
}
# Nothing configured: the embedded cluster. An address but no backend named: a Ray cluster.
DEFAULT = "local"
WITH_ADDRESS = "ray"


def backend_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def backend_class(name: str) -> type[Backend]:
    target = _REGISTRY.get(name)
    if target is None:
        raise BadInput(f"unknown backend {name!r}; expected one of {', '.join(_REGISTRY)}")
    module, _, attr = target.partition(":")
    cls: type[Backend] = getattr(importlib.import_module(module), attr)
    return cls


def workflow_backends() -> tuple[str, ...]:
    """The backends a CI workflow can submit to (those that declare the secrets it needs)."""
    return tuple(name for name in _REGISTRY if backend_class(name).ci_secrets)


def configured(flags: dict[str, Any], root: Path | None = None, context: str | None = None) -> Settings:
    """Settings (contexts, [tool.rtjob], environment, flags: spec.project.load_settings) with the backend checked
    against the registry and defaulted: an address means a Ray cluster, nothing means the embedded one."""
    from ..jobspec.project import load_settings

    settings = load_settings(flags, root, context)
    name = settings.get("backend")
    if name is not None and name not in _REGISTRY:
        raise BadInput(f"backend {name!r} ({settings.source('backend')}): expected one of {', '.join(_REGISTRY)}")
    if name is None:
        if settings.get("address"):
            settings.set("backend", WITH_ADDRESS, f"default (an address is set by {settings.source('address')})")
        else:
            settings.set("backend", DEFAULT, "default (no address configured)")
    return settings


def get_backend(settings: Settings) -> Backend:
    """The backend the settings name, constructed without contacting anything."""
    return backend_class(settings.get("backend"))(settings)
