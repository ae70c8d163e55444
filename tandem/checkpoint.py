"""What every process needs to know about a checkpoint directory besides its weights."""

from pathlib import Path

from tokenizers import Tokenizer


def model_id_for(checkpoint_dir: Path, override: str | None = None) -> str:
    """The id clients name in `model`: the override, else the directory's name."""
    return override or Path(checkpoint_dir).resolve().name


def load_tokenizer(checkpoint_dir: Path) -> Tokenizer:
    path = Path(checkpoint_dir) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint_dir}: no tokenizer.json")
    return Tokenizer.from_file(str(path))
