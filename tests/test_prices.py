"""The dated list prices (platform_config/prices.py): each of an instance type a stack may name, and the price a pool
gets from them."""

from __future__ import annotations

from decimal import Decimal

from platform_config.cpu_instances import CPU_INSTANCE_TYPES
from platform_config.gpu_catalog import INSTANCE_TYPES
from platform_config.prices import LIST_PRICES_PER_HOUR, PRICE_LIST, NodePrice, Unpriced, node_price


def test_every_list_price_is_of_a_catalog_type_and_a_type_without_one_is_unpriced_saying_so():
    assert set(LIST_PRICES_PER_HOUR) <= set(INSTANCE_TYPES) | set(CPU_INSTANCE_TYPES)
    assert all(price > 0 for price in LIST_PRICES_PER_HOUR.values())
    # A type added to a catalog after the list's date: the stack is asked for its price, not refused.
    unlisted = node_price("g7.xlarge", "ON_DEMAND", None, PRICE_LIST.region)
    assert isinstance(unlisted, Unpriced) and "none for g7.xlarge" in unlisted.reason and "pricePerHour" in unlisted.reason


def test_a_stated_price_wins_a_spot_pool_gets_the_on_demand_ceiling_and_another_region_none():
    assert node_price("g6.xlarge", "SPOT", 0.31, "eu-west-1") == NodePrice(Decimal("0.31"), "pricePerHour")
    spot = node_price("g6.xlarge", "SPOT", None, PRICE_LIST.region)
    assert isinstance(spot, NodePrice) and spot.source == "list" and spot.caveat is not None
    assert spot.per_hour == node_price("g6.xlarge", "ON_DEMAND", None, PRICE_LIST.region).per_hour  # type: ignore[union-attr]
    elsewhere = node_price("g6.xlarge", "ON_DEMAND", None, "ap-south-1")
    assert isinstance(elsewhere, Unpriced) and "ap-south-1" in elsewhere.reason and "pricePerHour" in elsewhere.reason
    assert isinstance(node_price("g6.xlarge", "ON_DEMAND", None, None), Unpriced)


def test_the_list_says_where_it_comes_from_and_when():
    line = PRICE_LIST.describe()
    assert "karpenter-provider-aws v1.14.1" in line and "2026-07-06" in line and "us-east-1" in line
