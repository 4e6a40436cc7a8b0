"""Time one program evaluation under the preview's mock engine (run in a fresh process).

Prints JSON: seconds spent evaluating, resources registered, peak RSS and the RSS growth
during evaluation (what the registrations cost in memory). With `--once` it evaluates once, cold:
the whole process is then the floor a whole preview is compared with (start-up, the SDKs' imports and
the registrations, nothing else), timed from outside.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from preview.engine import evaluate  # noqa: E402
from preview.gc_tuning import tune_for_batch  # noqa: E402
from preview.stack_config import load_project, load_stack_config  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--program", type=Path, required=True)
    parser.add_argument("--config-file", type=Path, required=True)
    parser.add_argument("--stack", default="bench")
    parser.add_argument("--once", action="store_true", help="evaluate once, without the warm-up evaluation")
    args = parser.parse_args()
    # The same collector settings as `python -m preview`, for the program and the baseline alike.
    tune_for_batch()
    project = load_project(ROOT)
    config = load_stack_config(project, args.stack, args.config_file)
    # Evaluate once to load every module the program touches (the provider SDKs load their
    # submodules lazily), then time a second evaluation: both programs are compared on
    # registering resources, not on importing SDKs.
    if not args.once:
        evaluate(args.program, config)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    evaluation = evaluate(args.program, config)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    custom = sum(1 for r in evaluation.resources if r.custom)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "resources": len(evaluation.resources),
                "custom": custom,
                "peakKiB": peak,
                "growthKiB": peak - before,
            }
        )
    )


if __name__ == "__main__":
    main()
