"""The node-local model cache (tandem/model_store/cache.py) against an object store in memory: concurrent fetches,
what other processes and containers leave in the cache, the shared tier, and the variables that configure it."""

import fcntl
import hashlib
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tandem.model_store.cache as cache_module
from tandem.cli import app
from tandem.model_store import FileEntry, Manifest, ModelStore, ObjectStore, StoreError
from tests.namespaces import in_another_pid_namespace

FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"weights " * 1000}


class MemoryObjectStore:
    """What the cache reads of an object store, from memory; each file's download takes `delay_s` (a slow link)."""

    def __init__(self, files: dict[str, bytes] = FILES, delay_s: float = 0.0) -> None:
        self.blobs = {hashlib.sha256(data).hexdigest(): data for data in files.values()}
        entries = (FileEntry(name, len(data), hashlib.sha256(data).hexdigest()) for name, data in files.items())
        self.manifest = Manifest(tuple(entries)).to_json()
        self.digest = hashlib.sha256(self.manifest).hexdigest()
        self.ref = f"s3://models/demo@sha256:{self.digest}"
        self.delay_s, self.downloads = delay_s, 0
        self._lock = threading.Lock()

    def get_bytes(self, bucket: str, key: str) -> bytes:
        assert key == f"demo/manifests/sha256-{self.digest}.json", key
        return self.manifest

    def download(self, bucket: str, key: str, size: int, dest: Path, progress) -> None:
        time.sleep(self.delay_s)
        dest.write_bytes(self.blobs[key.rpartition("sha256-")[2]])
        progress.add(size)
        with self._lock:
            self.downloads += 1


def store_over(cache: Path, objects: MemoryObjectStore, **kwargs) -> ModelStore:
    return ModelStore(cache, object_store_factory=lambda: objects, **kwargs)


def hold(lock_file: Path, kind: int) -> int:
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, kind)
    return fd


# -- fetches started together --------------------------------------------------------------------------------------


def test_two_fetches_started_together_download_once_and_the_second_waits_however_long_it_takes(tmp_path, monkeypatch):
    """Both found the entry missing; the one that lost the race to install it gave up after 60 s of the other's
    download: `…is unusable (not installed) and in use by another process` (a review)."""
    monkeypatch.setattr(cache_module, "REPLACE_WAIT_S", 0.5)
    objects = MemoryObjectStore(delay_s=1.0)  # the install takes longer than REPLACE_WAIT_S
    cache = tmp_path / "cache"
    cache.mkdir()
    # A third process holds the entry shared for a moment, so both fetches are past their first look when one of
    # them can start installing.
    holder = hold(cache / f"sha256-{objects.digest}.lock", fcntl.LOCK_SH)
    stores = [store_over(cache, objects) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        fetches = [pool.submit(store.resolve, objects.ref) for store in stores]
        time.sleep(0.3)
        os.close(holder)
        paths = [fetch.result(timeout=60) for fetch in fetches]
    assert paths[0] == paths[1] == cache / f"sha256-{objects.digest}"
    assert objects.downloads == len(FILES)  # once
    assert {p.name: p.read_bytes() for p in paths[0].iterdir() if not p.name.startswith(".")} == FILES


def test_a_damaged_entry_running_servers_hold_is_still_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_module, "REPLACE_WAIT_S", 0.5)
    objects = MemoryObjectStore()
    server = store_over(tmp_path, objects)
    path = server.resolve(objects.ref)  # held, as a running worker holds its model
    os.utime(path / "config.json", ns=(0, 0))
    with pytest.raises(StoreError, match=r"\(config.json changed after it was installed\) and in use by another"):
        store_over(tmp_path, objects).resolve(objects.ref)
    server.release()


# -- what other processes and containers leave ---------------------------------------------------------------------

OTHER_ENTRY = f"sha256-{'ab' * 32}"


@pytest.mark.parametrize(
    "tag",
    [
        pytest.param("1-5", id="pid-1-of-another-container"),  # PID 1 is alive here, but started at another time
        pytest.param("1-5-n4026599999", id="another-pid-namespace"),
        pytest.param("999999999", id="a-pid-not-running-here"),
    ],
)
def test_the_temporary_of_an_install_still_running_elsewhere_is_kept(tmp_path, tag):
    """A worker pod's fetch deleted the `.tmp-…` folder of the warmer's download running in another container,
    judged by a PID that meant nothing there; the download then failed (a review)."""
    objects = MemoryObjectStore()
    running = tmp_path / f".tmp-{OTHER_ENTRY}@{tag}"
    running.mkdir()
    (running / "model.safetensors").write_bytes(b"half")
    installer = hold(tmp_path / f"{OTHER_ENTRY}.lock", fcntl.LOCK_EX)  # an install holds its entry exclusive
    try:
        store_over(tmp_path, objects).resolve(objects.ref)  # an install here sweeps what died
        assert (running / "model.safetensors").read_bytes() == b"half"
    finally:
        os.close(installer)
    store_over(tmp_path, objects)._remove_stale_temporaries(installing=tmp_path / "sha256-other")
    assert not running.exists()  # its install stopped: now it is a dead one's


