"""Regenerate proto/gen from proto/worker.proto: `python -m proto.regen`.

`--check` regenerates into a temporary folder and exits 1 if the checked-in
code differs, so CI catches a .proto edited without regenerating.
"""

import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

PROTO_DIR = Path(__file__).resolve().parent
GEN_DIR = PROTO_DIR / "gen"
GENERATED = ("worker_pb2.py", "worker_pb2.pyi", "worker_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(PROTO_DIR / "worker.proto"),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    # grpc_tools writes an absolute import; make it package-relative.
    grpc_file = out_dir / "worker_pb2_grpc.py"
    text = grpc_file.read_text().replace("import worker_pb2 as", "from . import worker_pb2 as")
    grpc_file.write_text(text)


def stale_files() -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        return [
            name
            for name in GENERATED
            if not (GEN_DIR / name).exists() or not filecmp.cmp(Path(tmp) / name, GEN_DIR / name, shallow=False)
        ]


def main() -> None:
    if "--check" in sys.argv:
        stale = stale_files()
        if stale:
            print(f"proto/gen is stale ({', '.join(stale)}): run `make proto`", file=sys.stderr)
            raise SystemExit(1)
        print("proto/gen is up to date")
        return
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        for name in GENERATED:
            shutil.copy(Path(tmp) / name, GEN_DIR / name)
    print(f"wrote {', '.join(GENERATED)} to {GEN_DIR}")


if __name__ == "__main__":
    main()
