# Long module: every rule docs/architecture.md promises, each with the check that it sees a breach, in one place.
"""The structure the project holds itself to (platform_tools/architecture.py): imports only downward between the
layers and never in a circle, the policy pack apart, modules and functions within their limits or saying why, and
docs/architecture.md's module map current."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from platform_tools.architecture import (
    ARCHITECTURE_FILE,
    Module,
    attribute_readers,
    definitions,
    functions_over_their_limit,
    import_circles,
    import_graph,
    modules_over_their_limit,
    project_modules,
    pure_modules_importing_components,
    rendered,
    string_assignments,
    string_collections,
    string_constants,
    test_modules,
    upward_imports,
)


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return project_modules()


def test_no_module_imports_a_higher_layer_and_the_pack_imports_nothing_of_the_project(modules):
    assert upward_imports(modules, import_graph(modules)) == []


def test_no_plan_shape_or_builder_imports_a_component(modules):
    assert pure_modules_importing_components(modules, import_graph(modules)) == []


def test_a_builder_importing_a_component_is_found(tmp_path):
    component = _module(tmp_path, "components.cluster", "import pulumi\nclass Cluster(pulumi.ComponentResource):\n    pass\n")
    plan = _module(tmp_path, "components.plan", "from .cluster import Cluster\n")
    modules = {"components.cluster": component, "components.plan": plan}
    assert pure_modules_importing_components(modules, import_graph(modules)) == ["components.plan -> components.cluster"]


def test_no_import_circle(modules):
    assert import_circles(import_graph(modules)) == []


@pytest.fixture(scope="module")
def every_module(modules) -> dict[str, Module]:
    """The layers' and the pack's modules, the suite's, the benchmarks' and the entry point: what the size rules hold."""
    return {**modules, **test_modules()}


def test_no_module_over_600_lines_and_none_over_450_without_its_reason(every_module):
    assert modules_over_their_limit(every_module) == []


def test_no_function_over_80_lines_without_its_reason(every_module):
    assert functions_over_their_limit(every_module) == []


def test_the_modules_outside_the_layers_are_the_suites_the_benchmarks_and_the_entry_point(tmp_path):
    """test_modules reads tests/**/*.py (the folders under tests/ too), benchmarks/**/*.py and __main__.py (not a
    layer) as modules the size rules take (every_module above), and it finds a long one of them without its reason."""
    files = {
        "tests/test_long.py": "x = 1\n" * 451,
        "tests/helpers.py": "# Long module: one table.\n" + "x = 1\n" * 460,
        "tests/servers/fake.py": "x = 1\n",
        "benchmarks/bench.py": "x = 1\n",
        "benchmarks/flat_program/__main__.py": "x = 1\n",
        "__main__.py": "import components\n",
        "components/plan.py": "x = 1\n" * 700,
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = test_modules(tmp_path)
    assert sorted(found) == [
        "__main__",
        "benchmarks.bench",
        "benchmarks.flat_program.__main__",
        "tests.helpers",
        "tests.servers.fake",
        "tests.test_long",
    ]
    assert found["tests.test_long"].path == tmp_path / "tests" / "test_long.py" and found["tests.test_long"].lines == 451
    assert modules_over_their_limit(found) == ["tests.test_long: 451 lines without `# Long module: <why>` at its top"]
    # The project's own: this module, a test server, a benchmark and the entry point are among them, none of the layers'.
    own = test_modules()
    assert {"tests.test_architecture", "tests.servers.mlflow", "benchmarks.bench_filter", "__main__"} <= set(own)
    assert not set(own) & set(project_modules())


def test_the_module_map_is_current(modules):
    current = ARCHITECTURE_FILE.read_text()
    assert current == rendered(current, modules), "stale docs/architecture.md: run `make docs`"


def _module(tmp_path: Path, name: str, text: str) -> Module:
    path = tmp_path / (name.replace(".", "/") + ".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return Module(name, path, ast.parse(text), text)


def test_the_checks_see_a_circle_under_type_checking_an_upward_import_and_a_long_function(tmp_path):
    """Each check on small modules it must flag: a circle hidden behind TYPE_CHECKING, a relative import upward out
    of the lowest layer, the pack reaching into the project, and an 81-line function without a reason."""
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    modules = {
        m.name: m
        for m in (
            _module(tmp_path, "components.a", "from .b import B\n"),
            _module(tmp_path, "components.b", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"),
            _module(tmp_path, "platform_config.c", "from components.a import A\n"),
            _module(tmp_path, "policies.inference_governance.d", "from platform_config.c import C\n"),
            _module(tmp_path, "preview.e", f"def long():\n{body}\n"),
            _module(tmp_path, "preview.f", f'def long():\n    """Long because a table."""\n{body}\n'),
        )
    }
    graph = import_graph(modules)
    assert import_circles(graph) == [["components.a", "components.b"]]
    assert upward_imports(modules, graph) == [
        "platform_config.c -> components.a",
        "policies.inference_governance.d -> platform_config.c",
    ]
    assert functions_over_their_limit(modules) == ["preview.e.long: 81 lines"]


def test_quantities_are_written_by_platform_config_quantity_only(modules):
    """One home for the quantity forms a manifest holds (exact, binary, per resource): no other function named for
    quantities, except the schema's validators, which check a quantity and hand it back as given (the pack, apart,
    reads quantities with its own)."""
    validators = {"platform_config.models.base._quantity", "platform_config.models.base._positive_quantity"}
    elsewhere = [
        f"{module.name}.{node.name}"
        for module in modules.values()
        if module.name != "platform_config.quantity" and module.package != "policies"
        for node in ast.walk(module.tree)
        if isinstance(node, ast.FunctionDef) and "quantity" in node.name and f"{module.name}.{node.name}" not in validators
    ]
    assert elsewhere == []
    assert quantities_written_by_hand(modules) == []


# A quantity written in an f-string: a value, then a binary unit ("{n}Gi"), a decimal byte unit for people ("{x} GB",
# "{r} GB/s"), or milli-units of a value times 1000.
_UNIT = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_BYTES_FOR_PEOPLE = ("kB", "MB", "GB", "TB", "PB")


def _writes_a_quantity(node: ast.JoinedStr) -> bool:
    for value, after in zip(node.values, node.values[1:], strict=False):
        if not (isinstance(value, ast.FormattedValue) and isinstance(after, ast.Constant) and isinstance(after.value, str)):
            continue
        if after.value.startswith(_UNIT) and not after.value[2:3].isalpha():
            return True
        unit = after.value.removeprefix(" ")
        if unit.startswith(_BYTES_FOR_PEOPLE) and not unit[2:3].isalpha():
            return True
        times_1000 = any(isinstance(n, ast.Constant) and n.value == 1000 for n in ast.walk(value.value))
        if after.value.startswith("m") and not after.value[1:2].isalpha() and times_1000:
            return True
    return False


def quantities_written_by_hand(modules: dict[str, Module]) -> list[str]:
    """Where a module outside platform_config/quantity.py writes a quantity in an f-string ("{n}Gi", "{x * 1000}m",
    "{b / 1e9:.1f} GB", "{r / 1e9:.3g} GB/s") instead of calling the function there that writes that form
    (gib_quantity, milli_quantity, show_amount, show_gb, show_gb_per_second, ...)."""
    return [
        f"{module.name}:{node.lineno}"
        for module in modules.values()
        if module.name != "platform_config.quantity" and module.package != "policies"
        for node in ast.walk(module.tree)
        if isinstance(node, ast.JoinedStr) and _writes_a_quantity(node)
    ]


def test_a_quantity_written_by_hand_is_found(tmp_path):
    text = 'a = f"{n}Gi"\nb = f"{int(x * 1000)}m"\nc = f"{n}Gil"\nd = f"{minutes}m"\n'
    text += 'e = f"{n / 1e9:.1f} GB"\nf = f"{r / 1e9:.3g} GB/s = {s} s"\ng = f"{n}MB"\nh = f"{n} GBP"\ni = f"{n} GiB"\n'
    module = _module(tmp_path, "components.x", text)
    found = ["components.x:1", "components.x:2", "components.x:5", "components.x:6", "components.x:7"]
    assert quantities_written_by_hand({"components.x": module}) == found


# The canary release record's one home, and the pack's generated copy of it (components/policy_facts.py).
RELEASE_RECORD_HOMES = {"platform_config.release", "policies.inference_governance.release_record"}
# Its writers, readers and rule, by name; and the words only the record has: its annotations and the output form's
# keys that no config block shares.
RELEASE_RECORD_FUNCTIONS = {"next_step", "to_output", "from_output", "to_annotations", "from_annotations"}
RELEASE_RECORD_CLASSES = {"Release", "ReleaseRecordError"}


def _release_record_words() -> set[str]:
    from platform_config import release

    annotations = {value for name, value in vars(release).items() if name.endswith("_ANNOTATION")}
    return annotations | {"stableWeights", "canaryWeights"}


def release_record_copies(modules: dict[str, Module]) -> list[str]:
    """Where else than its home a module defines the release record's functions or classes, or spells its words."""
    words = _release_record_words()
    found = []
    for module in modules.values():
        if module.name in RELEASE_RECORD_HOMES:
            continue
        # Functions and classes at the top level (a class's method of the same name is its own); words anywhere.
        for node in module.tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in RELEASE_RECORD_FUNCTIONS:
                found.append(f"{module.name}: def {node.name}")
            elif isinstance(node, ast.ClassDef) and node.name in RELEASE_RECORD_CLASSES:
                found.append(f"{module.name}: class {node.name}")
        for word in ast.walk(module.tree):
            if isinstance(word, ast.Constant) and word.value in words:
                found.append(f"{module.name}: {word.value!r}")
    return found


