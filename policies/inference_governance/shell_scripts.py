"""Shell scripts built from config: a script that names an S3 or Hugging Face location is one the platform renders,
with each location single-quoted in its slot and of a form config may give.

The program renders few shell scripts (a batch job's `stage-in` and `uploader`: components/specs/scripts.py), and
its facts hold their shapes, each config value replaced by a slot. A script is held to them whole: every character
outside a slot is the program's own, so no config value can have added a `;`, a `$(...)`, a pipe or a redirection, and
the slot admits only a single-quoted location of the S3 pattern (which holds no quote). Any other script (a preStop
`sleep`, a tenant's own) may name no location at all: the pack cannot tell which of its words came from config.
Every shell a container starts is read: its command and args, its lifecycle hooks' and probes' exec commands, in
every container of the pod (init and ephemeral too), whatever runs the shell (`env`, `busybox`, `tini --`, `nice`).
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Iterator, Mapping

from .kube import FACTS, Report, every_container, get, pod_template

_SHELLS = frozenset({"sh", "bash", "ash", "dash", "zsh", "ksh", "mksh", "yash", "posh"})


# Shell options that take the next word as their argument.
_OPTIONS_WITH_ARGUMENT = frozenset({"--rcfile", "--init-file"})


_S3_URI = re.compile(FACTS["s3UriPattern"])


# A slot holds a location config may give, single-quoted (the S3 pattern admits no quote, so the slot cannot end
# early); everything else is the script's own text, character for character.
_SLOT = re.escape(FACTS["shellScripts"]["s3Slot"])
_S3_IN_QUOTES = "'(?:" + FACTS["s3UriPattern"].removeprefix("^").removesuffix("$") + ")'"
_SHAPES = [re.compile(re.escape(shape).replace(_SLOT, _S3_IN_QUOTES)) for shape in FACTS["shellScripts"]["shapes"]]


# What names a location a config value gives (`s3://`, `hf://`), however the script quotes, escapes or splits it
# (`'s3:''//...'`, `S3\://`): the scheme as a word of its own, then a colon.
_LOCATION = re.compile(r"(?i)(?<![a-z0-9_])(?:s3[an]?|hf)['\"\\]*:")


# An S3 location as a script should name it: in single quotes, which nothing inside can leave.
_QUOTED_S3 = re.compile(r"'(s3://[^']*)'")


def _script_after(words: list[str]) -> str | None:
    """The script a shell's words (after the shell itself) run with `-c`: the word after the first option cluster
    with a `c` (`-c`, `-ec`, `-euo pipefail -c`, `--noprofile -c`, `-c --`); None when the shell runs a file."""
    index = 0
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


def shell_scripts(words: list[str]) -> list[str]:
    """Every script a command line runs through a shell: any word naming a shell (by its file name, wherever it
    stands: after `env`, `busybox`, `tini --`, `nice -n 5`, `timeout 60` alike) followed by `-c` and the script."""
    found = []
    for index, word in enumerate(words):
        if word.rsplit("/", 1)[-1] in _SHELLS:
            script = _script_after(words[index + 1 :])
            if script is not None:
                found.append(script)
    return found


def _command_lines(container: Mapping[str, Any]) -> Iterator[tuple[str, list[str]]]:
    """(where, words) of everything a container runs: its command and args, its hooks' and probes' exec commands."""
    yield "", [str(word) for part in ("command", "args") for word in get(container, part, default=[]) or []]
    for hook in ("postStart", "preStop"):
        command = get(container, "lifecycle", hook, "exec", "command")
        if command:
            yield f" ({hook} hook)", [str(word) for word in command]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = get(container, probe, "exec", "command")
        if command:
            yield f" ({probe})", [str(word) for word in command]


def is_rendered_shape(script: str) -> bool:
    return any(shape.fullmatch(script) for shape in _SHAPES)


def _why(script: str) -> str:
    """What is wrong with a script of no rendered shape that names a location, for the message (the script's words
    are read as a POSIX shell reads them)."""
    try:
        shlex.split(script, posix=True)
    except ValueError:
        return "its quotes do not close"
    quoted = _QUOTED_S3.findall(script)
    for location in quoted:
        if not _S3_URI.fullmatch(location):
            return f"it names S3 location {location!r}, which no config gives (s3://<bucket>/<letters, digits and -_.=/>)"
    if len(_LOCATION.findall(script)) > len(quoted):
        return "it names a location outside single quotes, where the shell expands what it holds"
    return "its text around the locations is not one of the platform's scripts (a `;`, `$(...)`, pipe or redirection added?)"


def shell_scripts_quote_config(args: Any, report_violation: Report) -> None:
    """A shell script that names an S3 or Hugging Face location (what config gives: models', adapters', batch inputs'
    and outputs') is one the program renders (the facts' shapes), each location single-quoted in its slot and of the
    S3 pattern; no other script names one. So no config value can become shell syntax, however the program came to
    write it."""
    template = pod_template(args.resource_type, args.props)
    if template is None:
        return
    for container in every_container(get(template, "spec", default={})):
        name = get(container, "name", default="?")
        for where, words in _command_lines(container):
            for script in shell_scripts(words):
                if is_rendered_shape(script) or not _LOCATION.search(script):
                    continue
                report_violation(
                    f"container '{name}'{where} runs a shell script that names a location config gives, but is not one "
                    f"of the platform's scripts with the location single-quoted in its place: {_why(script)}"
                )
