"""Prices as rtjob prints them, computed from its catalog (cli/rtjob/jobspec/catalog.py): a price refresh changes
no test, and a figure rtjob multiplies wrongly fails one."""

from __future__ import annotations

from rtjob.jobspec import catalog

# How every printed figure names its prices: region, date, and that it is an estimate.
PRICED_AS = f"{catalog.PRICES_REGION}, as of {catalog.PRICES_AS_OF}; an estimate"


def price(instance_type: str) -> float:
    """One node's on-demand USD per hour."""
    value = catalog.CATALOG[instance_type].price_usd_per_hour
    assert value is not None, instance_type
    return value


def dollars(amount: float) -> str:
    """A total as printed: $5.26."""
    return f"${amount:,.2f}"


def listed(instance_type: str) -> str:
    """One node's price as a cost breakdown lists it: m5.2xlarge $0.384."""
    return f"{instance_type} ${price(instance_type):g}"


def g5_4xlarge(nodes: int) -> float:
    """USD per hour of compute_configs/g5-4xlarge.yaml (an m5.2xlarge head) with its GPU group pinned to ``nodes``."""
    return price("m5.2xlarge") + nodes * price("g5.4xlarge")
