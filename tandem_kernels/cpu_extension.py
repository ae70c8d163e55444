"""CPU kernels in C++ (tandem_kernels/csrc/cpu_kernels.cpp), built once at install, loaded at run time; torch references otherwise.

Paged decode attention, RMSNorm (residual fused), rotary, and SiLU-and-multiply: each kernel's dispatch in
tandem_kernels/ calls its C++ version for fp32 CPU tensors (`usable_for`) and its torch reference otherwise.

Built by `python -m tandem_kernels.cpu_extension` (`make install`, `make test` and `make up` run it; it returns at once
when the build exists), never at run time. The build compiles in a directory of its own (torch's build lock
included) and publishes the finished module with one rename, as a versioned artifact:
`<TANDEM_CPU_KERNEL_DIR, default the Python prefix's tandem-kernels>/<key>/`, the key a hash of the source, the
flags, the torch version, the Python ABI and the machine. A build killed mid-way leaves only its own temporary
directory, which no one waits on and the next build removes. At run time `extension()` loads the artifact of
this key, bounded by a few seconds; where there is none (not built, no compiler, `TANDEM_CPU_KERNELS=0`) or it
will not load, everything runs the torch references and one log line says why. Checked against the references
in tests/unit/kernels/test_cpu_extension.py; the killed build in tests/unit/kernels/test_cpu_extension_build.py.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import shutil
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
SOURCE = Path(__file__).parent / "csrc" / "cpu_kernels.cpp"
NAME = "tandem_cpu_kernels"
# Built where it runs, so for this CPU's vector units by default; an image built on one machine for others
# sets a baseline instead (deploy/Dockerfile: TANDEM_CPU_KERNEL_ARCH=x86-64-v3, AVX2 and FMA).
ARCH = os.environ.get("TANDEM_CPU_KERNEL_ARCH", "native")
# -fopenmp: at::parallel_for is OpenMP in torch's CPU builds, and without the flag its pragma is ignored and
# every kernel runs on one thread. The extension then links libgomp.so.1, which resolves to the copy torch
# has already loaded (one OpenMP runtime, one thread pool). A compiler without OpenMP (Apple's clang) gets
# the second variant: the same kernels on one thread.
BASE_FLAGS = ["-O3", "-ffast-math", f"-march={ARCH}"]
if platform.machine().lower() in ("x86_64", "amd64"):
    BASE_FLAGS.append("-mprefer-vector-width=512")  # where AVX-512 exists, use it (GCC prefers 256 on some CPUs)
VARIANTS = [(BASE_FLAGS + ["-fopenmp"], ["-fopenmp"]), (BASE_FLAGS, [])]  # (compile flags, link flags)
MANIFEST = "manifest.json"
LAYOUT = 2  # of an artifact directory; the first layout was torch's build directory, used in place
TEMP_PREFIX = ".tandem-build-"  # + pid: a build in progress, or one that was killed
STALE_TEMP_S = 30 * 60  # a temporary directory this old is a dead build's, whatever its pid now names
# Loading a built module takes milliseconds; one that takes longer (a hung file system) is given up on.
LOAD_TIMEOUT_S = float(os.environ.get("TANDEM_CPU_KERNEL_LOAD_TIMEOUT_S", "5"))
NOT_BUILT = "C++ CPU kernels not built (run `python -m tandem_kernels.cpu_extension` or `make install`)"


def artifact_root() -> Path:
    return Path(os.environ.get("TANDEM_CPU_KERNEL_DIR") or Path(sys.prefix) / "tandem-kernels")


def artifact_key() -> str:
    """Everything the compiled module depends on: the source, the flags of every variant, torch, the Python ABI."""
    parts = [
        str(LAYOUT),
        hashlib.sha256(SOURCE.read_bytes()).hexdigest(),
        json.dumps(VARIANTS),
        _torch_version(),
        sysconfig.get_config_var("EXT_SUFFIX") or sys.implementation.cache_tag,
        platform.machine(),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def artifact_directory() -> Path:
    return artifact_root() / artifact_key()


def _torch_version() -> str:
    """torch's version without importing torch (seconds), so that `python -m tandem_kernels.cpu_extension` returns at
    once where the build exists."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # a torch without its metadata
        import torch

        return torch.__version__


