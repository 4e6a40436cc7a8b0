"""vLLM's pinned source release (platform_config/pins.py VLLM_SOURCE, PyPI's sdist; `make upstream-sources`
downloads it into build/upstream-sources/ and checks its sha256), read in place: its files, and the flags of
`vllm serve` and `vllm run-batch` as its own argument parsers define them, read from the source by its syntax tree
(nothing of vLLM is imported or run).

The upstream stage checks the servers' flags against the facts' flag list for the pinned version
(`../shared/upstream-facts/vllm/<version>-flags.txt`) and, where the facts have none, against `serve_flags` of the
pinned release. The parse is held to the facts where both exist (tests/test_vllm_source.py, at 0.18.0: every flag it
finds is in the facts' list, and every flag of that list it misses belongs to another subcommand or to no parser).
"""

from __future__ import annotations

import ast
import functools
import tarfile
from pathlib import Path

from platform_config.pins import SourceReleasePin

SOURCES_DIR = Path(__file__).resolve().parent.parent / "build" / "upstream-sources"


def release_path(pin: SourceReleasePin, directory: Path = SOURCES_DIR) -> Path:
    return directory / pin.filename


class SourceRelease:
    """The files of one downloaded source release, by their path in the project (`vllm/engine/arg_utils.py`)."""

    def __init__(self, pin: SourceReleasePin, path: Path):
        self.pin = pin
        self._archive = tarfile.open(path, "r:gz")

    def has(self, path: str) -> bool:
        try:
            self._archive.getmember(f"{self.pin.top_dir}/{path}")
        except KeyError:
            return False
        return True

    def text(self, path: str) -> str:
        member = self._archive.extractfile(f"{self.pin.top_dir}/{path}") if self.has(path) else None
        if member is None:
            raise KeyError(f"{path} is not a file of {self.pin.filename}")
        return member.read().decode("utf-8")

    def files(self, under: str) -> list[str]:
        """The paths of the release's files under a folder (`vllm/entrypoints/`)."""
        top = f"{self.pin.top_dir}/"
        return [m.name.removeprefix(top) for m in self._archive.getmembers() if m.isfile() and m.name.startswith(top + under)]

    def first_of(self, *paths: str) -> str:
        """The first of `paths` the release holds (a file upstream moved, newest place first)."""
        return next(path for path in paths if self.has(path))

    def tree(self, path: str) -> ast.Module:
        return ast.parse(self.text(path))


@functools.cache
def open_release(pin: SourceReleasePin, directory: Path = SOURCES_DIR) -> SourceRelease | None:
    """The release when it was downloaded (its hash is checked by `make upstream-sources`), else None."""
    path = release_path(pin, directory)
    return SourceRelease(pin, path) if path.is_file() else None


# --- reading argument parsers -------------------------------------------------------------------------------------


def class_fields(tree: ast.Module, name: str) -> list[str]:
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]


def function(tree: ast.Module, qualified: str) -> ast.FunctionDef:
    """A module-level function, or a method as `Class.method`."""
    *owner, name = qualified.split(".")
    body = tree.body
    if owner:
        (cls,) = [n for n in body if isinstance(n, ast.ClassDef) and n.name == owner[0]]
        body = cls.body
    (found,) = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == name]
    return found


def literal_flags(node: ast.AST) -> set[str]:
    """The flags the `add_argument("--flag", "-f", ...)` calls in a function spell out."""
    return {
        arg.value
        for call in ast.walk(node)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"
        for arg in call.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-")
    }


def _customized_flags(tree: ast.Module, qualified: str) -> set[str]:
    """The extra flags a frontend's `_customize_cli_kwargs` gives its fields (`frontend_kwargs["input_file"]["flags"]
    = ["-i"]`); none where the class has no such method."""
    try:
        customize = function(tree, qualified)
    except ValueError:
        return set()
    return {
        element.value
        for node in ast.walk(customize)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List) and "['flags']" in ast.unparse(node.targets[0])
        for element in node.value.elts
        if isinstance(element, ast.Constant) and isinstance(element.value, str)
    }


