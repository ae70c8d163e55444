"""Model references and manifests: parsing, digests, and the demo model's reference."""

import hashlib
import json
import os
import re
from pathlib import Path

import pytest

from tandem.model_store import FileEntry, Manifest, ModelRef, ModelStore, ObjectStore, StoreError, checked_digest
from tandem.model_store.reference import ENTRY_FILE, is_sha256_hex

DIGEST = "ab" * 32


def test_references_parse_and_print_back():
    ref = ModelRef.parse(f"s3://models/team/llama@sha256:{DIGEST}")
    assert (ref.bucket, ref.prefix, ref.digest) == ("models", "team/llama", DIGEST)
    assert str(ref) == f"s3://models/team/llama@sha256:{DIGEST}"
    assert ModelRef.parse("s3://models/llama").digest is None
    assert ModelRef.parse("/data/llama") is None  # a local directory


@pytest.mark.parametrize(
    "bad",
    [
        "s3://models",
        "s3:///llama",
        f"s3://m/l@md5:{DIGEST}",
        "s3://m/l@sha256:abc",
        f"s3://m/l@sha256:{'AB' * 32}",
        "s3://m/l@",  # an empty pin: `model@$PIN` with the variable unset, not the latest push (a review)
        "s3://m/l@sha256:",
        "s3://m/llama#v2",  # a URL's fragment and query were dropped: another model's name (a review)
        "s3://m/llama?version=2",
    ],
)
def test_bad_references_say_what_is_expected(bad):
    with pytest.raises(StoreError, match="s3://bucket/path/to/model|@sha256:<64 lowercase hex digits>"):
        ModelRef.parse(bad)


def test_the_digest_depends_on_content_not_on_file_order():
    a, b = FileEntry("a.json", 3, "1" * 64), FileEntry("b.bin", 5, "2" * 64)
    assert Manifest((a, b)).digest == Manifest((b, a)).digest
    assert Manifest((a, b)).digest != Manifest((a, FileEntry("b.bin", 5, "3" * 64))).digest
    assert Manifest.from_json(Manifest((a, b)).to_json(), "x").digest == Manifest((a, b)).digest


def test_a_manifest_cannot_write_outside_its_directory():
    evil = b'{"format": 1, "files": [{"path": "../../etc/cron.d/x", "size": 1, "sha256": "00"}]}'
    with pytest.raises(StoreError, match="unsafe path"):
        Manifest.from_json(evil, "s3://m/x")


def test_the_demo_reference_builds_one_checkpoint(tmp_path):
    store = ModelStore(tmp_path)
    first = store.resolve("demo://tandem-demo")
    assert (first / "config.json").is_file() and first.name == "tandem-demo"  # the model id clients send
    assert store.resolve("demo://tandem-demo") == first
    with pytest.raises(StoreError, match="demo://tandem-demo"):
        store.resolve("demo://other")


# -- hostile values: digests read back, manifest file names ---------------------------------------------------

HOSTILE_DIGESTS = [
    pytest.param("../../etc", id="dot-dot"),
    pytest.param("sha256-abc", id="prefixed-short"),
    pytest.param(f"sha256:{DIGEST}", id="prefixed"),
    pytest.param("a" * 63, id="63-hex"),
    pytest.param("a" * 65, id="65-hex"),
    pytest.param(DIGEST.upper(), id="uppercase"),
    pytest.param(DIGEST[:-1] + "g", id="not-hex"),
    pytest.param(DIGEST[:32] + "\n" + DIGEST[32:], id="newline-inside"),
    pytest.param(f"{DIGEST}/../x", id="digest-then-path"),
    pytest.param("", id="empty"),
    pytest.param(None, id="not-a-string"),
]

HOSTILE_NAMES = [
    pytest.param("/etc/passwd", id="absolute"),
    pytest.param("../x", id="dot-dot"),
    pytest.param("a/../../x", id="dot-dot-inside"),
    pytest.param("a/..", id="dot-dot-last"),
    pytest.param("C:\\x", id="windows-drive-backslash"),
    pytest.param("C:x", id="windows-drive"),
    pytest.param("a\\..\\x", id="backslashes"),
    pytest.param("", id="empty"),
    pytest.param("a\0b", id="nul"),
    pytest.param(".", id="dot"),
    pytest.param("./x", id="not-normalized"),
    pytest.param("a//x", id="double-slash"),
    pytest.param(7, id="not-a-string"),
]


def manifest_bytes(path, sha256="cd" * 32, size=5) -> bytes:
    return json.dumps({"format": 1, "files": [{"path": path, "size": size, "sha256": sha256}]}).encode()


