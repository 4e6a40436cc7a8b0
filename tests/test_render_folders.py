"""The preview's manifests/ and helm/ folders (preview/render.py `write_folders`): each preview leaves them holding
exactly its own objects, rewriting only what changed since the last."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from preview.engine import RecordedResource
from preview.render import DuplicateObjectError, render, to_yaml


def _config_map(name: str, namespace: str, data: dict[str, str]) -> RecordedResource:
    return RecordedResource(
        type="kubernetes:core/v1:ConfigMap",
        name=name,
        urn=f"urn:pulumi:s::p::kubernetes:core/v1:ConfigMap::{namespace}-{name}",
        parent=None,
        custom=True,
        provider=None,
        inputs={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data},
    )


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_second_preview_leaves_its_own_objects_and_only_them(tmp_path: Path):
    """Same object: the file is the very one (inode and modification time kept); changed: rewritten; gone from the
    program: deleted, with a namespace's folder left empty; a file or a link put there by hand: deleted, the link's
    target untouched."""
    out = tmp_path / "out"
    first = [
        _config_map("same", "a", {"k": "v"}),
        _config_map("changed", "a", {"k": "old"}),
        _config_map("gone", "b", {"k": "v"}),
    ]
    render(out, first)
    manifests = out / "manifests"
    written = ["a/ConfigMap.core.changed.yaml", "a/ConfigMap.core.same.yaml", "b/ConfigMap.core.gone.yaml"]
    assert sorted(_files(manifests)) == written
    same = manifests / "a" / "ConfigMap.core.same.yaml"
    os.utime(same, ns=(1_000_000_000, 1_000_000_000))
    before = same.stat()
    outside = tmp_path / "outside.yaml"
    outside.write_text("keep me\n")
    (manifests / "a" / "link.yaml").symlink_to(outside)
    (manifests / "a" / "by-hand.yaml").write_text("x: 1\n")

    render(out, [_config_map("same", "a", {"k": "v"}), _config_map("changed", "a", {"k": "new"})])

    files = _files(manifests)
    assert sorted(files) == ["a/ConfigMap.core.changed.yaml", "a/ConfigMap.core.same.yaml"]
    assert files["a/ConfigMap.core.changed.yaml"] == to_yaml(render_object("changed", "a", {"k": "new"}))
    assert files["a/ConfigMap.core.same.yaml"] == to_yaml(render_object("same", "a", {"k": "v"}))
    after = same.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not (manifests / "b").exists() and outside.read_text() == "keep me\n"


def render_object(name: str, namespace: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


@pytest.mark.parametrize("planted", ["file", "link"])
def test_a_folder_that_is_a_file_or_a_link_is_replaced_not_followed(tmp_path: Path, planted: str):
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("keep\n")
    if planted == "file":
        (out / "manifests").write_text("not a folder\n")
    else:
        (out / "manifests").symlink_to(elsewhere, target_is_directory=True)
    render(out, [_config_map("x", "a", {"k": "v"})])
    assert (out / "manifests").is_dir() and not (out / "manifests").is_symlink()
    assert sorted(_files(out / "manifests")) == ["a/ConfigMap.core.x.yaml"]
    assert _files(elsewhere) == {"precious": "keep\n"}


def test_a_render_that_fails_writes_no_object(tmp_path: Path):
    """Two resources declaring one object fail the render before any file is written: the last preview's files stay
    as they were."""
    out = tmp_path / "out"
    render(out, [_config_map("x", "a", {"k": "v"})])
    before, resources_json = _files(out / "manifests"), (out / "resources.json").read_text()
    with pytest.raises(DuplicateObjectError):
        render(out, [_config_map("y", "a", {"k": "v"}), _config_map("x", "a", {"k": "1"}), _config_map("x", "a", {"k": "2"})])
    assert _files(out / "manifests") == before and resources_json == (out / "resources.json").read_text()


class _PyYamlDumper(yaml.CSafeDumper):
    """PyYAML's own safe representer, with libyaml's emitter as render's, as the manifests were written before
    render's own node-making: no anchors, a string of several lines as a literal block."""

    def ignore_aliases(self, data):
        return True


