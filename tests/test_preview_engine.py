"""The preview's mock engine (preview/engine.py) sends each registration as the SDK builds it, less what only the
real engine reads."""

from __future__ import annotations

import enum
import gc
from pathlib import Path

from pulumi.runtime import resource as runtime_resource
from pulumi.runtime import rpc

from preview import engine
from preview.stack_config import StackConfig

# A component whose child registers from inside two constructors: the SDK's stack trace for it is not empty.
PROGRAM = """
import pulumi


class Box(pulumi.ComponentResource):
    def __init__(self, name):
        super().__init__("test:index:Box", name)
        pulumi.CustomResource("test:index:Thing", f"{name}-thing", {"size": 1}, pulumi.ResourceOptions(parent=self))
        self.register_outputs({})


Box("box")
"""


def test_registrations_carry_no_stack_trace_and_the_sdk_gets_its_own_back(tmp_path: Path, monkeypatch):
    (tmp_path / "__main__.py").write_text(PROGRAM)
    sent = []
    register = engine.RecordingMonitor.RegisterResource

    def recording(self, request):
        sent.append((request.type, len(request.stackTrace.frames), request.HasField("sourcePosition")))
        return register(self, request)

    monkeypatch.setattr(engine.RecordingMonitor, "RegisterResource", recording)
    original = runtime_resource._get_stack_trace
    evaluation = engine.evaluate(tmp_path, StackConfig(project="engine-test", stack="dev"))
    assert sorted(r.type for r in evaluation.resources) == ["pulumi:pulumi:Stack", "test:index:Box", "test:index:Thing"]
    # The root stack registers as the mocks are set, before the program runs; the program's own registrations go bare.
    program = sorted(s for s in sent if s[0] != "pulumi:pulumi:Stack")
    assert program == [("test:index:Box", 0, False), ("test:index:Thing", 0, False)]
    # Outside a preview's evaluation the SDK walks the stack as it always does.
    assert runtime_resource._get_stack_trace is original


# Stack outputs of each kind: plain tables (nested dicts, lists, a tuple, every scalar), and values the SDK must
# resolve (an Output inside a table, a secret, an enum's str subclass).
OUTPUTS_PROGRAM = """
import enum

import pulumi


class Tier(str, enum.Enum):
    PREMIUM = "premium"


thing = pulumi.CustomResource("test:index:Thing", "thing", {"size": 1})
pulumi.export("table", {"rows": [{"name": "a", "replicas": 2, "ratio": 0.5, "spot": False, "note": None}], "pair": ("x", 1)})
pulumi.export("empty", {"none": {}, "nothing": []})
pulumi.export("nested", {"urn": thing.urn, "plain": [1, 2]})
pulumi.export("secret", pulumi.Output.secret("hunter2"))
pulumi.export("tier", {"tier": Tier.PREMIUM})
"""


def test_stack_outputs_resolve_as_the_sdk_resolves_them(tmp_path: Path):
    """Plain tables are taken as they are (the SDK's from_input walks each level of them again); each stack output
    equals what the SDK's own resolution gives, the secret one shown as [secret]."""
    (tmp_path / "__main__.py").write_text(OUTPUTS_PROGRAM)
    evaluation = engine.evaluate(tmp_path, StackConfig(project="engine-test", stack="dev"))
    outputs = evaluation.stack_outputs
    row = {"name": "a", "replicas": 2, "ratio": 0.5, "spot": False, "note": None}
    assert outputs["table"] == {"rows": [row], "pair": ("x", 1)}
    assert outputs["empty"] == {"none": {}, "nothing": []}
    assert outputs["nested"] == {"urn": "urn:pulumi:dev::engine-test::test:index:Thing::thing", "plain": [1, 2]}
    assert outputs["secret"] == "[secret]"
    assert outputs["tier"] == {"tier": "premium"}
    # Plain once the SDK has resolved it; a str subclass (an enum's member) is left to the SDK.
    assert all(engine.is_plain_data(outputs[k]) for k in ("table", "empty", "nested"))
    assert not engine.is_plain_data({"tier": _Tier.PREMIUM}) and not engine.is_plain_data({1: "a"})


class _Tier(str, enum.Enum):
    PREMIUM = "premium"


def _unknown_check_cases() -> list[object]:
    unknown = rpc.UNKNOWN
    holds_itself: list[object] = [1]
    holds_itself.append(holds_itself)
    table: dict[str, object] = {"a": 1}
    table["self"] = table
    shared = [unknown]
    return [
        None,
        "text",
        3,
        unknown,
        {},
        [],
        {"a": {"b": [1, 2, {"c": unknown}]}},
        {"a": {"b": [1, 2, {"c": "known"}]}},
        [[[]], [unknown]],
        (unknown,),  # a tuple is not walked, by either
        {unknown: 1},  # nor a dict's keys
        holds_itself,
        table,
        [shared, shared],
        [holds_itself, {"x": [unknown]}],
        # Plain scalars passed over, then an unknown after them (the engine's walk skips the scalars).
        [1, "x", None, True, 2.5, unknown],
        {"a": "b", "c": 1, "d": [None, {"e": unknown}]},
        # A dict whose `values` is a field, as pulumi's input types' (a selector requirement's values).
        _WithValuesField(values=[unknown]),
        _WithValuesField(values=["known"]),
    ]


class _WithValuesField(dict):
    def __init__(self, values: list) -> None:
        super().__init__(values=values)
        self.values = values  # type: ignore[assignment,method-assign]


def test_unknown_check_answers_as_the_sdks_and_is_what_the_sdk_calls_during_evaluation(tmp_path: Path, monkeypatch):
    sdk_check = rpc.contains_unknowns
    for value in _unknown_check_cases():
        assert engine.contains_unknowns(value) is sdk_check(value), value
    calls = []

    def counting(value):
        calls.append(value)
        return sdk_check(value)

    monkeypatch.setattr(engine, "contains_unknowns", counting)
    (tmp_path / "__main__.py").write_text(PROGRAM)
    engine.evaluate(tmp_path, StackConfig(project="engine-test", stack="dev"))
    # The SDK checks every Output's value and every serialized property through the module's name.
    assert len(calls) > 10
    assert rpc.contains_unknowns is sdk_check


def test_the_sdks_unknown_check_leaves_reference_cycles_and_the_engines_none():
    value = {"a": [1, {"b": "c"}], "d": rpc.UNKNOWN}
    gc.collect()
    gc.disable()
    try:
        for _ in range(100):
            rpc.contains_unknowns(value)
        sdk_garbage = gc.collect()
        for _ in range(100):
            engine.contains_unknowns(value)
        engine_garbage = gc.collect()
    finally:
        gc.enable()
    # pulumi 3.272.0: a recursive closure per call, only the cyclic collector frees it.
    assert sdk_garbage >= 100
    assert engine_garbage == 0


GC_PROGRAM = """
import gc
from pathlib import Path

import pulumi

Path(__file__).with_name("collector.txt").write_text(str(gc.isenabled()))
pulumi.CustomResource("test:index:Thing", "thing", {"size": 1})
"""


def test_the_evaluation_runs_with_the_collector_paused_and_leaves_it_as_found(tmp_path: Path):
    (tmp_path / "__main__.py").write_text(GC_PROGRAM)
    config = StackConfig(project="engine-test", stack="dev")
    assert gc.isenabled()
    engine.evaluate(tmp_path, config)
    assert (tmp_path / "collector.txt").read_text() == "False"
    assert gc.isenabled()
    gc.disable()
    try:
        engine.evaluate(tmp_path, config)
        assert not gc.isenabled()
    finally:
        gc.enable()