def test_the_release_record_has_one_home(modules):
    """The canary release record (its annotations' names, its output form's keys, its readers and writers and
    `next_step`) is defined in platform_config/release.py, which the pack runs a generated copy of, and nowhere else:
    every other module imports it."""
    assert release_record_copies(modules) == []
    assert RELEASE_RECORD_HOMES <= set(modules)


def test_the_release_record_check_sees_a_second_copy(tmp_path):
    modules = {
        m.name: m
        for m in (
            _module(tmp_path, "platform_tools.a", "def next_step(weight, steps):\n    return None\n"),
            _module(tmp_path, "policies.inference_governance.b", 'STABLE = "inference.platform/stable-version"\n'),
            _module(tmp_path, "preview.c", 'def read(entry):\n    return entry.get("canaryWeights")\n'),
            _module(tmp_path, "components.d", "class Release:\n    pass\n"),
            _module(tmp_path, "platform_config.release", "def next_step(weight, steps):\n    return None\n"),
        )
    }
    assert release_record_copies(modules) == [
        "platform_tools.a: def next_step",
        "policies.inference_governance.b: 'inference.platform/stable-version'",
        "preview.c: 'canaryWeights'",
        "components.d: class Release",
    ]


# A value or rule the config checks and the plan (or two components) both read, by its one home: a second definition of
# the name anywhere in the project (leading underscores aside) is a copy that can drift from it.
ONE_HOME = {
    # What a batch job asks of the platform: plan values, which the batch checks read too.
    "batch_gpu_request": "platform_config.batch_jobs",
    "batch_shards": "platform_config.batch_jobs",
    "shard_estimate_seconds": "platform_config.batch_jobs",
    # The commit SHA that pins a model's revision and a batch job's input.
    "COMMIT_SHA": "platform_config.models.sources",
    # The namespaces a tenant may not take.
    "RESERVED_NAMESPACES": "platform_config.namespaces",
    # How far the summed quotas may exceed the pools, and the rule the capacity table and its check share.
    "overcommit_ratio": "platform_config.capacity",
    "within_capacity": "platform_config.capacity",
    # The plan's tenant and pool slices, and the GPU resources the pools provide, which every quota names.
    "TenantPlan": "platform_config.tenant_plan",
    "PriorityBudget": "platform_config.tenant_plan",
    "tenant_plan": "platform_config.tenant_plan",
    "PoolCapacity": "platform_config.pool_plan",
    "gpu_resources_provided": "platform_config.pool_plan",
    "PoolPlan": "components.pool_plan",
    # A tenant's batch quotas against its experiment share: the batch checks and the batch queues' borrowing limits.
    "BatchBudget": "platform_config.capacity",
    "batch_budget": "platform_config.capacity",
    # Upstream versions, pinned in one table: a module that needs a release's tag derives it from the pin.
    "LLM_D_ROUTER_VERSION": "platform_config.pins",
    "GATEWAY_API_INFERENCE_EXTENSION_VERSION": "platform_config.pins",
}
NAMESPACES_HOME = "platform_config.namespaces"


