"""What every process needs to know about a checkpoint directory besides its weights."""

import math
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

from modeling.model_config import CheckpointError, read_json_object
from serving.engine_api import MIN_REPETITION_PENALTY, MIN_TEMPERATURE


def model_id_for(checkpoint_dir: Path, override: str | None = None) -> str:
    """The id clients name in `model`: the override, else the directory's name."""
    return override or Path(checkpoint_dir).resolve().name


def load_tokenizer(checkpoint_dir: Path) -> Tokenizer:
    path = Path(checkpoint_dir) / "tokenizer.json"
    if not path.is_file():
        raise CheckpointError(f"{checkpoint_dir}: no tokenizer.json")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - the Rust library raises plain Exceptions for a file it cannot read
        raise CheckpointError(f"{path}: not a tokenizer this version of `tokenizers` reads ({exc})") from None


SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
# What a request may set (serving/openai/schemas.py), so a default is one a request could have sent.
_IN_RANGE = {
    "temperature": lambda v: v == 0 or MIN_TEMPERATURE <= v <= 2,
    "top_p": lambda v: 0 < v <= 1,
    "top_k": lambda v: v >= 0 and float(v).is_integer(),
    "min_p": lambda v: 0 <= v <= 1,
    "repetition_penalty": lambda v: MIN_REPETITION_PENALTY <= v <= 10,
}
_RANGES = {
    "temperature": f"0, or {MIN_TEMPERATURE} to 2",
    "top_p": "above 0, at most 1",
    "top_k": "a whole number, 0 or -1 for off",
    "min_p": "0 to 1",
    "repetition_penalty": f"{MIN_REPETITION_PENALTY} to 10",
}
_OPENAI_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}


@dataclass(frozen=True)
class GenerationDefaults:
    """The sampling a request gets for the fields it does not set: the checkpoint's generation_config.json
    (temperature, top_p, top_k, min_p, repetition_penalty, where the file has them, as vLLM reads it; an explicit
    `do_sample: false` means greedy, as in HF's generate), else OpenAI's defaults."""

    values: tuple[tuple[str, float], ...] = tuple(_OPENAI_DEFAULTS.items())
    source: str = "OpenAI's defaults"

    @classmethod
    def read(cls, checkpoint_dir: Path) -> "GenerationDefaults":
        path = Path(checkpoint_dir) / "generation_config.json"
        if not path.is_file():
            return cls()
        config = read_json_object(path)
        values = dict(_OPENAI_DEFAULTS)
        for name in SAMPLING_FIELDS:
            value = config.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
                raise ValueError(f"{path}: {name} is {value!r}, not a number")
            if name == "top_k" and value == -1:
                value = 0  # vLLM's "off" (HF's is 0)
            if not _IN_RANGE[name](value):
                raise ValueError(f"{path}: {name} {value!r} is out of range ({_RANGES[name]})")
            values[name] = type(_OPENAI_DEFAULTS[name])(value)
        if config.get("do_sample") is False:
            values["temperature"] = 0.0
        return cls(tuple(values.items()), str(path))

    def resolve(self, request: dict[str, float], fields_set: set[str] | frozenset[str]) -> dict[str, float]:
        """Each sampling field: the request's where it set it, else this default."""
        return {name: request[name] if name in fields_set else default for name, default in self.values}
