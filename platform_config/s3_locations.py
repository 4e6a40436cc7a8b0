"""S3 locations as the platform compares them: a `s3://bucket/path` URI's bucket and path segments, and whether one
location lies under another by whole segments (pure, importing nothing: the policy pack runs a generated copy of this
module, policies/inference_governance/s3_locations.py, byte for byte, since it imports nothing of the project)."""

from __future__ import annotations

# S3 reads a key as written: its data model is flat, a key is the object's whole name with its prefixes and their `/`
# delimiters (Amazon S3 User Guide, "Naming Amazon S3 objects"), so `team//w` is a key prefix of its own, not
# `team/w`. A location with an empty path segment is refused, never read as the one without it. A trailing `/` is no
# segment: `aws s3 sync` reads `s3://b/x` as the prefix `x/` too (aws-cli 2.27.50, awscli/customizations/s3/
# fileformat.py s3_format: a directory operation's path gets its `/` appended), and the program joins a location's
# folders after stripping it (platform_config/models/sources.py pinned_s3_uri, components/specs/scripts.py).
EMPTY_SEGMENT = (
    "has an empty path segment ('//'), which S3 reads as a key prefix of its own, not the location without it: give "
    "s3://<bucket> or s3://<bucket>/<segment>/..., one '/' between segments (a trailing '/' is allowed)"
)


def s3_parts(uri: str) -> tuple[str, tuple[str, ...]]:
    """A location's bucket and its path segments (a trailing `/` dropped: `s3://b/x/` is `s3://b/x`); ValueError for
    an empty segment (`s3://b//x`, `s3://b/x//y`, `s3://b/x//`), which no location of the platform has."""
    bucket, _, path = uri.removeprefix("s3://").partition("/")
    segments = path.removesuffix("/").split("/") if path else []
    if "" in segments:
        raise ValueError(f"{uri!r} {EMPTY_SEGMENT}")
    return bucket, tuple(segments)


def whole_segments(uri: str) -> bool:
    """Whether a location's path is of whole segments (`s3_parts` takes it apart), as every location the program
    writes is: one that is not lies under no prefix, and a reader of locations it did not write reports it."""
    try:
        s3_parts(uri)
    except ValueError:
        return False
    return True


def s3_within(uri: str, prefix: str) -> bool:
    """Whether `uri` is `prefix` or below it, by whole path segments (`s3://b/team` does not hold `s3://b/teams`)."""
    bucket, path = s3_parts(uri)
    prefix_bucket, prefix_path = s3_parts(prefix)
    return bucket == prefix_bucket and path[: len(prefix_path)] == prefix_path


def s3_overlap(one: str, other: str) -> bool:
    """Whether two prefixes share any location (one holds the other)."""
    return s3_within(one, other) or s3_within(other, one)