@pytest.mark.parametrize("name", sorted(ONE_HOME))
def test_a_shared_value_is_defined_in_its_one_home_only(modules, name):
    assert definitions(modules, name) == [ONE_HOME[name]]


# Homes whose every top-level name (a builder, a constant, a private helper) is a shared piece defined there alone:
# a second definition of any of them anywhere in the project is a copy (docs/architecture.md, "Shared names").
SHARED_HOMES = {
    # The pieces every pod shares: security contexts, the GPU toleration, the aws CLI container, token Secrets, ...
    "components.specs.pod_parts": {
        # Not a shared piece: the user a pod runs as is its image's (the endpoint picker's is 65532, its pods.py).
        "RUN_AS",
    },
    # The scripts containers run and the paths they share.
    "components.specs.scripts": set(),
    # The images each pinned chart runs, and how a digest is written into its values.
    "platform_config.chart_images": set(),
}


def _top_level_names(module: Module) -> list[str]:
    names = []
    for node in module.tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return names


@pytest.mark.parametrize("home", sorted(SHARED_HOMES))
def test_every_shared_piece_is_defined_in_its_home_only(modules, home):
    names = [name for name in _top_level_names(modules[home]) if name not in SHARED_HOMES[home]]
    assert len(names) >= 10
    assert {name: definitions(modules, name) for name in names} == {name: [home] for name in names}


