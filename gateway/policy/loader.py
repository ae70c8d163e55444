"""Read and validate a policy file; every error names the file and the field."""

from pathlib import Path

import yaml
from pydantic import ValidationError

from gateway.policy.schema import Policy


class PolicyError(ValueError):
    """The policy file cannot be used; the message says where and why."""


def load_policy(path: Path) -> Policy:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise PolicyError(f"{path}: {where}not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(raw, dict):
        raise PolicyError(f"{path}: the policy must be a YAML mapping with version, pools and rules")
    try:
        return Policy.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors())
        raise PolicyError(f"{path}: {problems}") from exc
