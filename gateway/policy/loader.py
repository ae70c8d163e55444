"""Read and validate a policy file; every error names the file, the line and the field."""

import math
import os
import re
import stat
from pathlib import Path

import yaml
from pydantic import ValidationError

from gateway.policy.schema import Policy, PolicyFieldError, plain_loc, shown


class PolicyError(ValueError):
    """The policy file cannot be used; the message says where and why."""


MAX_POLICY_BYTES = 1024 * 1024  # thousands of rules; a larger file is a mistake (and seconds of parsing)
MAX_DIGITS = 100  # no setting takes a larger number; Python refuses to read one of over 4300 digits at all
_DECIMAL = re.compile(r"[-+]?(0|[1-9][0-9_]*)")  # `250_000` is read as written: 250000 (a review)
_FLOAT = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # libyaml where it is installed: ~10x faster
    def construct_object(self, node: yaml.Node, deep: bool = False) -> object:
        """PyYAML's constructors raise plain exceptions on some values (`!!timestamp 1`): as a YAMLError with the
        value's place, like every other YAML error."""
        try:
            return super().construct_object(node, deep)
        except (yaml.YAMLError, RecursionError):
            raise
        except Exception as exc:  # noqa: BLE001 - any constructor's failure is the file's fault
            tag = node.tag.removeprefix("tag:yaml.org,2002:")
            problem = f"cannot read {shown(node.value)} as !!{tag} ({exc})"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from exc


def load_policy(path: Path) -> Policy:
    path = Path(path)
    return parse_policy(read_policy_text(path), str(path))


