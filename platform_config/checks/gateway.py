"""The gateway: the headers its filter sets and clients may send, TLS in production, and the tiers' queues."""

from __future__ import annotations

from typing import Iterator, get_args

from ..errors import ConfigIssue
from ..models import PlatformConfig, duration_seconds
from ..profiles import TierName
from ..serving import CONTROL_HEADER_PREFIXES, user_key_headers

# Tiers from the most to the least latency-sensitive.
TIER_NAMES: tuple[TierName, ...] = get_args(TierName)


def check_gateway_headers(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """The headers the gateway filter sets are three different ones, no release reads one of them
    as its override or user key (a client could not set it), a release's override and user key
    differ, and none of these is under a prefix whose client values the filter strips
    (CONTROL_HEADER_PREFIXES: an override would never arrive). What a header name may not be at
    all (hop-by-hop, framing, credential, the proxies' own) is the HeaderName type's rule."""
    headers = config.traffic
    reserved = {headers.tier_header, headers.bucket_header, headers.model_header}
    if len(reserved) != 3:
        yield ConfigIssue(("traffic",), "tierHeader, bucketHeader and modelHeader must be three different headers")
    named = [
        (("traffic", key), value)
        for key, value in (
            ("tierHeader", headers.tier_header),
            ("bucketHeader", headers.bucket_header),
            ("modelHeader", headers.model_header),
        )
    ] + [
        (("models", index, "release", key), value)
        for index, model in enumerate(config.models)
        for key, value in (("overrideHeader", model.release.override_header), ("userKeyHeader", model.release.user_key_header))
    ]
    for path, value in named:
        if value.startswith(CONTROL_HEADER_PREFIXES):
            yield ConfigIssue(
                path,
                f"{value!r} is under a prefix the endpoint pickers or vLLM act on ({', '.join(CONTROL_HEADER_PREFIXES)}), "
                "whose client values the gateway strips: use another header",
            )
    for index, model in enumerate(config.models):
        for key in ("overrideHeader", "userKeyHeader"):
            value = model.release.override_header if key == "overrideHeader" else model.release.user_key_header
            if value in reserved:
                yield ConfigIssue(
                    ("models", index, "release", key), f"{value!r} is set by the gateway filter; use another header"
                )
    # The filter strips every model's user key header from clients and sets the verified caller in
    # it: an override header that is one would never arrive, or would name a user.
    user_keys = user_key_headers(config.models)
    for index, model in enumerate(config.models):
        if model.release.override_header in user_keys:
            yield ConfigIssue(
                ("models", index, "release", "overrideHeader"),
                f"{model.release.override_header!r} is a userKeyHeader (of a model, or the default), which the gateway "
                "filter sets to the verified caller; use another header",
            )


def check_gateway_tls(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """Production serves HTTPS: plain HTTP there must be an explicit choice (`plainHttp`), not a
    forgotten credential, since tokens cross it in the clear."""
    traffic = config.traffic
    if config.environment == "production" and traffic.tls_credential_name is None and not traffic.plain_http:
        yield ConfigIssue(
            ("traffic", "tlsCredentialName"),
            "production needs HTTPS: name the TLS Secret in istio-system, or set 'plainHttp: true' to serve bearer "
            "tokens over plain HTTP on purpose",
        )


def check_tier_queues(config: PlatformConfig) -> Iterator[ConfigIssue]:
    """A tier's queue wait fits in its route timeout, and a sheddable tier never ranks above one
    that is not (premium is never shed before standard)."""
    tiers = config.traffic.tiers
    for tier in TIER_NAMES:
        policy = tiers[tier]
        if duration_seconds(policy.queue_timeout) >= duration_seconds(policy.timeout):
            yield ConfigIssue(
                ("traffic", "tiers", tier, "queueTimeout"),
                f"{policy.queue_timeout} is not below the tier's timeout {policy.timeout}: a queued request would time out "
                "at the gateway (504) before it is answered 503",
            )
    for higher, lower in zip(TIER_NAMES, TIER_NAMES[1:]):
        if tiers[higher].sheddable and not tiers[lower].sheddable:
            yield ConfigIssue(
                ("traffic", "tiers", higher, "sheddable"),
                f"{higher} would be shed before {lower}, which ranks below it: make {lower} sheddable too, or {higher} not",
            )
