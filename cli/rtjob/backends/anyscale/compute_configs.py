"""Compute configs registered on Anyscale (`rtjob compute-config show anyscale:NAME`, `... apply`): the Anyscale
backend's ``ComputeConfigs`` capability."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..capabilities import ComputeConfigs
from .request import REGISTERED_PREFIX, check_with_anyscale

if TYPE_CHECKING:
    from .client import SdkAccess


class AnyscaleComputeConfigs(ComputeConfigs):
    prefix = REGISTERED_PREFIX

    def __init__(self, backend: SdkAccess) -> None:
        self.backend = backend

    def registered(self, name: str) -> dict[str, Any]:
        with self.backend._errors(f"reading compute config {name}"):
            version = self.backend._sdk("compute_config").get(name)
        config = version.config
        return config.to_dict() if hasattr(config, "to_dict") else dict(config or {})

    def register(self, config: dict[str, Any], name: str) -> str:
        from anyscale.compute_config.models import compute_config_type_from_dict

        with self.backend._errors(f"registering compute config {name}"):
            return str(self.backend._sdk("compute_config").create(compute_config_type_from_dict(config), name=name))

    def check(self, config: dict[str, Any], where: str) -> str | None:
        return check_with_anyscale("ComputeConfig", config, where)

    def with_defaults(self, config: dict[str, Any]) -> dict[str, Any]:
        settings = self.backend.settings
        cloud = settings.get("cloud") if settings else None
        if cloud and not config.get("cloud"):  # built-ins name no cloud: the settings' (context, project, env) one
            return {"cloud": cloud, **config}
        return config
