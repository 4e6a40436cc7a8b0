"""What the weight mirror's tests share (tests/test_weight_mirror.py, tests/test_weight_mirror_runner.py): prod's
mirror bucket and where a tenant's copy of a revision is in it."""

from __future__ import annotations

BUCKET = "inference-prod-model-weights"


def copy_of(source: str, tenant: str) -> str:
    repo, revision = source.split("@")
    return f"s3://{BUCKET}/{tenant}/{repo}/{revision}/"
