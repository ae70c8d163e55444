"""What the command groups share: model references, logging, errors on stderr."""

import dataclasses
import logging
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer


def _resolve(reference: str, only: tuple[str, ...] | None = None) -> Path:
    """A checkpoint directory, or an s3:// reference fetched through the model store's tiers."""
    from tandem.model_store import ModelRef, ModelStore, StoreError

    try:
        path = ModelStore.from_env().resolve(reference, only)  # the store's locks live as long as the process
    except StoreError as exc:
        raise typer.BadParameter(str(exc)) from exc
    if (ref := ModelRef.parse(reference)) is not None:
        _NAMES[path] = ref.prefix.rsplit("/", 1)[-1]
    return path


# A model fetched from s3:// by the name its reference gives it: the folder it is cached in is named by its digest
# (and a gateway's, which fetches the tokenizer alone, by the files too), so the gateway and its workers served
# different ids and no request was ever routed (a review of the manifests).
_NAMES: dict[Path, str] = {}


def model_name(model_dir: Path, given: str | None = None) -> str | None:
    """The model id a command was given, else the name of the s3:// reference its model came from (None: the
    folder's name, as serving.checkpoint.model_id_for reads it)."""
    return given or _NAMES.get(Path(model_dir))


def _resolve_model(value: str) -> Path:  # typer callbacks take the value alone
    return _resolve(value)


def _resolve_tokenizer(value: str) -> Path:
    from tandem.model_store import TOKENIZER_FILES

    return _resolve(value, TOKENIZER_FILES)


MODEL_HELP = "checkpoint directory, or s3://bucket/path/model[@sha256:DIGEST] (fetched and cached; docs/operations.md)"
ModelDir = Annotated[str, typer.Option("--model", help=MODEL_HELP, callback=_resolve_model)]
TokenizerDir = Annotated[
    str, typer.Option("--model", help=f"{MODEL_HELP}; only its tokenizer is used", callback=_resolve_tokenizer)
]
GatewayModelDir = Annotated[  # the gateway's settings are TANDEM_* variables, its model's too (docs/operations.md)
    str,
    typer.Option(
        "--model",
        envvar="TANDEM_MODEL_DIR",
        help=f"{MODEL_HELP}; only its tokenizer is used",
        callback=_resolve_tokenizer,
    ),
]
DEFAULT_CACHE = Path.home() / ".cache" / "tandem"


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def setup_logging(level: str) -> None:
    if level.lower() not in LOG_LEVELS:
        fail(f"--log-level {level!r}: one of {', '.join(LOG_LEVELS)}", 2)
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def fail(message: object, code: int = 1, cause: BaseException | None = None) -> NoReturn:
    """`error: message` on stderr, and the exit code (1: the input is wrong or unusable; 2: a bad option)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code) from cause


def settings_error(exc) -> str:
    """A pydantic-settings ValidationError in the variables' own names, one line each: `TANDEM_PORT: Input should
    be less than or equal to 65535 (got '99999')`, not a field name, a type tag and a documentation link."""
    lines = []
    for error in exc.errors():
        where = "TANDEM_" + str(error["loc"][0]).upper() if error["loc"] else ""
        message = error["msg"].removeprefix("Value error, ")
        shown = where and isinstance(error.get("input"), str | int | float) and not _secret(where)
        got = f" (got {error['input']!r})" if shown else ""
        lines.append(f"{where}: {message}{got}" if where else message)
    return "\n".join(lines)


def _secret(variable: str) -> bool:
    """A variable whose value is a secret (a token, a key): never printed back, even when it is refused (a log keeps
    what a pod prints; a review)."""
    return any(word in variable for word in ("TOKEN", "KEY", "SECRET", "PASSWORD"))


def default(config_class: type, field: str):
    """A config class's default for `field`, so a command's option never repeats it."""
    return next(f.default for f in dataclasses.fields(config_class) if f.name == field)