def frontend_flags(tree: ast.Module, *classes: str) -> set[str]:
    """A frontend's flags: one `--<field>` per field of each dataclass (BaseFrontendArgs.add_cli_args names them
    `f"--{key.replace('_', '-')}"`), plus the extra flags its `_customize_cli_kwargs` adds."""
    flags: set[str] = set()
    for name in classes:
        flags |= {"--" + field.replace("_", "-") for field in class_fields(tree, name)}
        flags |= _customized_flags(tree, f"{name}._customize_cli_kwargs")
    return flags


def frontend_args_module(release: SourceRelease) -> str:
    """Where the frontends' arguments are defined: vllm/entrypoints/common/cli_args.py from 0.2x (moved there from
    vllm/entrypoints/openai/cli_args.py, where 0.18.0 has them)."""
    return release.first_of("vllm/entrypoints/common/cli_args.py", "vllm/entrypoints/openai/cli_args.py")


def run_batch_module(release: SourceRelease) -> str:
    """Where `vllm run-batch`'s parser is built: vllm/entrypoints/launchers/run_batch.py at 0.33.0 (the
    vllm/entrypoints/openai/run_batch.py of 0.18.0 is a deprecated shim there)."""
    return release.first_of("vllm/entrypoints/launchers/run_batch.py", "vllm/entrypoints/openai/run_batch.py")


def engine_flags(release: SourceRelease) -> set[str]:
    """EngineArgs' and AsyncEngineArgs' `add_cli_args` (vllm/engine/arg_utils.py), each flag spelt out."""
    arg_utils = release.tree("vllm/engine/arg_utils.py")
    return literal_flags(function(arg_utils, "EngineArgs.add_cli_args")) | literal_flags(
        function(arg_utils, "AsyncEngineArgs.add_cli_args")
    )


def serve_flags(release: SourceRelease) -> frozenset[str]:
    """Every flag `vllm serve` defines: the OpenAI frontend's (BaseFrontendArgs and FrontendArgs fields, and
    `make_arg_parser`'s own), the subcommand's (vllm/entrypoints/cli/serve.py) and the engine's. Not listed: the
    `--no-` forms argparse adds to boolean flags (the servers pass none)."""
    module = frontend_args_module(release)
    cli_args = release.tree(module)
    flags = frontend_flags(cli_args, "BaseFrontendArgs", "FrontendArgs")
    flags |= literal_flags(function(cli_args, "make_arg_parser"))
    flags |= literal_flags(release.tree("vllm/entrypoints/cli/serve.py"))
    return frozenset(flags | engine_flags(release))


def pinned_serve_flags(pin: SourceReleasePin, directory: Path = SOURCES_DIR) -> frozenset[str] | None:
    """`serve_flags` of a downloaded release, kept beside it (`<archive>.serve-flags.txt`, its first line the
    archive's pinned sha256) so that a preview does not parse the archive again (reading its members takes
    seconds); None when the release was not downloaded. A list kept for another hash is parsed again."""
    kept = release_path(pin, directory).with_name(pin.filename + ".serve-flags.txt")
    if kept.is_file():
        lines = kept.read_text().splitlines()
        if lines and lines[0] == pin.sha256:
            return frozenset(lines[1:])
    release = open_release(pin, directory)
    if release is None:
        return None
    flags = serve_flags(release)
    partial = kept.with_name(kept.name + ".part")
    partial.write_text("\n".join([pin.sha256, *sorted(flags)]) + "\n")
    partial.replace(kept)
    return flags


def run_batch_flags(release: SourceRelease) -> frozenset[str]:
    """Every flag `vllm run-batch` defines: its `make_arg_parser` registers BatchFrontendArgs (with the
    BaseFrontendArgs fields) and AsyncEngineArgs."""
    run_batch = release.tree(run_batch_module(release))
    flags = frontend_flags(run_batch, "BatchFrontendArgs") | frontend_flags(
        release.tree(frontend_args_module(release)), "BaseFrontendArgs"
    )
    return frozenset(flags | engine_flags(release))
