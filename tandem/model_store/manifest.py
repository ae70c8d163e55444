"""A model's manifest: every file's path, size and SHA-256; its digest pins the model."""

import hashlib
import json
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tandem.model_store.reference import HASH_CHUNK, StoreError, checked_digest, checked_name


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, with /
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    files: tuple[FileEntry, ...]

    def to_json(self) -> bytes:
        """Canonical bytes: the digest is their SHA-256, so the same files always give the same digest."""
        body = {"format": 1, "files": [vars(f) for f in sorted(self.files, key=lambda f: f.path)]}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.to_json()).hexdigest()

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @classmethod
    def from_json(cls, data: bytes, where: str) -> "Manifest":
        try:
            body = json.loads(data)
            if body.get("format") != 1:
                raise StoreError(f"{where}: manifest format {body.get('format')!r}; this Tandem reads format 1")
            files = [(f["path"], int(f["size"]), f["sha256"]) for f in body["files"]]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"{where}: not a Tandem model manifest ({exc})") from exc
        return cls(
            tuple(
                FileEntry(checked_name(path, where), size, checked_digest(sha256, f"{where}: the sha256 of {path!r}"))
                for path, size, sha256 in files
            )
        )

    @classmethod
    def of_directory(cls, directory: Path) -> "Manifest":
        files = [p for p in sorted(directory.rglob("*")) if p.is_file() and not _hidden(p.relative_to(directory))]
        if not files:
            raise StoreError(f"{directory}: no files to push")
        with ThreadPoolExecutor(min(8, len(files))) as pool:
            hashes = list(pool.map(file_sha256, files))
        return cls(
            tuple(
                FileEntry(p.relative_to(directory).as_posix(), p.stat().st_size, h)
                for p, h in zip(files, hashes, strict=True)
            )
        )

    def only(self, names: Iterable[str]) -> "Manifest":
        wanted = set(names)
        return Manifest(tuple(f for f in self.files if f.path in wanted))


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