@functools.cache
def extension():
    """The compiled module, or None (with the reason logged once) when it cannot be had. Never compiles."""
    if os.environ.get("TANDEM_CPU_KERNELS", "1") == "0":
        log.info("C++ CPU kernels off (TANDEM_CPU_KERNELS=0); using the torch references")
        return None
    try:
        directory = artifact_directory()
    except OSError as exc:  # no source to key on: an install without tandem_kernels/csrc
        log.warning("C++ CPU kernels unavailable (%s); using the torch references", _first_line(exc))
        return None
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        log.warning("%s; using the torch references", _why_not_built(directory))
        return None
    except (OSError, ValueError) as exc:
        log.warning("C++ CPU kernels unreadable (%s); using the torch references", _first_line(exc))
        return None
    import torch  # noqa: F401 - the module links torch's libraries, which its import loads first

    try:
        module = _load(directory / manifest["file"], manifest["module"], LOAD_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - a stale or foreign artifact, a hung file system: the references serve
        log.warning("C++ CPU kernels in %s did not load (%s); using the torch references", directory, _first_line(exc))
        return None
    if not manifest.get("openmp", True):
        log.warning("CPU kernels built without OpenMP (%s): they run on one thread", manifest.get("why", "?"))
    return module


def _why_not_built(directory: Path) -> str:
    try:
        reason = _failure_note(directory).read_text().strip()
    except OSError:
        return NOT_BUILT
    return f"C++ CPU kernels could not be built here ({reason}; `python -m tandem_kernels.cpu_extension` tries again)"


def _load(path: Path, name: str, timeout_s: float):
    """Import the built module from its file, giving up after timeout_s (the loading thread is left behind)."""
    outcome: dict = {}

    def run():
        try:
            loader = importlib.machinery.ExtensionFileLoader(name, str(path))
            spec = importlib.util.spec_from_file_location(name, path, loader=loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            outcome["module"] = module
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="tandem-cpu-kernels-load", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"loading {path.name} took over {timeout_s:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["module"]


def build() -> Path | None:
    """Compile the kernels unless this key's artifact exists, and publish them: the artifact's directory, or None.

    Each variant compiles through torch's extension loader in a directory private to this process, so its
    lock is no one else's; the finished module and its manifest then move to the key's directory in one
    rename. Two builds at once both compile, the first to publish wins and the other drops its copy. Where
    no variant builds, the first failure is noted next to where the artifact would be, for `extension()`
    to say why.
    """
    target = artifact_directory()
    if (target / MANIFEST).is_file():
        return target
    root = target.parent
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(root)
    work = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=root))
    try:
        from torch.utils.cpp_extension import load

        failure = None
        for i, (cflags, ldflags) in enumerate(VARIANTS):
            build_directory = work / f"variant{i}"
            build_directory.mkdir()
            try:
                module = load(
                    NAME,
                    [str(SOURCE)],
                    extra_cflags=list(cflags),  # copies: torch appends its own to the lists it is given
                    extra_ldflags=list(ldflags),
                    build_directory=str(build_directory),
                )
            except Exception as exc:  # noqa: BLE001 - no compiler, no OpenMP, a failed build: try the next
                failure = failure or exc
                continue
            built = Path(module.__file__)
            staged = work / "artifact"
            staged.mkdir()
            shutil.copy2(built, staged / built.name)
            manifest = {
                "module": module.__name__,  # torch names a second build in one process NAME_v1: its init symbol
                "file": built.name,
                "openmp": "-fopenmp" in ldflags,
                "why": _first_line(failure) if failure else "no variant with -fopenmp",
                "cflags": cflags,
                "ldflags": ldflags,
                "source_sha256": hashlib.sha256(SOURCE.read_bytes()).hexdigest(),
                "torch": _torch_version(),
                "python": sys.implementation.cache_tag,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (staged / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
            _publish(staged, target)
            _failure_note(target).unlink(missing_ok=True)
            return target
        note = work / "failed"
        note.write_text(_first_line(failure) + "\n")
        os.replace(note, _failure_note(target))
        log.warning("CPU kernels unavailable (%s); using the torch references", _first_line(failure))
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _publish(staged: Path, target: Path) -> None:
    try:
        os.rename(staged, target)  # atomic: the key's directory is absent or complete
    except OSError:
        if not (target / MANIFEST).is_file():  # not another build's finished artifact: a real failure
            if target.is_dir() and not any(target.iterdir()):
                target.rmdir()
                os.rename(staged, target)
                return
            raise


def remove_stale_builds(root: Path) -> None:
    """Remove what killed builds left: temporary directories of dead processes or older than STALE_TEMP_S, and
    the build directories of the first layout (torch's, used in place, with its lock: 16 hex digits)."""
    now = time.time()
    for entry in root.iterdir():
        name = entry.name
        if name.startswith(TEMP_PREFIX):
            pid = name[len(TEMP_PREFIX) :].split("-", 1)[0]
            try:
                stale = not _alive(int(pid)) or now - entry.stat().st_mtime > STALE_TEMP_S
            except (ValueError, OSError):
                stale = True
        else:
            old = len(name) == 16 and all(c in "0123456789abcdef" for c in name)
            stale = old and (entry / "build.ninja").is_file()
        if stale:
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid() or sys.platform == "win32":  # there, os.kill(pid, 0) is a Ctrl-C: go by age alone
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True


def _failure_note(target: Path) -> Path:
    return target.with_name(target.name + ".failed")


def _first_line(exc: BaseException | None) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def usable_for(*tensors: torch.Tensor):
    """The compiled module where it may run on these tensors, else None (the caller runs the torch reference).

    fp32 CPU tensors only, and never while torch traces, exports or compiles the model (the ONNX export
    must see the references' ops) or records autograd (the C++ functions have no backward).
    """
    import torch  # here, not at the top: `python -m tandem_kernels.cpu_extension` need not import it

    if not all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors):
        return None
    if torch.is_grad_enabled() or torch.jit.is_tracing() or torch.compiler.is_compiling():
        return None
    if torch.onnx.is_in_onnx_export():
        return None
    return extension()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    built = artifact_directory()
    if (built / MANIFEST).is_file():  # the usual case, `make up` and `make test` after the first: torch not imported
        print(f"tandem CPU kernels: built ({built})")
    else:
        built = build()
        ok = built is not None and extension() is not None
        print("tandem CPU kernels:", f"built ({built})" if ok else "unavailable (torch references in use)")
