"""The preview's mock engine (preview/engine.py) sends each registration as the SDK builds it, less what only the
real engine reads."""

from __future__ import annotations

from pathlib import Path

from pulumi.runtime import resource as runtime_resource

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
