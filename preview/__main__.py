import os
import sys
import traceback

from .gc_tuning import tune_for_batch

# The program is evaluated in a forked child that never calls gRPC (preview/evaluation_process.py): gRPC's fork
# handlers (grpcio 1.85.3, on by default) would only log that they skip while the policy session's calls are in
# flight. Read by gRPC's core when it starts, so before anything imports it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# Before the heavy imports: importing the provider SDKs alone builds a large object graph.
tune_for_batch()

try:
    from .cli import main  # noqa: E402
except ModuleNotFoundError as missing:
    # Run with a Python that lacks the pinned requirements (not the project's .venv).
    print(
        f"error: {sys.executable} has no module {missing.name!r}: run `make preview` (it builds .venv from the "
        "pinned requirements), or .venv/bin/python -m preview",
        file=sys.stderr,
    )
    sys.exit(2)

try:
    code = main()
except Exception:  # noqa: BLE001 - whatever escaped the stages is a crash, said as one
    traceback.print_exc()
    print("error: the preview crashed", file=sys.stderr)
    code = 3
sys.stdout.flush()
sys.stderr.flush()
# Every file is written and closed and the policy pack has been stopped by now. A normal exit
# would spend about a second tearing down the evaluation's object graph, object by object, for
# nothing: the process ends here.
os._exit(code)
