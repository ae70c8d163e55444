"""The one check every file name read from a manifest passes (model store entries, edge exports)."""

from pathlib import PurePosixPath, PureWindowsPath


def unsafe_name(name: object) -> str | None:
    """Why `name` is not a normalized relative POSIX path that stays in its folder by its spelling (no absolute
    path, no `..`, no backslash or drive letter, no NUL, not empty), or None when it is one. Symlinks already in
    the folder are the caller's to check, where the name meets the folder."""
    if not isinstance(name, str) or not name:
        return "an empty name" if name == "" else "not a string"
    if "\0" in name:
        return "a NUL byte in it"
    if "\\" in name or PureWindowsPath(name).drive:
        return "a Windows path (backslash or drive); manifests use relative paths with /"
    if PurePosixPath(name).is_absolute():
        return "an absolute path"
    if ".." in PurePosixPath(name).parts:
        return "a .. component"
    if name == "." or PurePosixPath(name).as_posix() != name:
        return "not a normalized relative path"
    return None
