"""Prometheus's HTTP API, as the canary verdict reads it: instant queries whose answers are checked, so that an
answer of any other shape, an unreachable Prometheus or a refused query is a PrometheusError naming its URL, never a
crash."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any


class PrometheusError(Exception):
    """Prometheus could not be reached or refused a query: said with its URL, no traceback."""


def check_url(url: str) -> str:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise PrometheusError(
            f"--prometheus {url!r} is not an http(s) URL such as http://prometheus-operated.monitoring.svc:9090"
        )
    return url.rstrip("/")


# An instant query over a few versions and tiers answers a few KiB; far more is not Prometheus.
MAX_ANSWER_BYTES = 4 << 20


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    # None: no number (NaN, e.g. a quantile over no observations).
    value: float | None


def query(url: str, promql: str, at: float, timeout: float = 15.0) -> list[Sample]:
    """An instant query's result vector (Prometheus HTTP API /api/v1/query), each sample checked:
    an answer of any other shape is a PrometheusError, never a crash."""
    params = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
    request = urllib.request.Request(f"{url}/api/v1/query?{params}", headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s) only, checked
            body = _json(response.read(MAX_ANSWER_BYTES + 1), url, promql)
    except urllib.error.HTTPError as error:
        try:
            body = _json(error.read(MAX_ANSWER_BYTES + 1), url, promql)
        except (PrometheusError, OSError):
            raise PrometheusError(f"Prometheus at {url} answered HTTP {error.code} to the query {promql}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise PrometheusError(f"cannot query Prometheus at {url} (--prometheus / PROMETHEUS_URL): {reason}") from None
    if not isinstance(body, dict) or body.get("status") != "success":
        detail = body.get("error") if isinstance(body, dict) else body
        raise PrometheusError(f"Prometheus at {url} refused the query {promql}: {str(detail)[:300]}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        shown = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise PrometheusError(f"Prometheus at {url} answered {str(shown)[:100]!r}, not a vector, to {promql}")
    return [_sample(entry, url, promql) for entry in data["result"]]


def _json(data: bytes, url: str, promql: str) -> Any:
    if len(data) > MAX_ANSWER_BYTES:
        raise PrometheusError(f"Prometheus at {url} answered more than {MAX_ANSWER_BYTES >> 20} MiB to {promql}")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise PrometheusError(f"Prometheus at {url} answered something that is not JSON to {promql}") from None


def _sample(entry: Any, url: str, promql: str) -> Sample:
    """One vector sample: {"metric": {label: value}, "value": [time, "<number>"]}."""
    labels = entry.get("metric") if isinstance(entry, dict) else None
    pair = entry.get("value") if isinstance(entry, dict) else None
    if (
        isinstance(labels, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
        and isinstance(pair, list)
        and len(pair) == 2
        and isinstance(pair[1], str)
    ):
        try:
            value = float(pair[1])
        except ValueError:
            pass
        else:
            return Sample(labels, None if math.isnan(value) else value)
    raise PrometheusError(f"Prometheus at {url} answered a sample that is not one to {promql}: {str(entry)[:200]}")
