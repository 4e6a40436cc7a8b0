"""IAM policy statements for S3 prefixes (pure): what the servers, the batch jobs and the weight mirror's Jobs may
do under the prefixes they use, and nothing else."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from platform_config.s3_locations import s3_parts


def prefix_statements(uri: str, actions: list[str]) -> list[dict[str, Any]]:
    """`actions` on the objects under the S3 prefix `uri`, and listing that prefix: the streamer and `aws s3 sync`
    list a folder, and a list call is how a missing key is told from a forbidden one. The prefix is read as every S3
    location is (s3_parts: its bucket and its segments), so the grant is the location the tenants' checks and the pack
    compare."""
    bucket, segments = s3_parts(uri)
    objects = "/".join([*segments, "*"])
    return [
        {"Effect": "Allow", "Action": actions, "Resource": f"arn:aws:s3:::{bucket}/{objects}"},
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": f"arn:aws:s3:::{bucket}",
            "Condition": {"StringLike": {"s3:prefix": [objects]}},
        },
    ]


def s3_policy(grants: Iterable[tuple[str, list[str]]]) -> str:
    """An IAM policy document granting each (prefix URI, actions) pair through `prefix_statements`."""
    statements = [statement for uri, actions in grants for statement in prefix_statements(uri, actions)]
    return json.dumps({"Version": "2012-10-17", "Statement": statements})
