"""A checkpoint's chat template, rendered as transformers' `apply_chat_template` renders it, without transformers.

What HF's renderer (transformers/utils/chat_template_utils.py) gives a template, this gives it too:
- a sandboxed jinja2 environment (ImmutableSandboxedEnvironment) with trim_blocks and lstrip_blocks, and the
  loop controls `{% break %}` and `{% continue %}`;
- `{% generation %}...{% endgeneration %}`, which renders its body unchanged (HF also notes where the body falls,
  for training masks; serving never needs them);
- `tojson` that keeps non-ASCII text, key order and `<>&'` as they are, and takes ensure_ascii, indent, separators
  and sort_keys (jinja2's own sorts keys, escapes all of these, and takes only indent);
- `raise_exception(message)`, `strftime_now(format)` (local time), and a `dict` and `namespace` that give a
  template no way to the dict type itself or to underscore names;
- the variables: messages (keys whose value is None dropped, a message's reasoning under every name templates read
  it by), tools as given, documents=None, add_generation_prompt, the special tokens the checkpoint sets, and the
  caller's keyword arguments over them;
- the template: chat_template.jinja and additional_chat_templates/*.jinja where the checkpoint has them, else
  tokenizer_config.json's; of named templates, "tool_use" when tools are given and there is one, else "default".

Left out: continue_final_message, return_assistant_tokens_mask, documents, tools given as Python functions,
sanitize_control_tokens, a tokenizer class's own default special tokens, and special_tokens_map.json (legacy; HF
reads it only when tokenizer_config.json lists no added tokens).
"""

import functools
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Template, TemplateError, nodes
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from modeling.model_config import CheckpointError, read_json_object

# The tokens apply_chat_template passes a template by name (tokenizer.special_tokens_map), where they are set.
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# The names a message's reasoning comes under; templates read the first (and gpt-oss's, "thinking").
_REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


class _GenerationTag(Extension):
    """`{% generation %}body{% endgeneration %}`: the body, as rendered."""

    tags = {"generation"}

    def parse(self, parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        # A call block, as HF's: the body gets a scope of its own, so a `set` inside it stays inside.
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller) -> str:
        return caller()


class _Namespace(Namespace):
    """jinja2's namespace(), refusing underscore names (no way to CPython's dunder attributes)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # no named `self`: namespace(self=1) is a template's right
        self, attrs = args[0], dict(*args[1:], **kwargs)
        for name in attrs:
            _check_name(name)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _check_name(name)
        super().__setitem__(name, value)


def _check_name(name: Any) -> None:
    if isinstance(name, str) and name.startswith("_"):
        raise SecurityError(f"a chat template may not store {name!r} on a namespace: names starting with _ are refused")


class _DictConstructor:
    """dict(...) and dict.fromkeys(...) for templates, without handing them the type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


def _tojson(value: Any, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str):
    raise TemplateError(message)


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


@functools.cache
def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(
        raise_exception=_raise_exception, strftime_now=_strftime_now, dict=_DictConstructor(), namespace=_Namespace
    )
    return env


def compile_template(source: str) -> Template:
    """Raises jinja2.TemplateSyntaxError for a template HF could not compile either."""
    return _environment().from_string(source)


def normalized_messages(messages: list[dict]) -> list[dict]:
    """Messages as HF hands them to a template: keys whose value is None dropped (a template tests for a key, and
    would write "None"), and a message's reasoning under "reasoning_content" and "thinking" both."""
    out = []
    for message in messages:
        message = {key: value for key, value in message.items() if value is not None}
        reasoning = next((message[key] for key in _REASONING_KEYS if key in message), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


def special_tokens(tokenizer_config: dict) -> dict[str, str]:
    """The special tokens tokenizer_config.json sets, by name, as text (a token may be written as an object)."""
    out = {}
    for name in SPECIAL_TOKEN_NAMES:
        value = tokenizer_config.get(name)
        text = value.get("content") if isinstance(value, dict) else value
        if text is not None:
            out[name] = str(text)
    return out


def template_sources(checkpoint_dir: Path, tokenizer_config: dict) -> dict[str, str]:
    """name -> template source. Template files (what save_pretrained writes now) replace the config's entry."""
    files = {}
    if (checkpoint_dir / "chat_template.jinja").is_file():
        files["default"] = (checkpoint_dir / "chat_template.jinja").read_text(encoding="utf-8")
    for path in sorted((checkpoint_dir / "additional_chat_templates").glob("*.jinja")):
        files[path.name.removesuffix(".jinja")] = path.read_text(encoding="utf-8")
    if files:
        return files
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):  # how a config keeps named templates
        return {entry["name"]: entry["template"] for entry in template}
    return {"default": template} if template else {}


class ChatTemplate:
    """A checkpoint's chat templates, compiled, and the special tokens they are given."""

    def __init__(self, sources: dict[str, str], special: dict[str, str]) -> None:
        self.sources = sources
        self.special_tokens = special
        self._compiled = {name: compile_template(source) for name, source in sources.items()}
        # OpenAI's `developer` role is its `system` role for newer models. A template that never names it (most:
        # Qwen's skips a role it does not know, Mistral's raises, Llama's writes a header the model never saw) gets
        # the message as `system`; one that names it (gpt-oss's) reads it as it is.
        self._knows_developer = {name: "developer" in source for name, source in sources.items()}

    @classmethod
    def read(cls, checkpoint_dir: Path) -> "ChatTemplate":
        """CheckpointError naming the file where tokenizer_config.json or a template cannot be read."""
        checkpoint_dir = Path(checkpoint_dir)
        config = read_json_object(checkpoint_dir / "tokenizer_config.json")
        try:
            sources = template_sources(checkpoint_dir, config)
        except (OSError, UnicodeDecodeError, LookupError, TypeError) as exc:
            raise CheckpointError(f"{checkpoint_dir}: a chat template cannot be read ({exc})") from None
        if not all(isinstance(source, str) for source in sources.values()):
            raise CheckpointError(f"{checkpoint_dir}/tokenizer_config.json: chat_template is no text")
        try:
            return cls(sources, special_tokens(config))
        except TemplateError as exc:
            raise CheckpointError(f"{checkpoint_dir}: the chat template is not valid Jinja ({exc})") from None

    def name_for(self, tools: list[dict] | None) -> str | None:
        """The template apply_chat_template picks; None where it would find none."""
        if tools is not None and "tool_use" in self.sources:
            return "tool_use"
        return "default" if "default" in self.sources else None

    def source(self, tools: list[dict] | None) -> str | None:
        name = self.name_for(tools)
        return None if name is None else self.sources[name]

    def render(
        self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = True, **kwargs: Any
    ) -> str:
        """apply_chat_template(messages, tools=tools, add_generation_prompt=..., tokenize=False, **kwargs)'s text.
        Raises jinja2.TemplateError where the template rejects the input, LookupError where there is no template."""
        name = self.name_for(tools)
        if name is None:
            raise LookupError(f"no chat template to render (templates: {sorted(self.sources) or 'none'})")
        if not self._knows_developer[name]:
            messages = [{**m, "role": "system"} if m.get("role") == "developer" else m for m in messages]
        return self._compiled[name].render(
            messages=normalized_messages(messages),
            tools=tools,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **(self.special_tokens | kwargs),
        )
