"""MIG geometry fitting and what GPU pools advertise."""

from __future__ import annotations

import pytest

from platform_config.capacity import pool_supply
from platform_config.gpu_catalog import A100_40GB, H100_80GB, L4_24GB, builtin_mig_configs, fits_on_gpu
from platform_config.models import NodePoolConfig


def pool(**fields) -> NodePoolConfig:
    base = {"name": "p", "instanceType": "p5.48xlarge", "maxSize": 2}
    base.update(fields)
    return NodePoolConfig.model_validate(base, by_alias=True, by_name=False)


# The maximal valid H100 geometries (7 compute slices used), from the MIG placement rules.
MAXIMAL_VALID = [
    {"1g.10gb": 7},
    {"1g.10gb": 6, "1g.20gb": 1},
    {"1g.10gb": 5, "2g.20gb": 1},
    {"1g.10gb": 4, "1g.20gb": 1, "2g.20gb": 1},
    {"1g.10gb": 4, "3g.40gb": 1},
    {"1g.10gb": 3, "2g.20gb": 2},
    {"1g.10gb": 3, "4g.40gb": 1},
    {"1g.10gb": 2, "1g.20gb": 1, "2g.20gb": 2},
    {"1g.10gb": 2, "1g.20gb": 1, "4g.40gb": 1},
    {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    {"1g.10gb": 1, "2g.20gb": 3},
    {"1g.10gb": 1, "2g.20gb": 1, "4g.40gb": 1},
    {"1g.20gb": 1, "2g.20gb": 3},
    {"1g.20gb": 1, "2g.20gb": 1, "4g.40gb": 1},
    {"2g.20gb": 2, "3g.40gb": 1},
    {"3g.40gb": 1, "4g.40gb": 1},
    {"7g.80gb": 1},
    {"3g.40gb": 2},
    {"1g.20gb": 4},
]

INVALID = [
    {"3g.40gb": 2, "1g.10gb": 1},  # both 3g take all 8 memory slices, though compute adds to 7
    {"4g.40gb": 2},
    {"1g.10gb": 8},
    {"1g.20gb": 4, "1g.10gb": 1},
    {"7g.80gb": 1, "1g.10gb": 1},
    {"2g.20gb": 4},
    {"3g.40gb": 3},
]


@pytest.mark.parametrize("geometry", MAXIMAL_VALID)
def test_valid_h100_geometries_fit(geometry):
    assert fits_on_gpu(H100_80GB, geometry)


@pytest.mark.parametrize("geometry", INVALID)
def test_invalid_h100_geometries_do_not_fit(geometry):
    assert not fits_on_gpu(H100_80GB, geometry)


def test_builtin_configs_for_h100():
    configs = builtin_mig_configs(H100_80GB)
    expected = {"all-1g.10gb": 7, "all-1g.20gb": 4, "all-2g.20gb": 3, "all-3g.40gb": 2, "all-4g.40gb": 1, "all-7g.80gb": 1}
    for name, count in expected.items():
        (layout,) = configs[name].layouts
        assert layout.gpus is None and layout.profiles == ((name.removeprefix("all-"), count),)
    (balanced,) = configs["all-balanced"].layouts
    assert dict(balanced.profiles) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert not configs["all-disabled"].layouts[0].mig_enabled


def test_builtin_configs_follow_the_gpu():
    a100 = builtin_mig_configs(A100_40GB)
    # On A100 40GB, 1g.10gb is the two-memory-slice profile: four fit, not seven.
    assert a100["all-1g.10gb"].layouts[0].profiles == (("1g.10gb", 4),)
    assert dict(a100["all-balanced"].layouts[0].profiles) == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert builtin_mig_configs(L4_24GB) == {}


def test_p5_on_all_1g_10gb_advertises_56_slices():
    supply = pool_supply(pool(sharing={"mode": "mig", "migConfig": "all-1g.10gb"}))
    assert supply.per_node == {"nvidia.com/mig-1g.10gb": 56}


def test_g6_12xlarge_time_sliced_4_ways_advertises_16_gpus():
    supply = pool_supply(pool(instanceType="g6.12xlarge", sharing={"mode": "timeSlicing", "replicas": 4}))
    assert supply.per_node == {"nvidia.com/gpu": 16}
    assert supply.kinds["nvidia.com/gpu"] == "time-sliced share (4 per GPU)"


def test_custom_geometry_mixes_whole_gpus_and_slices():
    supply = pool_supply(
        pool(
            sharing={
                "mode": "mig",
                "migGeometry": {
                    "name": "mix",
                    "devices": [
                        {"gpus": 4, "migEnabled": False},
                        {"gpus": 2, "profiles": {"3g.40gb": 2}},
                        {"gpus": 2, "profiles": {"1g.10gb": 7}},
                    ],
                },
            }
        )
    )
    assert supply.per_node == {"nvidia.com/gpu": 4, "nvidia.com/mig-3g.40gb": 4, "nvidia.com/mig-1g.10gb": 14}
    assert supply.at_max("nvidia.com/mig-1g.10gb") == 28


def test_unshared_pool_advertises_whole_gpus():
    assert pool_supply(pool(instanceType="g6.48xlarge")).per_node == {"nvidia.com/gpu": 8}


def test_every_gpu_model_is_registered_by_its_instance_types_row():
    """GPU_MODELS, which the pack's MIG profiles and the performance stage's systems read, holds the GPU models the
    instance types carry, in their order: every GpuModel the catalog defines is among them, so a new one is added by
    its row in INSTANCE_TYPES alone, and one without a row would fail here rather than go missing from both."""
    from platform_config import gpu_catalog

    defined = [value.name for value in vars(gpu_catalog).values() if isinstance(value, gpu_catalog.GpuModel)]
    carried = list(dict.fromkeys(instance.gpu.name for instance in gpu_catalog.INSTANCE_TYPES.values()))
    assert sorted(defined) == sorted(carried)
    assert list(gpu_catalog.GPU_MODELS) == carried
    assert all(gpu_catalog.GPU_MODELS[i.gpu.name] is i.gpu for i in gpu_catalog.INSTANCE_TYPES.values())
