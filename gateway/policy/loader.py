"""Read and validate a policy file; every error names the file, the line and the field."""

from pathlib import Path

import yaml
from pydantic import ValidationError

from gateway.policy.schema import Policy, PolicyFieldError, plain_loc


class PolicyError(ValueError):
    """The policy file cannot be used; the message says where and why."""


def load_policy(path: Path) -> Policy:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read: {exc.strerror}") from exc
    return parse_policy(text, str(path))


def parse_policy(text: str, source: str) -> Policy:
    try:
        raw = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        column = f" (column {mark.column + 1})" if mark else ""
        raise PolicyError(f"{source}{where}: not valid YAML{column}: {getattr(exc, 'problem', exc)}") from exc
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: the policy must be a YAML mapping with version, pools and rules")
    try:
        return Policy.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            cause = (error.get("ctx") or {}).get("error")
            loc = plain_loc(tuple(error["loc"])) + (cause.loc if isinstance(cause, PolicyFieldError) else ())
            message = str(cause) if isinstance(cause, PolicyFieldError) else error["msg"]
            line = _line_of(root, loc)
            field = ".".join(str(p) for p in loc) or "(top level)"
            problems.append(f"{source}{f':{line}' if line else ''}: {field}: {message}")
        raise PolicyError("\n".join(problems)) from exc


def _line_of(node: yaml.Node | None, loc: tuple) -> int | None:
    """1-based line of the deepest YAML node on the path `loc` that exists."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == str(part)), None)
            if node is None:  # e.g. a missing field: point at its parent
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return line
        line = node.start_mark.line + 1
    return line
