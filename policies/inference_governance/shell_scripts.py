"""Shell scripts quote config: every S3 location a container's `sh -c` script names is single-quoted and one config
may give."""

from __future__ import annotations

import re
from typing import Any, Mapping

from .kube import FACTS, Report, get, workload_containers

# A shell run with a script (`sh -c`, `sh -ec`, `bash -euo pipefail -c`, `env sh -c`, `busybox
# sh -c`): the word after its first option with a `c`.
_SHELLS = frozenset({"sh", "bash", "ash", "dash", "zsh", "ksh", "mksh"})


_WRAPPERS = frozenset({"env", "busybox"})


# Shell options that take the next word as their argument.
_OPTIONS_WITH_ARGUMENT = frozenset({"--rcfile", "--init-file"})


_S3_URI = re.compile(FACTS["s3UriPattern"])


# An S3 location as a script should name it: in single quotes (shlex.quote's form), which nothing
# inside can leave and the shell expands nothing in.
_QUOTED_S3 = re.compile(r"'(s3://[^']*)'")


def _shell_script(container: Mapping[str, Any]) -> str | None:
    words = [str(word) for part in ("command", "args") for word in get(container, part, default=[]) or []]
    # `env [-i] [VAR=value ...] sh`, `busybox sh`: the shell is the first other word.
    while words and words[0].rsplit("/", 1)[-1] in _WRAPPERS:
        words = words[1:]
        while words and (words[0].startswith("-") or "=" in words[0]):
            words = words[1:]
    if not words or words[0].rsplit("/", 1)[-1] not in _SHELLS:
        return None
    index = 1
    while index < len(words):
        word = words[index]
        if word in _OPTIONS_WITH_ARGUMENT:
            index += 2
        elif word.startswith("--"):
            index += 1  # --noprofile, --login, and `--` before the script
        elif word.startswith(("-", "+")) and "c" in word[1:]:
            rest = [w for w in words[index + 1 :] if w != "--"]
            return rest[0] if rest else ""
        elif word.startswith(("-", "+")):
            # In a cluster (`-euo pipefail`), `o` takes the next word too.
            index += 2 if set(word[1:]) & {"o", "O"} else 1
        else:
            return None  # a script file, not a command string
    return None


def shell_scripts_quote_config(args: Any, report_violation: Report) -> None:
    """The S3 locations config gives (models', adapters', batch input and output) reach the batch
    jobs' shell scripts: each is single-quoted there and is what config may give (letters, digits
    and `-_.=/` after the bucket), so no location can become shell syntax, however the program came
    to write it."""
    for container in workload_containers(args.resource_type, args.props):
        script = _shell_script(container)
        if script is None:
            continue
        name = get(container, "name", default="?")
        quoted = _QUOTED_S3.findall(script)
        if script.count("s3://") > len(quoted):
            report_violation(
                f"container '{name}' names an S3 location in its shell script outside single quotes, where the shell "
                "expands what it holds: put it in single quotes (shlex.quote leaves a word of safe characters bare)"
            )
        for location in quoted:
            if not _S3_URI.fullmatch(location):
                report_violation(
                    f"container '{name}' names S3 location {location!r} in its shell script: a location config may give "
                    "is s3://<bucket>/<letters, digits and -_.=/>, so this one came from somewhere else"
                )
