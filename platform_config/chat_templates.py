"""Chat templates read from the project: a version's `chatTemplate` file, held to its pinned SHA-256.

vLLM 0.33.0 reads `--chat-template` as a file path with `open()` (vllm/renderers/chat_utils/chat_template.py
_load_chat_template), so a server mounts the content (a ConfigMap, components/specs/chat_template.py) and names the
file. What is read here is bounded: a regular file of templates/ (no link on its path) of at most MAX_TEMPLATE_BYTES,
UTF-8 without NUL, whose SHA-256 is the pin.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from .models import ChatTemplate

PROJECT_DIR = Path(__file__).resolve().parent.parent
# A chat template is a few KiB (Llama 3.1's is 4 KiB); a ConfigMap holds at most 1 MiB.
MAX_TEMPLATE_BYTES = 64 << 10


@dataclass(frozen=True)
class TemplateProblem:
    """What is wrong with a template, and under which of its keys (`file` or `sha256`)."""

    key: str
    message: str


def read_chat_template(template: ChatTemplate, project_dir: Path = PROJECT_DIR) -> str | TemplateProblem:
    """The template's text, or what keeps it from being served. Read without following a link anywhere on its path
    (a linked folder would lead out of templates/), without blocking on what is not a regular file."""
    project = project_dir.resolve()
    path = project / template.file
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return TemplateProblem("file", f"{template.file}: no such file in the project (commit it beside the stack files)")
    if real != path:
        return TemplateProblem("file", f"{template.file}: not a regular file of templates/ (a link on its path is not followed)")
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        return TemplateProblem("file", f"{template.file}: cannot be read ({error.strerror})")
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            return TemplateProblem("file", f"{template.file}: not a regular file (a folder, a pipe or a device is not read)")
        if info.st_size > MAX_TEMPLATE_BYTES:
            return TemplateProblem(
                "file", f"{template.file}: {info.st_size} bytes, more than a chat template's {MAX_TEMPLATE_BYTES}"
            )
        data = os.read(handle, MAX_TEMPLATE_BYTES + 1)
    except OSError as error:
        return TemplateProblem("file", f"{template.file}: cannot be read ({error.strerror})")
    finally:
        os.close(handle)
    if len(data) > MAX_TEMPLATE_BYTES:
        return TemplateProblem("file", f"{template.file}: more than a chat template's {MAX_TEMPLATE_BYTES} bytes")
    digest = hashlib.sha256(data).hexdigest()
    if digest != template.sha256:
        return TemplateProblem(
            "sha256",
            f"{template.sha256} is not the SHA-256 of {template.file}, which is {digest}: a template changes together with "
            "its pin, in one reviewed change",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return TemplateProblem("file", f"{template.file}: not UTF-8 text")
    if "\x00" in text:
        return TemplateProblem("file", f"{template.file}: holds a NUL character")
    return text


@dataclass(frozen=True)
class ServedTemplate:
    """A version's chat template as its servers get it: where it came from, its pin and its text."""

    file: str
    sha256: str
    text: str


def served_template(template: ChatTemplate | None, project_dir: Path = PROJECT_DIR) -> ServedTemplate | None:
    """The template of a config that passed its checks (check_chat_templates); None for a version without one."""
    if template is None:
        return None
    text = read_chat_template(template, project_dir)
    assert isinstance(text, str), text  # the config checks refused it otherwise
    return ServedTemplate(template.file, template.sha256, text)
