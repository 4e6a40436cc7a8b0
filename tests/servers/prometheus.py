"""A real Prometheus on loopback holding synthetic series, for the tests that query one.

The series are written as OpenMetrics text with timestamps, backfilled into a TSDB with
`promtool tsdb create-blocks-from openmetrics`, and served by `prometheus` started on that data
directory (Debian's `prometheus` package: both binaries on PATH). The data lies hours in the past,
so queries name their evaluation time. Without the binaries the caller's test is skipped (and
`REQUIRE_REAL_SERVERS=1` turns that skip into a failure, tests/conftest.py).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .processes import free_ports, stop

READY_SECONDS = 30.0
# Seconds between synthetic samples (a scrape interval).
STEP = 30


def _labels(labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


@dataclass
class SyntheticSeries:
    """Series keyed by name and labels, each a list of (unix seconds, value)."""

    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, float]]] = field(default_factory=dict)

    def counter(self, name: str, labels: Mapping[str, str], start: int, end: int, per_second: float, base: float = 0.0) -> None:
        """A counter growing linearly from `base` at `start` to `end`, sampled every STEP seconds:
        `increase()` over any window inside it is exactly per_second x the window."""
        samples = self.series.setdefault((name, tuple(sorted(labels.items()))), [])
        samples.extend((t, base + per_second * (t - start)) for t in range(start, end + 1, STEP))

    def gauge(self, name: str, labels: Mapping[str, str], start: int, end: int, value: float) -> None:
        """A gauge holding `value` from `start` to `end`, sampled every STEP seconds."""
        samples = self.series.setdefault((name, tuple(sorted(labels.items()))), [])
        samples.extend((t, value) for t in range(start, end + 1, STEP))

    def histogram(
        self,
        name: str,
        labels: Mapping[str, str],
        bounds: list[float],
        cumulative: Callable[[float], float],
        start: int,
        end: int,
        per_second: float,
    ) -> None:
        """`<name>_bucket` series for `bounds` (+Inf added), observations arriving at `per_second`,
        `cumulative(le)` of them at most `le`."""
        for bound in [*bounds, float("inf")]:
            share = 1.0 if bound == float("inf") else cumulative(bound)
            rate = per_second * share
            self.counter(f"{name}_bucket", {**labels, "le": _le(bound)}, start, end, rate, base=rate * 3600)

    def openmetrics(self) -> str:
        lines = []
        for (name, labels), samples in sorted(self.series.items()):
            for t, value in sorted(samples):
                lines.append(f"{name}{_labels(dict(labels))} {value!r} {t}")
        lines.append("# EOF")
        return "\n".join(lines) + "\n"


def two_buckets(low: float, high: float) -> Callable[[float], float]:
    """90% of observations at most `low`, the rest in (`low`, `high`]: where `low` and `high`
    are adjacent bucket bounds, Prometheus's histogram_quantile(0.95) is their midpoint."""
    return lambda le: 0.0 if le < low else 0.9 if le < high else 1.0


def _free_port() -> int:
    (port,) = free_ports(1)
    return port


def _binaries() -> tuple[str, str]:
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        pytest.skip("prometheus and promtool are not on PATH (Debian package `prometheus`; `make real-servers` installs it)")
    return prometheus, promtool


@contextmanager
def prometheus_with(data: SyntheticSeries, directory: Path) -> Iterator[str]:
    """A Prometheus on 127.0.0.1 serving `data`; yields its base URL and stops it afterwards."""
    prometheus, promtool = _binaries()
    source = directory / "series.om.txt"
    source.write_text(data.openmetrics())
    storage = directory / "tsdb"
    backfill = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(storage)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if backfill.returncode != 0:
        raise RuntimeError(f"promtool backfill failed: {backfill.stdout}{backfill.stderr}")
    config = directory / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (directory / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={storage}",
            f"--web.listen-address=127.0.0.1:{port}",
            # The backfilled blocks are hours old: keep them.
            "--storage.tsdb.retention.time=10y",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + READY_SECONDS
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited with {process.returncode}: {(directory / 'prometheus.log').read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"prometheus not ready within {READY_SECONDS:.0f}s at {url}")
            time.sleep(0.1)
        yield url
    finally:
        stop(process)
        log.close()
