"""`make canary-try`: the canary tool on your machine, against the real Prometheus the suite runs.

It starts Debian's `prometheus` on loopback with the suite's synthetic series for prod's
llama-8b (tests/canary_series.py: a healthy canary, a slow one, an erroring one, one that sheds,
one with too few requests, ...), copies the prod stack file into a temporary directory, and
runs `python -m platform_tools canary` on it for each scenario, printing each command and its
verdict. With `--keep` it then leaves Prometheus running and prints the commands to try by hand
(`canary ... --write`, `step ... hold --reason ...`, `step ... promote`), until Ctrl-C; the
temporary stack file is the one they edit, never the project's. The same code is the test of
record (tests/test_canary.py test_the_local_try_out_runs_every_scenario).

    .venv/bin/python -m tests.canary_tryout [--scenario healthy] [--keep]
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from platform_tools.__main__ import main as tool

from .canary_series import AT, SCENARIOS, synthetic
from .helpers import ROOT, stack_file
from .servers.prometheus import prometheus_with

TOOL = ".venv/bin/python -m platform_tools"


def _say(words: list[str]) -> None:
    print(f"$ {TOOL} {shlex.join(words)}", flush=True)


def run(scenarios: tuple[str, ...], keep: bool) -> int:
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("error: prometheus and promtool are not on PATH: `make real-servers` installs Debian's prometheus", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="canary-try-") as scratch:
        folder = Path(scratch)
        stack = folder / "Pulumi.prod.yaml"
        shutil.copyfile(stack_file("prod"), stack)
        (folder / "prometheus").mkdir()
        with prometheus_with(synthetic(), folder / "prometheus") as url:
            print(f"Prometheus with the suite's series for prod's llama-8b: {url}\nstack file (a copy): {stack}\n")
            common = ["--prometheus", url, "--stack-file", str(stack), "--project-dir", str(ROOT)]
            for scenario in scenarios:
                print(f"# scenario {scenario!r}")
                words = ["canary", "prod", "llama-8b", "--at", str(AT[scenario]), *common]
                _say(words)
                code = tool(words)
                print(flush=True)
                if code != 0:
                    return code
            if keep:
                at = ["--at", str(AT["healthy"])]
                print("Try by hand (the healthy scenario's time; Ctrl-C stops Prometheus and removes the copy):")
                for words in (
                    ["canary", "prod", "llama-8b", *at, *common, "--write"],
                    ["step", "prod", "llama-8b", "hold", "--reason", "looking into a TTFT report", "--write", *common[2:]],
                    ["canary", "prod", "llama-8b", *at, *common],
                    ["step", "prod", "llama-8b", "rollback", "--write", *common[2:]],
                ):
                    _say(words)
                try:
                    while True:
                        time.sleep(3600)
                except KeyboardInterrupt:
                    print()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.canary_tryout", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=SCENARIOS, help="one scenario (default: every one)")
    parser.add_argument("--keep", action="store_true", help="keep Prometheus running for commands by hand, until Ctrl-C")
    args = parser.parse_args(argv)
    return run((args.scenario,) if args.scenario else SCENARIOS, args.keep)


if __name__ == "__main__":
    sys.exit(main())