def test_the_shared_pieces_are_the_ones_the_docs_name(modules):
    """The pieces docs/architecture.md names are among the homes' names (a renamed builder is not silently dropped)."""
    named = {
        "components.specs.pod_parts": {
            "gpu_toleration",
            "pod_security_context",
            "container_security_context",
            "aws_cli_container",
            "token_secret",
        },
        "components.specs.scripts": {"stage_in_script", "uploader_script", "s3_sync_command", "HF_DOWNLOAD_SCRIPT"},
        "platform_config.chart_images": {"ChartImage", "chart_images", "GPU_OPERATOR_IMAGES", "ISTIO_IMAGES"},
    }
    assert all(names <= set(_top_level_names(modules[home])) for home, names in named.items())


def test_the_chart_images_are_written_in_their_table_only(modules):
    """No module but platform_config/chart_images.py writes an image a pinned chart runs (its reference as a string):
    a second list of them would drift from the table the lock, the program and the pack read."""
    import typing

    from platform_config.chart_images import chart_images
    from platform_config.models import KubernetesVersion

    references = {image.reference for version in typing.get_args(KubernetesVersion) for image in chart_images(version)}
    assert len(references) >= 20
    holders = sorted(
        module.name
        for module in modules.values()
        if module.name != "platform_config.chart_images" and module.package != "policies"
        if any(reference in text for text in string_constants(module) for reference in references)
    )
    assert holders == []


def test_every_pinned_version_is_defined_in_the_pins_only(modules):
    """Every version platform_config/pins.py binds to a name (`*_VERSION`) is defined there alone: a second
    `X_VERSION = "..."` elsewhere would be a pin the table does not hold."""
    versions = sorted(name for name in string_assignments(modules["platform_config.pins"]) if name.endswith("_VERSION"))
    assert {"LLM_D_ROUTER_VERSION", "GATEWAY_API_INFERENCE_EXTENSION_VERSION", "VLLM_VERSION"} <= set(versions)
    assert {name: definitions(modules, name) for name in versions} == {name: ["platform_config.pins"] for name in versions}


def test_the_commit_sha_pattern_is_written_once(modules):
    """The 40-character commit SHA pattern, as a pattern of its own, is written in its home only (a credential's
    pattern may hold one inside it)."""
    forms = {"[0-9a-f]{40}", "[a-f0-9]{40}"}
    holders = sorted(
        module.name
        for module in modules.values()
        if module.package != "policies" and any(s.strip("^$") in forms for s in string_constants(module))
    )
    assert holders == [ONE_HOME["COMMIT_SHA"]]