def test_a_temporary_of_another_pid_namespace_survives_the_sweep(tmp_path):
    """The review's repro: an install running under `unshare --pid` (a container) while a process here sweeps."""
    objects = MemoryObjectStore()
    child = in_another_pid_namespace(INSTALLING_ELSEWHERE, str(tmp_path))
    try:
        running = Path(child.stdout.readline().strip())
        assert running.name.startswith(f".tmp-{OTHER_ENTRY}@1-")  # PID 1 there: alive here too, another process
        store_over(tmp_path, objects).resolve(objects.ref)
        assert (running / "model.safetensors").is_file()
    finally:
        child.communicate("", timeout=30)
    store_over(tmp_path, objects)._remove_stale_temporaries(installing=tmp_path / "sha256-other")
    assert not running.exists()


INSTALLING_ELSEWHERE = f"""
import fcntl, os, sys
from pathlib import Path
from serving.atomic_dir import owner_tag
cache = Path(sys.argv[1])
fd = os.open(cache / "{OTHER_ENTRY}.lock", os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
running = cache / (".tmp-{OTHER_ENTRY}@" + owner_tag())
running.mkdir()
(running / "model.safetensors").write_bytes(b"half")
print(running, flush=True)
sys.stdin.read()
"""


def test_an_entry_that_is_a_file_is_replaced_and_leaves_no_trash(tmp_path):
    """Discarding an entry that was a file left its trash for ever: rmtree on a file, errors ignored (a review)."""
    objects = MemoryObjectStore()
    (tmp_path / f"sha256-{objects.digest}").write_text("not an entry")
    (tmp_path / ".trash-left-by-a-killed-fetch").write_text("x")
    path = store_over(tmp_path, objects).resolve(objects.ref)
    assert (path / "config.json").read_bytes() == FILES["config.json"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# -- the shared tier --------------------------------------------------------------------------------------------


def test_a_shared_entry_missing_a_file_falls_back_to_the_object_store(tmp_path):
    """`shutil.copyfile` raised FileNotFoundError before the fallback to the object store ran (a review)."""
    objects = MemoryObjectStore()
    shared = tmp_path / "shared"
    (store_over(shared, objects).resolve(objects.ref) / "config.json").unlink()
    objects.downloads = 0
    path = store_over(tmp_path / "local", objects, shared_dir=shared).resolve(objects.ref)
    assert {p.name: p.read_bytes() for p in path.iterdir() if not p.name.startswith(".")} == FILES
    assert objects.downloads == len(FILES)


# -- references and variables --------------------------------------------------------------------------------------


def test_an_empty_reference_is_refused_not_read_as_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_MODEL_CACHE_DIR", str(tmp_path))
    with pytest.raises(StoreError, match="the model reference is empty"):
        ModelStore(tmp_path).resolve("")
    result = CliRunner().invoke(app, ["model", "fetch", ""])
    assert result.exit_code == 1 and "error: the model reference is empty" in result.output


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("TANDEM_MODEL_CACHE_MAX_BYTES", "10GB", "use a whole number of bytes, 0 or more (unset: no bound)"),
        ("TANDEM_MODEL_CACHE_MAX_BYTES", "x", "use a whole number of bytes"),
        ("TANDEM_MODEL_CACHE_MAX_BYTES", "1e3", "use a whole number of bytes"),
        ("TANDEM_MODEL_CACHE_MAX_BYTES", " ", "use a whole number of bytes"),
        ("TANDEM_MODEL_CACHE_MAX_BYTES", "-1", "use a whole number of bytes, 0 or more"),
        ("TANDEM_MODEL_CACHE_DIR", "", "='': use a directory (unset: ~/.cache/tandem/models)"),
        ("TANDEM_MODEL_CACHE_DIR", " ", "use a directory"),
    ],
)
def test_a_cache_variable_that_means_nothing_is_refused_in_one_line(tmp_path, monkeypatch, name, value, said):
    """`10GB` was a ValueError traceback from every command with --model, a local directory too; `-1` a bound of
    -0 MB; an empty cache directory the current one (a review)."""
    monkeypatch.setenv(name, value)
    with pytest.raises(StoreError, match=rf"^{name}.*{re.escape(said)}"):
        ModelStore.from_env()
    result = CliRunner().invoke(app, ["model", "fetch", str(tmp_path)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.startswith(f"error: {name}") and said in result.output


@pytest.mark.parametrize("value", ["abc", "", "0", "-2", "8.5"])
def test_a_fetch_streams_variable_that_is_not_a_count_is_refused(monkeypatch, value):
    monkeypatch.setenv("TANDEM_MODEL_FETCH_STREAMS", value)
    with pytest.raises(StoreError, match=rf"^TANDEM_MODEL_FETCH_STREAMS={value!r}: use a whole number, 1 or more"):
        ObjectStore()


def test_the_cache_variables_that_mean_something_are_read(tmp_path, monkeypatch):
    monkeypatch.setenv("TANDEM_MODEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TANDEM_MODEL_CACHE_MAX_BYTES", "0")
    monkeypatch.setenv("TANDEM_MODEL_FETCH_STREAMS", "3")
    store = ModelStore.from_env()
    assert (store.cache_dir, store.max_bytes, ObjectStore().max_workers) == (tmp_path, 0, 3)
    monkeypatch.delenv("TANDEM_MODEL_CACHE_MAX_BYTES")
    assert ModelStore.from_env().max_bytes is None
