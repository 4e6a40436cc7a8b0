"""What the canary tool's tests share (tests/test_canary.py and the modules beside it): a copy of the prod stack
file with llama-8b's release replaced, the tool's `canary` and `step` commands run in-process, the lines an
edit changed."""

from __future__ import annotations

import difflib
from pathlib import Path

from platform_tools.__main__ import main

from .helpers import ROOT, stack_file

PROD_RELEASE = (
    "      release:\n        stable: v1\n        canary: v2\n        canaryWeight: 10\n        overrideHeader: x-model-version\n"
)


# The serving tenant's quotas hold prod's llama-8b at 10 replicas through every canary step
# (platform_config/serving.py version_peaks: the heaviest split among the remaining steps).
PROD_MAX_REPLICAS = "        maxReplicas: 10\n"


def _stack(tmp_path: Path, release: str | None = None, max_replicas: int = 10) -> Path:
    """A copy of the prod stack, its llama-8b release block replaced by `release`."""
    text = stack_file("prod").read_text()
    for block in (PROD_RELEASE, PROD_MAX_REPLICAS):
        assert text.count(block) == 1, f"the prod stack's llama-8b changed: update {block!r}"
    text = text.replace(PROD_MAX_REPLICAS, f"        maxReplicas: {max_replicas}\n")
    path = tmp_path / "Pulumi.prod.yaml"
    path.write_text(text.replace(PROD_RELEASE, release or PROD_RELEASE))
    return path


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["canary", *args, "--project-dir", str(ROOT)])
    out, err = capsys.readouterr()
    return code, out, err


def _changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:1] in "+-"]


def _step(capsys, path: Path, *args: str) -> tuple[int, str, str]:
    code = main(["step", "prod", "llama-8b", *args, "--stack-file", str(path), "--project-dir", str(ROOT)])
    out, err = capsys.readouterr()
    return code, out, err