def test_definitions_sees_a_private_copy(tmp_path):
    """A copy under a leading underscore is a copy; a name used, not defined, is not; the pack is apart."""
    modules = {
        m.name: m
        for m in (
            _module(tmp_path, "platform_config.a", "def batch_shards(job):\n    return 1\n"),
            _module(tmp_path, "platform_config.b", "_batch_shards = lambda job: 1\n"),
            _module(tmp_path, "components.c", "from platform_config.a import batch_shards\nx = batch_shards(None)\n"),
            _module(tmp_path, "policies.inference_governance.d", "def batch_shards(job):\n    return 1\n"),
        )
    }
    assert definitions(modules, "batch_shards") == ["platform_config.a", "platform_config.b"]


def test_the_platform_namespaces_are_named_once(modules):
    """Each namespace the platform installs into is written as a string in platform_config/namespaces.py only: no other
    module binds a `..._NAMESPACE` name to a string, nor writes a collection holding two of them (a second list of
    the reserved names)."""
    home = string_assignments(modules[NAMESPACES_HOME])
    names = {value for key, value in home.items() if key.endswith("NAMESPACE")}
    assert len(names) >= 10
    elsewhere = sorted(
        f"{module.name}.{key}"
        for module in modules.values()
        if module.name != NAMESPACES_HOME and module.package != "policies"
        for key in string_assignments(module)
        if key.endswith("NAMESPACE")
    )
    lists = sorted(
        module.name
        for module in modules.values()
        if module.name != NAMESPACES_HOME and module.package != "policies"
        if any(len(found & names) >= 2 for found in string_collections(module))
    )
    assert (elsewhere, lists) == ([], [])


def test_the_overcommit_ratio_is_read_from_the_config_once(modules):
    """`capacity.overcommitRatio` is read by `overcommit_ratio` alone; the capacity table and its check take it from
    there."""
    assert attribute_readers(modules, "overcommit_ratio") == [ONE_HOME["overcommit_ratio"]]


def test_the_gpu_resources_the_pools_provide_are_gathered_once(modules):
    """Only `gpu_resources_provided` gathers the GPU resources across the pools (a comprehension over the pools and
    what each node advertises, `per_node`); the quotas, the tenants' check and the plan read it."""
    gathering = []
    for module in modules.values():
        if module.package == "policies":
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
                walked = [ast.unparse(g.iter) for g in node.generators]
                if any(w.endswith("node_pools") for w in walked) and any(w.endswith(".per_node") for w in walked):
                    gathering.append(module.name)
    assert gathering == [ONE_HOME["gpu_resources_provided"]]


def test_the_experiment_share_is_taken_from_the_quota_in_the_tenant_plan_only(modules):
    """`experimentQuota` is read where a budget is derived from it (the tenant plan: production's budget is the quota
    less it; the batch budget, `batch_budget`, which the batch checks and the batch queues read), where the tenants'
    checks hold it as written, and nowhere else: a quota builder or a check that needs production's, the experiments'
    or the batch jobs' budget reads the tenant plan or the batch budget."""
    assert attribute_readers(modules, "experiment_quota") == [
        "platform_config.capacity",
        "platform_config.checks.tenants",
        "platform_config.tenant_plan",
    ]


# S3 locations' rules (platform_config/s3_locations.py), which the pack runs a generated copy of.
S3_LOCATION_HOMES = {"platform_config.s3_locations", "policies.inference_governance.s3_locations"}
S3_LOCATION_FUNCTIONS = {"s3_parts", "s3_within", "s3_overlap"}


def test_s3_locations_are_compared_by_one_rule_that_the_pack_runs_a_copy_of(modules):
    """How a location's bucket and segments are read and whether one lies under another: defined in
    platform_config/s3_locations.py and, byte for byte, the pack's generated copy, nowhere else (a hand copy in the
    pack could drift from the config check it must agree with)."""
    from components.policy_facts import S3_LOCATIONS_FILE, S3_LOCATIONS_SOURCE, pack_copy

    assert S3_LOCATIONS_FILE.read_bytes() == pack_copy(S3_LOCATIONS_SOURCE).encode(), "stale: run `make policy-facts`"
    copies = [
        f"{module.name}: def {node.name}"
        for module in modules.values()
        if module.name not in S3_LOCATION_HOMES
        for node in module.tree.body
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") in S3_LOCATION_FUNCTIONS
    ]
    assert copies == []


