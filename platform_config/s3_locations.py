"""S3 locations as the platform compares them: a `s3://bucket/path` URI's bucket and path segments, and whether one
location lies under another by whole segments (pure, importing nothing: the policy pack runs a generated copy of this
module, policies/inference_governance/s3_locations.py, byte for byte, since it imports nothing of the project)."""

from __future__ import annotations


def s3_parts(uri: str) -> tuple[str, tuple[str, ...]]:
    """A location's bucket and its path segments (empty ones dropped: `s3://b/x/` is `s3://b/x`)."""
    bucket, _, path = uri.removeprefix("s3://").partition("/")
    return bucket, tuple(part for part in path.split("/") if part)


def s3_within(uri: str, prefix: str) -> bool:
    """Whether `uri` is `prefix` or below it, by whole path segments (`s3://b/team` does not hold `s3://b/teams`)."""
    bucket, path = s3_parts(uri)
    prefix_bucket, prefix_path = s3_parts(prefix)
    return bucket == prefix_bucket and path[: len(prefix_path)] == prefix_path


def s3_overlap(one: str, other: str) -> bool:
    """Whether two prefixes share any location (one holds the other)."""
    return s3_within(one, other) or s3_within(other, one)
