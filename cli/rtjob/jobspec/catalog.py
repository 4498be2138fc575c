"""A small catalog of instance types: what one node of each type offers to training workers.

It turns ``--nodes N`` on a worker group into N × (GPUs per node) training workers. Figures are AWS's
published specs; add a type here (or use ``resources_per_worker`` in the job) for anything missing.
Prices are AWS's published on-demand Linux prices in us-east-1 (see PRICES_AS_OF); rtjob's cost
estimates multiply them by node counts and run durations, nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    gpu_model: str
    vcpus: int
    memory_gib: int
    # On-demand Linux price in PRICES_REGION as of PRICES_AS_OF (an estimate: no discounts, spot or tax).
    price_usd_per_hour: float | None = None


PRICES_REGION = "us-east-1"
PRICES_AS_OF = "2025-07"  # when the prices below were read; update them together

_TYPES = [
    # GPU: NVIDIA A10G (24 GiB)
    InstanceType("g5.xlarge", 1, "A10G", 4, 16, 1.006),
    InstanceType("g5.2xlarge", 1, "A10G", 8, 32, 1.212),
    InstanceType("g5.4xlarge", 1, "A10G", 16, 64, 1.624),
    InstanceType("g5.8xlarge", 1, "A10G", 32, 128, 2.448),
    InstanceType("g5.12xlarge", 4, "A10G", 48, 192, 5.672),
    InstanceType("g5.16xlarge", 1, "A10G", 64, 256, 4.096),
    InstanceType("g5.24xlarge", 4, "A10G", 96, 384, 8.144),
    InstanceType("g5.48xlarge", 8, "A10G", 192, 768, 16.288),
    # GPU: others often seen in Ray clusters
    InstanceType("g4dn.xlarge", 1, "T4", 4, 16, 0.526),
    InstanceType("g4dn.12xlarge", 4, "T4", 48, 192, 3.912),
    InstanceType("g6.xlarge", 1, "L4", 4, 16, 0.8048),
    InstanceType("g6.12xlarge", 4, "L4", 48, 192, 4.6016),
    InstanceType("p3.8xlarge", 4, "V100", 32, 244, 12.24),
    InstanceType("p4d.24xlarge", 8, "A100", 96, 1152, 21.96),
    InstanceType("p5.48xlarge", 8, "H100", 192, 2048, 55.04),
    # CPU-only head / worker types
    InstanceType("m5.xlarge", 0, "", 4, 16, 0.192),
    InstanceType("m5.2xlarge", 0, "", 8, 32, 0.384),
    InstanceType("m5.4xlarge", 0, "", 16, 64, 0.768),
    InstanceType("m5.8xlarge", 0, "", 32, 128, 1.536),
    InstanceType("c5.4xlarge", 0, "", 16, 32, 0.68),
]

CATALOG: dict[str, InstanceType] = {t.name: t for t in _TYPES}


def lookup(name: str) -> InstanceType | None:
    return CATALOG.get(name)