# Where an S3 URI may be taken apart by hand, outside its home and the pack's copy, and why.
S3_PARSING_EXEMPT = {
    # The weight mirror's runner runs alone in its pod: its one file, mounted from a ConfigMap
    # (components/specs/weight_mirror.py RUNNER_SOURCE), on the vLLM image's packages, so it can import nothing of the
    # project; and it needs the object key exactly as written (boto3's), not the segments the rule compares.
    "components.mirror_runner.mirror_runner",
}
_STRING_METHODS = {"removeprefix", "partition", "rpartition", "split", "rsplit", "replace", "lstrip", "strip", "index", "find"}


def s3_uris_parsed_by_hand(modules: dict[str, Module]) -> list[str]:
    """Where a module outside the S3 locations' homes (and the exempt) takes an S3 URI apart itself: a string method
    given the scheme (`uri.removeprefix("s3://")`, `.split("s3://")`), or a split at "/" (`.partition("/")`,
    `.split("/", 1)`) of a value named for an S3 location or URI (`s3`, `uri`, `location` in its names), instead of
    calling s3_parts."""
    found = []
    for module in modules.values():
        if module.name in S3_LOCATION_HOMES | S3_PARSING_EXEMPT:
            continue
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _STRING_METHODS):
                continue
            given = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            names = [n.id for n in ast.walk(node.func.value) if isinstance(n, ast.Name)]
            names += [n.attr for n in ast.walk(node.func.value) if isinstance(n, ast.Attribute)]
            by_slash = given[:1] == ["/"] and any(hint in n.lower() for n in names for hint in ("s3", "uri", "location"))
            if any("s3://" in g for g in given) or by_slash:
                found.append(f"{module.name}:{node.lineno}")
    return sorted(set(found))


def test_s3_uris_are_taken_apart_by_s3_parts_only(modules):
    assert s3_uris_parsed_by_hand(modules) == []
    assert S3_PARSING_EXEMPT <= set(modules), "an exemption for a module that is gone"


def test_an_s3_uri_taken_apart_by_hand_is_found(tmp_path):
    text = (
        'a, _, b = uri.removeprefix("s3://").partition("/")\n'
        'c = location.split("/", 1)\n'
        'd = s3_prefix.rpartition("/")\n'
        'e = text.removeprefix("arn:aws:s3:::").partition("/")\n'
        'f = image.split("/", 1)\n'
    )
    modules = {"components.x": _module(tmp_path, "components.x", text)}
    assert s3_uris_parsed_by_hand(modules) == ["components.x:1", "components.x:2", "components.x:3"]


def _callers(modules: dict[str, Module], function: str) -> list[str]:
    """The modules that call `function` by name (`f(...)` or `x.f(...)`)."""
    return sorted(
        module.name
        for module in modules.values()
        if any(
            isinstance(node, ast.Call)
            and (node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)) == function
            for node in ast.walk(module.tree)
        )
    )


def test_a_pools_supply_is_computed_in_the_config_layer_and_read_from_the_plan_above_it(modules):
    """`pool_supply` (what one node of a pool advertises) is called in platform_config/ only: by the capacity rules, the
    config checks (which run before there is a plan) and platform_config/pool_plan.py, which resolves each pool's
    `PoolCapacity` once; the components, the preview and the tools read it from the plan's pool slices (`PoolPlan`)."""
    callers = _callers(modules, "pool_supply")
    assert "platform_config.pool_plan" in callers
    assert [name for name in callers if not name.startswith("platform_config.")] == []


def test_the_batch_budget_is_summed_once_for_the_checks_and_the_queues(modules):
    """A tenant's batch quotas are summed against its experiment share by `batch_budget` alone: the batch checks
    (over the share is an error) and the batch queues (what the share leaves is the borrowing limit) both call it."""
    assert _callers(modules, "batch_budget") == [ONE_HOME["batch_budget"], "platform_config.checks.batch"]
