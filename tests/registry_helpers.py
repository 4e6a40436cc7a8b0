"""What the registry tests share (tests/test_registry.py and the modules beside it): the weights the registered
versions name, a committed stack taking some versions from a registry, the preview run on it and what it
refused, the lock file's place, the serving aliases and the alias tool as the deploy workflow runs it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from .helpers import ROOT, PreviewRun, raw_stack, run_preview, write_stack

SHA_A = "7ae557604adf67be50417f59c2c2f167def9a775"
SHA_B = "aa" * 20
SHA_C = "0123456789abcdef0123456789abcdef01234567"
REPO = "Qwen/Qwen2.5-0.5B-Instruct"


def with_registry(base: str, uri: str, sources: dict[tuple[int, int], dict[str, Any]], **registry: Any) -> dict[str, Any]:
    """A committed stack with a registry block and some versions' sources in it ({(model, version): mlflow ref}); the
    versions it takes from its own registry (staging's canary) pinned to what its lock file holds, so only the test's
    references are asked."""
    from platform_config.models import pinned_source

    raw = copy.deepcopy(raw_stack(base))
    own = raw.get("registry", {}).get("lockFile")
    locked = json.loads((ROOT / own).read_text())["entries"] if own else []
    for model in raw["models"]:
        for version in model["versions"]:
            reference = version["source"].get("mlflow")
            if reference is not None:
                (entry,) = [
                    e for e in locked if (e["registeredModel"], e.get("alias")) == (reference["model"], reference.get("alias"))
                ]
                pinned = pinned_source(entry["weights"])
                assert pinned is not None
                version["source"] = {"huggingface": pinned.huggingface, "revision": pinned.revision}
    raw["registry"] = {"trackingUri": uri, **registry}
    for (model, version), reference in sources.items():
        raw["models"][model]["versions"][version]["source"] = {"mlflow": reference}
    return raw


def preview(
    tmp_path: Path, raw: dict[str, Any], *args: str, name: str = "out", extra: dict[str, Any] | None = None
) -> PreviewRun:
    folder = tmp_path / name
    folder.mkdir()
    stack = write_stack(folder, raw, extra)
    out = folder / "preview"
    result = run_preview("--stack", "test", "--config-file", str(stack), "--out", str(out), *args)
    return PreviewRun("test", out, result)


def refused(run: PreviewRun) -> str:
    assert run.result.returncode == 2, run.result.stdout[-2000:] + run.result.stderr[-2000:]
    assert "Traceback" not in run.result.stderr
    return run.result.stderr


def manifest(run: PreviewRun, kind: str, name: str) -> dict[str, Any]:
    (found,) = [m for m in run.manifests() if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def pod_template(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]


# The key of the first model's first version's registry reference, which most tests name.
KEY = "inference-platform:models[0].versions[0].source.mlflow"
# The lock file (`registry.lockFile`) the tests commit in a project folder.
LOCK = "stacks/Pulumi.test.registry.json"
# The aliases a deploy moves (`registry.servingAliases`).
SERVING_ALIASES = {"stable": "staging", "canary": "staging-canary"}


def tool(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m platform_tools ...` as the deploy workflow runs it."""
    return subprocess.run([sys.executable, "-m", "platform_tools", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
