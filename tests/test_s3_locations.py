"""S3 locations (platform_config/s3_locations.py, which the pack runs a copy of): a location is its bucket and its
path segments, and one with an empty segment (`//`), which S3 reads as a key prefix of its own, is refused wherever it
comes from: the stack file, a registry's answer, or a caller that bypasses the config."""

from __future__ import annotations

import copy

import pytest

from platform_config.models import pinned_source
from platform_config.s3_locations import s3_overlap, s3_parts, s3_within

from .config_error_helpers import only_issue
from .helpers import raw_stack, set_at


@pytest.mark.parametrize(
    ("uri", "parts"),
    [
        ("s3://bkt", ("bkt", ())),
        ("s3://bkt/", ("bkt", ())),
        ("s3://bkt/team/w", ("bkt", ("team", "w"))),
        # A trailing `/` is no segment: `aws s3 sync` reads `s3://bkt/team/w` as the prefix `team/w/` too.
        ("s3://bkt/team/w/", ("bkt", ("team", "w"))),
    ],
)
def test_a_location_is_its_bucket_and_its_segments(uri, parts):
    assert s3_parts(uri) == parts


@pytest.mark.parametrize("uri", ["s3://bkt/team//w", "s3://bkt//team", "s3://bkt/team/w//", "s3://bkt//"])
def test_a_location_with_an_empty_path_segment_is_refused_not_collapsed(uri):
    with pytest.raises(ValueError, match="has an empty path segment") as refused:
        s3_parts(uri)
    assert repr(uri) in str(refused.value) and "a trailing '/' is allowed" in str(refused.value)
    # Nor does any comparison read it as the location without the extra `/`.
    with pytest.raises(ValueError, match="has an empty path segment"):
        s3_within(uri, "s3://bkt")
    with pytest.raises(ValueError, match="has an empty path segment"):
        s3_overlap("s3://bkt/team", uri)


def test_a_registry_location_with_an_empty_path_segment_is_not_pinned():
    """What a registry (or its recording, or the lock file) names is read by pinned_source: a `//` location is not a
    pinned source (its message: registry/client.py, recordings.py), and a trailing `//` is not stripped into another
    version folder."""
    assert pinned_source("s3://bkt/team//w/v1") is None
    assert pinned_source("s3://bkt/team/w//") is None
    assert pinned_source("s3://bkt//v1") is None
    source = pinned_source("s3://bkt/team/w/v1/")
    assert source is not None and (source.s3_uri, source.revision) == ("s3://bkt/team/w", "v1")


def test_the_config_error_names_the_key_and_what_is_allowed():
    raw = copy.deepcopy(raw_stack("prod"))
    set_at(raw, ("batchJobs", 0, "output"), "s3://team-b-batch/outputs//x")
    problem = only_issue(raw)
    assert problem.startswith(
        "inference-platform:batchJobs[0].output: 's3://team-b-batch/outputs//x' has an empty path segment ('//')"
    ), problem
    assert "give s3://<bucket> or s3://<bucket>/<segment>/..., one '/' between segments" in problem