def read_policy_text(
    path: Path, what: str = "a policy is a YAML file of a few hundred lines", most: int = MAX_POLICY_BYTES
) -> str:
    """The file's text, UTF-8 (a BOM allowed), at most `most` bytes; PolicyError saying why not, and `what` the file
    should be."""
    try:
        # Not blocking in open(): a FIFO (or a device) at the path waited there for a writer, and the gateway with it
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise PolicyError(f"{path}: not a regular file; {what}")
            data = file.read(most + 1)
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read: {exc.strerror}") from exc
    if len(data) > most:
        raise PolicyError(f"{path}: larger than {most // 1024} KiB; {what}")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise PolicyError(f"{path}: UTF-16 text; save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PolicyError(f"{path}:{line}: not UTF-8 (byte {data[exc.start]:#04x}); save it as UTF-8") from None


def parse_yaml(text: str, source: str) -> tuple[yaml.Node | None, object]:
    """The YAML `text` (from `source`, for the messages) as its node tree and its value, read as written: a key given
    twice, a number or a truth YAML would read otherwise, is a PolicyError naming the line (the tenants file is read
    so too: a tenant pasted twice lost its first keys and limits, silently; a review)."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        _check_nodes(root, source)
        _check_size(root, source)
        return root, (loader.construct_document(root) if root is not None else None)
    except PolicyError:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        column = f" (column {mark.column + 1})" if mark else ""
        raise PolicyError(f"{source}{where}: not valid YAML{column}: {getattr(exc, 'problem', exc)}") from exc
    except RecursionError:
        raise PolicyError(f"{source}: nested too deeply to be read") from None
    except Exception as exc:  # noqa: BLE001 - whatever the file holds, the answer is a PolicyError
        raise PolicyError(f"{source}: not valid YAML: {exc}") from exc
    finally:
        loader.dispose()


def parse_policy(text: str, source: str) -> Policy:
    """The policy `text` (from `source`, for the messages) says; PolicyError naming the line and field at fault."""
    root, raw = parse_yaml(text, source)
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: the policy must be a YAML mapping with version, pools and rules")
    try:
        policy = Policy.model_validate(raw, strict=True)  # strict: the plugins' settings too (schema._Strict)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            cause = (error.get("ctx") or {}).get("error")
            loc = plain_loc(tuple(error["loc"])) + (cause.loc if isinstance(cause, PolicyFieldError) else ())
            message = str(cause) if isinstance(cause, PolicyFieldError) else _message(error)
            line = line_of(root, loc)
            field = ".".join(str(p) for p in loc) or "(top level)"
            problems.append(f"{source}{f':{line}' if line else ''}: {field}: {message}")
        if len(problems) > MAX_PROBLEMS:
            problems[MAX_PROBLEMS:] = [f"{source}: and {len(problems) - MAX_PROBLEMS:,} more problems"]
        raise PolicyError("\n".join(problems)) from exc
    except Exception as exc:  # noqa: BLE001 - a validator's own failure on an odd value is still the file's
        raise PolicyError(f"{source}: not a valid policy: {type(exc).__name__}: {exc}") from exc
    if loc := _not_finite(policy.model_dump(), ()):  # 1.0e+400 reads as infinity: NaN scores
        line = line_of(root, loc)
        field = ".".join(str(p) for p in loc)
        raise PolicyError(f"{source}{f':{line}' if line else ''}: {field}: not a finite number")
    return policy


_WRITE = {"bool_type": "true or false", "int_type": "a whole number", "float_type": "a number"}


def _message(error: dict) -> str:
    """pydantic's message, or for a value of the wrong type what to write: strict mode's "Input should be a valid
    boolean" says neither that the value was quoted nor what is accepted."""
    if error["type"] not in _WRITE:
        return error["msg"]
    value, expected = error["input"], _WRITE[error["type"]]
    if isinstance(value, str) and _FLOAT.fullmatch(value) and _reads_as_text(value):
        return f"write {expected}: YAML 1.1 reads {value} as text (write 1.0e-3, with a point and a signed exponent)"
    return f"write {expected}, without quotes (got {shown(value)})"


def _reads_as_text(value: str) -> bool:
    """Whether YAML 1.1 reads `value`, written without quotes, as text (1e-3 and 1.5e3 are, to PyYAML)."""
    return yaml.resolver.Resolver().resolve(yaml.ScalarNode, value, (True, False)) == "tag:yaml.org,2002:str"


def _not_finite(value, loc: tuple) -> tuple | None:
    """Where in a dumped policy a float is infinite or NaN, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else loc
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        if (found := _not_finite(child, (*loc, key))) is not None:
            return found
    return None


# The values a file may stand for, each alias counted every time it is used: a policy of thousands of rules holds
# fewer. A billion laughs (a kilobyte of aliases of aliases) stood for 43 million, which validation walked and an
# error message wrote out whole (34 MB into one log line and /readyz, the gateway's every request held for seconds
# as the text was made; a review).
MAX_VALUES = 200_000
MAX_PROBLEMS = 20  # the problems listed of a file that has more (a 680 KB list of numbers: 340,000 lines)


def _check_size(root: yaml.Node | None, source: str) -> None:
    """PolicyError where the file stands for more than MAX_VALUES values once its aliases are expanded."""
    sizes: dict[int, int] = {}
    stack = [(root, False)] if root is not None else []
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = (
            [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode)
            else node.value if isinstance(node, yaml.SequenceNode) else []
        )  # fmt: skip
        if children_done or not children:
            sizes[id(node)] = size = 1 + sum(sizes[id(n)] for n in children)
            if size > MAX_VALUES:
                raise PolicyError(
                    f"{source}:{node.start_mark.line + 1}: this stands for over {MAX_VALUES:,} values (each YAML alias "
                    "counted where it is used); a policy of thousands of rules holds fewer"
                )
            continue
        stack.append((node, True))
        stack += [(n, False) for n in children if id(n) not in sizes]


def _check_nodes(root: yaml.Node | None, source: str) -> None:
    """What YAML would read otherwise than written, refused where it is: a key given twice in one mapping (the last
    would win silently), and YAML 1.1's other spellings of numbers and truths (01000 is 512, 1:30 is 90, yes is
    true, .nan and .inf)."""
    stack, seen_nodes = ([root] if root is not None else []), set()
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:  # an alias: its node is checked once (a billion laughs stays a few nodes)
            continue
        seen_nodes.add(id(node))
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":  # `<<:` may repeat
                    if key.value in seen:
                        where = key.start_mark.line + 1
                        raise PolicyError(
                            f"{source}:{where}: key {key.value!r} is given twice (line {seen[key.value]})"
                        )
                    seen[key.value] = key.start_mark.line + 1
                stack += (key, value)
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
        elif node.tag == "tag:yaml.org,2002:int" and not _DECIMAL.fullmatch(node.value):
            raise PolicyError(f"{source}:{line}: write {node.value!r} as a decimal number (YAML reads it otherwise)")
        elif node.tag == "tag:yaml.org,2002:int" and len(node.value.lstrip("+-")) > MAX_DIGITS:
            digits = len(node.value.lstrip("+-"))
            raise PolicyError(
                f"{source}:{line}: a number of {digits} digits; no setting takes one of over {MAX_DIGITS}"
            )
        elif node.tag == "tag:yaml.org,2002:float" and not _FLOAT.fullmatch(node.value):  # past range: _not_finite
            raise PolicyError(f"{source}:{line}: {node.value!r} is not a finite decimal number")
        elif node.tag == "tag:yaml.org,2002:bool" and node.value not in ("true", "false"):
            raise PolicyError(f"{source}:{line}: write {node.value!r} as true or false (or quote it, for text)")


def line_of(node: yaml.Node | None, loc: tuple) -> int | None:
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
