"""The export manifest's file names: relative, and inside the export folder, or the export is refused.

No model is exported here: each test writes a small folder and manifest by hand, so they run in milliseconds.
"""

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from edge_agent.export import FORMAT_VERSION, MANIFEST_NAME, MODEL_NAME, ExportError, verify_export

OUTSIDE = b"a file outside the export folder"

HOSTILE_NAMES = [
    pytest.param("/etc/passwd", id="absolute"),
    pytest.param("../x", id="dot-dot"),
    pytest.param("a/../../x", id="dot-dot-inside"),
    pytest.param("C:\\x", id="windows-drive-backslash"),
    pytest.param("C:x", id="windows-drive"),
    pytest.param("a\\..\\x", id="backslashes"),
    pytest.param("", id="empty"),
    pytest.param("a\0b", id="nul"),
    pytest.param(".", id="dot"),
    pytest.param("./model.onnx", id="not-normalized"),
]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def snapshot(root: Path) -> dict[str, tuple[bytes | str, int]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p)] = (os.readlink(p), p.lstat().st_mtime_ns)
        elif p.is_file():
            out[str(p)] = (p.read_bytes(), p.stat().st_mtime_ns)
    return out


@pytest.fixture
def export_dir(tmp_path):
    """tmp_path/exports/e: a model file and its manifest; next to it, exports/x, which `../x` would reach (with a
    matching checksum, so only the name check can refuse it)."""
    root = tmp_path / "exports"
    folder = root / "e"
    (folder / "a").mkdir(parents=True)  # so that a/../../x resolves to exports/x
    (folder / MODEL_NAME).write_bytes(b"onnx")
    (root / "x").write_bytes(OUTSIDE)
    write_manifest(folder, {MODEL_NAME: sha256(b"onnx")})
    return folder


def write_manifest(folder: Path, files) -> None:
    (folder / MANIFEST_NAME).write_text(json.dumps({"format_version": FORMAT_VERSION, "files": files}))


def test_a_well_formed_export_verifies(export_dir):
    assert verify_export(export_dir)["files"] == {MODEL_NAME: sha256(b"onnx")}


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_manifest_file_name_must_be_relative_and_inside(export_dir, tmp_path, name):
    write_manifest(export_dir, {MODEL_NAME: sha256(b"onnx"), name: sha256(OUTSIDE)})
    before = snapshot(tmp_path)
    with pytest.raises(
        ExportError,
        match=rf"^{re.escape(str(export_dir / MANIFEST_NAME))}: file name "
        rf"{re.escape(repr(name))} is unsafe \(",
    ):
        verify_export(export_dir)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("link", ["dir", "file"])
def test_a_manifest_file_name_cannot_leave_through_a_symlink(export_dir, tmp_path, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(OUTSIDE)
    if link == "dir":
        (export_dir / "link").symlink_to(outside)
        name = "link/secret"
    else:
        (export_dir / "link").symlink_to(outside / "secret")
        name = "link"
    write_manifest(export_dir, {MODEL_NAME: sha256(b"onnx"), name: sha256(OUTSIDE)})
    before = snapshot(tmp_path)
    with pytest.raises(ExportError, match=rf"file name '{name}' is unsafe \(it leads outside"):
        verify_export(export_dir)
    assert snapshot(tmp_path) == before


def test_a_symlink_that_stays_inside_is_fine(export_dir):
    (export_dir / "alias.onnx").symlink_to(export_dir / MODEL_NAME)
    write_manifest(export_dir, {MODEL_NAME: sha256(b"onnx"), "alias.onnx": sha256(b"onnx")})
    assert "alias.onnx" in verify_export(export_dir)["files"]


@pytest.mark.parametrize("manifest", [[], {"format_version": FORMAT_VERSION, "files": ["model.onnx"]}])
def test_a_manifest_of_the_wrong_shape_is_an_error_not_a_crash(export_dir, manifest):
    (export_dir / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(ExportError, match="not a Tandem export manifest"):
        verify_export(export_dir)
