"""What an EC2 node costs per hour when the stack states no price: a dated list-price table with its source.

Pure data and pure functions only (no Pulumi imports), like `gpu_catalog`: the cost report, the overview
dashboard's cost panel and the Serving performance stage's $ per million tokens read one price per pool,
`pool_price`, resolved once into the plan.

Source: aws/karpenter-provider-aws v1.14.1, `pkg/providers/pricing/zz_generated.pricing_aws.go`
("generated at 2026-07-06T14:20:29Z for us-east-1"), which Karpenter generates from the AWS Price List API
with the filters of `pkg/providers/pricing/pricing.go` `fetchOnDemandPricing` at that tag: AmazonEC2,
regionCode us-east-1, marketoption OnDemand, operatingSystem Linux, preInstalledSw NA, capacitystatus Used,
tenancy Shared, productFamily "Compute Instance". The figures are USD per instance-hour, public on-demand
list prices: no savings plan, reservation or private rate. Only the instance types the catalog knows
(`gpu_catalog.INSTANCE_TYPES`, `cpu_instances.CPU_INSTANCE_TYPES`) are kept; a test holds the table to
the catalog. A pool's `pricePerHour` always wins: it is the stack's own rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

PriceSource = Literal["pricePerHour", "list"]


@dataclass(frozen=True)
class PriceList:
    """Where the list prices come from and what they are."""

    source: str
    generated: str
    region: str
    currency: str
    capacity: str

    def describe(self) -> str:
        """One line for reports: what the list is, where from and when."""
        return (
            f"AWS {self.capacity} list prices in {self.region}, {self.currency}, generated {self.generated[:10]} ({self.source})"
        )


PRICE_LIST = PriceList(
    source="aws/karpenter-provider-aws v1.14.1 pkg/providers/pricing/zz_generated.pricing_aws.go",
    generated="2026-07-06T14:20:29Z",
    region="us-east-1",
    currency="USD",
    capacity="on-demand Linux",
)

# USD per instance-hour, as the source states them (trailing zeros dropped).
LIST_PRICES_PER_HOUR: dict[str, Decimal] = {
    name: Decimal(price)
    for name, price in {
        "p5.48xlarge": "55.04",
        "p4d.24xlarge": "21.957642",
        "p4de.24xlarge": "27.44705",
        "g6.xlarge": "0.8048",
        "g6.2xlarge": "0.9776",
        "g6.4xlarge": "1.3232",
        "g6.8xlarge": "2.0144",
        "g6.16xlarge": "3.3968",
        "g6.12xlarge": "4.6016",
        "g6.24xlarge": "6.6752",
        "g6.48xlarge": "13.3504",
        "g5.xlarge": "1.006",
        "g5.2xlarge": "1.212",
        "g5.4xlarge": "1.624",
        "g5.8xlarge": "2.448",
        "g5.16xlarge": "4.096",
        "g5.12xlarge": "5.672",
        "g5.24xlarge": "8.144",
        "g5.48xlarge": "16.288",
        "g6e.xlarge": "1.861",
        "g6e.2xlarge": "2.24208",
        "g6e.4xlarge": "3.00424",
        "g6e.8xlarge": "4.52856",
        "g6e.16xlarge": "7.57719",
        "g6e.12xlarge": "10.49264",
        "g6e.24xlarge": "15.06559",
        "g6e.48xlarge": "30.13118",
        "c6i.12xlarge": "2.04",
        "c6i.16xlarge": "2.72",
        "c6i.2xlarge": "0.34",
        "c6i.4xlarge": "0.68",
        "c6i.8xlarge": "1.36",
        "c6i.large": "0.085",
        "c6i.xlarge": "0.17",
        "c7i.12xlarge": "2.142",
        "c7i.16xlarge": "2.856",
        "c7i.2xlarge": "0.357",
        "c7i.4xlarge": "0.714",
        "c7i.8xlarge": "1.428",
        "c7i.large": "0.08925",
        "c7i.xlarge": "0.1785",
        "m5.12xlarge": "2.304",
        "m5.16xlarge": "3.072",
        "m5.2xlarge": "0.384",
        "m5.4xlarge": "0.768",
        "m5.8xlarge": "1.536",
        "m5.large": "0.096",
        "m5.xlarge": "0.192",
        "m6a.12xlarge": "2.0736",
        "m6a.16xlarge": "2.7648",
        "m6a.2xlarge": "0.3456",
        "m6a.4xlarge": "0.6912",
        "m6a.8xlarge": "1.3824",
        "m6a.large": "0.0864",
        "m6a.xlarge": "0.1728",
        "m6i.12xlarge": "2.304",
        "m6i.16xlarge": "3.072",
        "m6i.2xlarge": "0.384",
        "m6i.4xlarge": "0.768",
        "m6i.8xlarge": "1.536",
        "m6i.large": "0.096",
        "m6i.xlarge": "0.192",
        "m7a.12xlarge": "2.78208",
        "m7a.16xlarge": "3.70944",
        "m7a.2xlarge": "0.46368",
        "m7a.4xlarge": "0.92736",
        "m7a.8xlarge": "1.85472",
        "m7a.large": "0.11592",
        "m7a.xlarge": "0.23184",
        "m7i.12xlarge": "2.4192",
        "m7i.16xlarge": "3.2256",
        "m7i.2xlarge": "0.4032",
        "m7i.4xlarge": "0.8064",
        "m7i.8xlarge": "1.6128",
        "m7i.large": "0.1008",
        "m7i.xlarge": "0.2016",
        "r6i.12xlarge": "3.024",
        "r6i.16xlarge": "4.032",
        "r6i.2xlarge": "0.504",
        "r6i.4xlarge": "1.008",
        "r6i.8xlarge": "2.016",
        "r6i.large": "0.126",
        "r6i.xlarge": "0.252",
        "r7i.12xlarge": "3.1752",
        "r7i.16xlarge": "4.2336",
        "r7i.2xlarge": "0.5292",
        "r7i.4xlarge": "1.0584",
        "r7i.8xlarge": "2.1168",
        "r7i.large": "0.1323",
        "r7i.xlarge": "0.2646",
    }.items()
}


@dataclass(frozen=True)
class NodePrice:
    """What one node of a pool costs per hour, and where that figure comes from."""

    per_hour: Decimal
    source: PriceSource
    # Why the figure is only a ceiling (a spot pool priced at the on-demand list), or None.
    caveat: str | None = None


@dataclass(frozen=True)
class Unpriced:
    """Why a pool has no price."""

    reason: str


def node_price(instance_type: str, capacity_type: str, price_per_hour: float | None, region: str | None) -> NodePrice | Unpriced:
    """A node's price: the stack's `pricePerHour` when given, else the list price of its instance type in the
    list's region. A spot pool's list price is the on-demand one, a ceiling of what spot bills, and says so."""
    if price_per_hour is not None:
        return NodePrice(Decimal(str(price_per_hour)), "pricePerHour")
    if region is None:
        return Unpriced("no AWS region (a cluster reached by kubeconfig) and no pricePerHour")
    if region != PRICE_LIST.region:
        return Unpriced(f"the list prices are for {PRICE_LIST.region}, the cluster is in {region}; set pricePerHour")
    price = LIST_PRICES_PER_HOUR.get(instance_type)
    if price is None:
        return Unpriced(f"the list of {PRICE_LIST.region} prices has none for {instance_type}; set pricePerHour")
    if capacity_type == "SPOT":
        return NodePrice(price, "list", "spot billed at most the on-demand list price")
    return NodePrice(price, "list")