_PyYamlDumper.add_representer(
    str, lambda dumper, data: dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)
)


def _pyyaml(data) -> str:
    return yaml.dump(data, Dumper=_PyYamlDumper, sort_keys=False, default_flow_style=False, width=120)


# Scalars the emitter must quote or write specially, and shapes of each kind.
AWKWARD = {
    "strings": ["", "true", "no", "null", "~", "123", "0x1F", "1e3", "2026-12-07", "a: b", "- x", "#", "'q'", '"q"', " lead"],
    "blocks": ["line\nline", "trailing\n", "  indented\nblock"],
    "numbers": [0, -7, 2**70, 0.5, 1e-9, 1e300, float("inf"), float("-inf")],
    "others": [True, False, None, {}, [], [[]], [{}], {"": "empty key", "1": "digit key"}],
    "unicode": ["caf\u00e9", "\u2603 snow", "tab\tin"],
}


@pytest.mark.parametrize("stack", ["dev", "staging", "prod"])
def test_every_manifest_is_written_as_pyyaml_writes_it(previews, stack: str):
    """Render's own node-making for JSON's types (`_Dumper.represent_data`) writes every committed stack's manifests
    and Helm releases byte for byte as PyYAML's safe representer does, and awkward values too."""
    out = previews[stack].out
    files = sorted([*(out / "manifests").rglob("*.yaml"), *(out / "helm").glob("*.yaml")])
    assert len(files) > 50
    for path in files:
        text = path.read_text()
        assert text == _pyyaml(yaml.safe_load(text)), path
    assert to_yaml(AWKWARD) == _pyyaml(AWKWARD)


def test_the_program_writes_json_values_as_pyyamls_safe_dumper_writes_them():
    """The program's own YAML (components/yaml_text.py `JsonDumper`, several lines' strings left to the emitter, as
    the endpoint pickers' configs are written) is PyYAML's safe dumper's, byte for byte."""
    from components.yaml_text import JsonDumper

    def written(dumper: type) -> str:
        return yaml.dump(AWKWARD, Dumper=dumper, sort_keys=False, default_flow_style=False, width=1000)

    # Twice: the second time each scalar's tag is the one kept from the first (`JsonDumper.resolve`).
    assert written(JsonDumper) == written(JsonDumper) == written(getattr(yaml, "CSafeDumper", yaml.SafeDumper))


def test_a_changed_file_is_made_anew_not_written_through(tmp_path: Path):
    """A changed object's file is replaced: a hard link to the last preview's file (a snapshot taken with `cp -al`)
    keeps what it held; a pipe or a folder where an object's file goes is replaced, never read or followed."""
    out = tmp_path / "out"
    render(out, [_config_map("x", "a", {"k": "old"}), _config_map("y", "a", {"k": "v"}), _config_map("z", "a", {"k": "v"})])
    manifests = out / "manifests" / "a"
    snapshot = tmp_path / "snapshot.yaml"
    os.link(manifests / "ConfigMap.core.x.yaml", snapshot)
    kept = snapshot.read_text()
    (manifests / "ConfigMap.core.y.yaml").unlink()
    os.mkfifo(manifests / "ConfigMap.core.y.yaml")
    (manifests / "ConfigMap.core.z.yaml").unlink()
    (manifests / "ConfigMap.core.z.yaml").mkdir()
    (manifests / "ConfigMap.core.z.yaml" / "inside").write_text("x\n")

    render(out, [_config_map("x", "a", {"k": "new"}), _config_map("y", "a", {"k": "v"}), _config_map("z", "a", {"k": "v"})])

    assert snapshot.read_text() == kept and "old" in kept
    files = _files(out / "manifests")
    assert sorted(files) == ["a/ConfigMap.core.x.yaml", "a/ConfigMap.core.y.yaml", "a/ConfigMap.core.z.yaml"]
    assert files["a/ConfigMap.core.x.yaml"] == to_yaml(render_object("x", "a", {"k": "new"}))
    assert all((manifests / name).is_file() for name in ("ConfigMap.core.y.yaml", "ConfigMap.core.z.yaml"))