def snapshot(root: Path) -> dict[str, tuple[bytes | str, int]]:
    """Every file and link under root: its contents (or target) and modification time."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        if p.is_symlink():
            out[str(p)] = (os.readlink(p), st.st_mtime_ns)
        elif p.is_file():
            out[str(p)] = (p.read_bytes(), st.st_mtime_ns)
    return out


def offline() -> ObjectStore:
    raise AssertionError("the object store must not be reached")


@pytest.mark.parametrize("value", [DIGEST, f"{DIGEST}\n", f"  {DIGEST}\r\n"])
def test_a_digest_read_back_is_stripped_and_accepted(value):
    assert checked_digest(value, "s3://b/p/manifests/latest") == DIGEST


@pytest.mark.parametrize("value", HOSTILE_DIGESTS)
def test_a_digest_read_back_must_be_64_lowercase_hex(value):
    with pytest.raises(StoreError, match=r"^s3://b/p/manifests/latest holds .*, not a sha256 digest"):
        checked_digest(value, "s3://b/p/manifests/latest")


def test_the_reference_pin_and_a_read_back_digest_share_one_check():
    for value in ["a" * 63, DIGEST.upper(), "../../etc"]:
        assert not is_sha256_hex(value)
        with pytest.raises(StoreError, match="@sha256:<64 lowercase hex digits>"):
            ModelRef.parse(f"s3://m/l@sha256:{value}")
    with pytest.raises(StoreError, match="not a sha256 digest"):
        ModelRef("m", "l", "../../etc")  # a reference with a bad digest cannot exist at all
    assert ModelRef("m", "l", DIGEST).pinned(DIGEST).digest == DIGEST


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_manifest_file_name_must_be_relative_and_inside(name):
    with pytest.raises(StoreError, match=r"^s3://m/x: unsafe path .* in the manifest \("):
        Manifest.from_json(manifest_bytes(name), "s3://m/x")


@pytest.mark.parametrize("sha256", HOSTILE_DIGESTS)
def test_a_manifest_file_hash_must_be_a_digest(sha256):
    # It becomes part of an object key (blobs/sha256-<hash>).
    with pytest.raises(StoreError, match=r"^s3://m/x: the sha256 of 'a.bin' holds .*, not a sha256 digest"):
        Manifest.from_json(manifest_bytes("a.bin", sha256), "s3://m/x")


@pytest.mark.parametrize("body", [b"[]", b'"x"', b'{"format": 1, "files": 3}', b'{"format": 1, "files": [3]}'])
def test_a_manifest_of_the_wrong_shape_is_an_error_not_a_crash(body):
    with pytest.raises(StoreError, match="not a Tandem model manifest"):
        Manifest.from_json(body, "s3://m/x")


def write_entry(entry: Path, manifest: bytes, mtime_ns: dict) -> None:
    entry.mkdir(parents=True, exist_ok=True)
    record = {"reference": "s3://m/x", "manifest": json.loads(manifest), "mtime_ns": mtime_ns, "installed_at": 0}
    (entry / ENTRY_FILE).write_text(json.dumps(record))


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_cache_entry_listing_an_unsafe_path_is_refused(tmp_path, name):
    cache = tmp_path / "node" / "models" / "cache"
    entry = cache / f"sha256-{DIGEST}"
    write_entry(entry, manifest_bytes(name), {})
    before = snapshot(tmp_path)
    with pytest.raises(StoreError, match=rf"^{re.escape(str(entry / ENTRY_FILE))}: unsafe path"):
        ModelStore(cache, object_store_factory=offline).resolve(f"s3://m/x@sha256:{DIGEST}")
    lock = str(cache / f"sha256-{DIGEST}.lock")
    assert {k: v for k, v in snapshot(tmp_path).items() if k != lock} == before


def outside_secret(tmp_path: Path) -> tuple[Path, bytes]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not yours")
    return outside, Manifest((FileEntry("link/secret", 9, hashlib.sha256(b"not yours").hexdigest()),)).to_json()


def test_a_cache_entry_cannot_reach_outside_through_a_symlink(tmp_path):
    outside, manifest = outside_secret(tmp_path)
    cache = tmp_path / "cache"
    entry = cache / f"sha256-{DIGEST}"
    entry.mkdir(parents=True)
    (entry / "link").symlink_to(outside)
    # A record that would pass every check if the path were followed: same size, same modification time.
    write_entry(entry, manifest, {"link/secret": (outside / "secret").stat().st_mtime_ns})
    before = snapshot(tmp_path)
    with pytest.raises(StoreError, match=r"unsafe path 'link/secret' in the manifest \(it leads outside"):
        ModelStore(cache, object_store_factory=offline).resolve(f"s3://m/x@sha256:{DIGEST}")
    lock = str(cache / f"sha256-{DIGEST}.lock")
    assert {k: v for k, v in snapshot(tmp_path).items() if k != lock} == before


def test_the_shared_tier_cannot_reach_outside_through_a_symlink(tmp_path):
    outside, manifest = outside_secret(tmp_path)
    digest = hashlib.sha256(manifest).hexdigest()
    shared = tmp_path / "shared" / f"sha256-{digest}"
    shared.mkdir(parents=True)
    (shared / "link").symlink_to(outside)
    write_entry(shared, manifest, {})
    before = snapshot(tmp_path)
    cache = tmp_path / "cache"
    store = ModelStore(cache, shared_dir=tmp_path / "shared", object_store_factory=offline)
    with pytest.raises(StoreError, match=r"unsafe path 'link/secret' in the manifest \(it leads outside"):
        store.resolve(f"s3://m/x@sha256:{digest}")
    assert [p.name for p in cache.iterdir()] == [f"sha256-{digest}.lock"]  # no entry, no temporary left
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith(str(cache))} == before


def test_a_manifest_push_never_writes_is_refused_before_any_file_is():
    """(a review) `a` beside `a/b` was a FileExistsError traceback; an entry's own `.last-used` named in a manifest
    made every start fetch again; a manifest of no files installed as a model."""
    entry = FileEntry("a", 1, "1" * 64)
    for files, said in [
        ((), "no files"),
        ((FileEntry(".last-used", 1, "1" * 64),), "'.last-used': push leaves out names starting with '.'"),
        ((FileEntry("w/.tandem-entry.json", 1, "1" * 64),), "'w/.tandem-entry.json': push leaves out names"),
        ((entry, FileEntry("a/b", 1, "2" * 64)), "'a' is a file and a folder"),
    ]:
        with pytest.raises(
            StoreError, match=re.escape("s3://m/x: not a manifest push writes (") + ".*" + re.escape(said)
        ):
            Manifest.from_json(Manifest(files).to_json(), "s3://m/x")


def test_only_takes_the_files_named_and_the_folders_named_whole():
    files = [FileEntry(name, 1, "1" * 64) for name in ["tokenizer.json", "chat_template.jinja", "model.safetensors",
                                                       "additional_chat_templates/tool_use.jinja", "extra/x.json"]]  # fmt: skip
    chosen = Manifest(tuple(files)).only(["tokenizer.json", "chat_template.jinja", "additional_chat_templates/"])
    assert [f.path for f in chosen.files] == [
        "tokenizer.json", "chat_template.jinja", "additional_chat_templates/tool_use.jinja"
    ]  # fmt: skip


def test_push_refuses_what_it_cannot_take_whole_before_hashing(tmp_path):
    """(a review) A link that leads nowhere (an HF cache snapshot missing a blob), a link to a folder and a pipe
    were left out without a word, and the model pushed without its weights; a folder of no config.json pushed as
    a model."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"w")
    with pytest.raises(StoreError, match="not a checkpoint \\(no config.json\\)"):
        Manifest.of_directory(model)
    (model / "config.json").write_text("{}")
    (model / ".cache").mkdir()  # names starting with '.' are left out, as before
    (model / ".cache" / "x").write_text("x")
    assert [f.path for f in Manifest.of_directory(model).files] == ["config.json", "model.safetensors"]
    for make, said in [
        (lambda p: p.symlink_to(tmp_path / "gone"), "a link that leads nowhere"),
        (lambda p: p.symlink_to(tmp_path, target_is_directory=True), "a link to a folder"),
        (lambda p: os.mkfifo(p), "not a file"),
    ]:
        odd = model / "sub" / "odd"
        odd.parent.mkdir(exist_ok=True)
        make(odd)
        with pytest.raises(StoreError, match=f"{re.escape(str(odd))}: {said}"):
            Manifest.of_directory(model)
        odd.unlink()


def test_push_refuses_a_folder_it_may_not_list():
    """(a review) os.walk skips a folder it cannot open: a checkpoint's `original/` of mode 000 was left out and the
    push said it was done. As root (who may list anything), the check runs as `nobody`."""
    import shutil
    import subprocess
    import sys
    import tempfile

    where = Path(tempfile.mkdtemp())  # not under pytest's own, which `nobody` may not enter
    os.chmod(where, 0o755)
    model = where / "model"
    (model / "original").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "original" / "consolidated.00.pth").write_bytes(b"w")
    os.chmod(model / "original", 0)
    check = "from tandem.model_store import Manifest; Manifest.of_directory(__import__('pathlib').Path(__import__('sys').argv[1]))"
    command = [sys.executable, "-c", check, str(model)]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root, and no setpriv to drop root's right to list any folder")
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(command, capture_output=True, text=True, cwd=root,
                          env=os.environ | {"PYTHONPATH": f"{root}:{root}/sdk"})  # fmt: skip
    os.chmod(model / "original", 0o755)
    shutil.rmtree(where)
    assert done.returncode != 0 and f"{model / 'original'}: cannot be listed" in done.stderr, done.stderr[-500:]
