"""Tokenize once, at the gateway: chat template rendering and encoding.

The template comes from the checkpoint's tokenizer_config.json and is
rendered the way Hugging Face's `apply_chat_template` renders it (a sandboxed
jinja2 environment, the special tokens as variables), so the ids equal HF's.
"""

import json
import os
from pathlib import Path
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from gateway.api import tools as tool_calls
from gateway.errors import BadRequest
from tandem.checkpoint import GenerationDefaults, load_tokenizer
from tandem.grammar import llg_tokenizer


def _raise_exception(message: str):
    raise TemplateError(message)


def _token_text(value: Any) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


class ChatTokenizer:
    def __init__(self, checkpoint_dir: Path) -> None:
        checkpoint_dir = Path(checkpoint_dir)
        self.tokenizer = load_tokenizer(checkpoint_dir)
        self.generation_defaults = GenerationDefaults.read(checkpoint_dir)  # for the sampling a request leaves unset
        config = json.loads((checkpoint_dir / "tokenizer_config.json").read_text())
        self.max_context_tokens = json.loads((checkpoint_dir / "config.json").read_text()).get(
            "max_position_embeddings", 2048
        )
        template = config.get("chat_template")
        if isinstance(template, list):  # newer HF configs keep named templates
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if template is None and (checkpoint_dir / "chat_template.jinja").is_file():  # what save_pretrained writes now
            template = (checkpoint_dir / "chat_template.jinja").read_text()
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise_exception
        self._template = env.from_string(template) if template else None
        self._reads_tools = bool(template and "tools" in template)
        # How this model writes a tool call: from its template, or TANDEM_TOOL_FORMAT (gateway/api/tools.py).
        self.tool_format = tool_calls.format_for(template, os.environ.get("TANDEM_TOOL_FORMAT"))
        self._special = {
            name: _token_text(config.get(name)) for name in ("bos_token", "eos_token", "pad_token", "unk_token")
        }

    def encode_chat(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The prompt's ids; `tools` as apply_chat_template passes them, or, for a template that never reads them,
        described in a system message of their own (first, before the caller's)."""
        if self._template is None:
            raise BadRequest("this model has no chat template; use /v1/completions")
        messages = tool_calls.template_messages(messages)
        if not self._reads_tools:
            messages = tool_calls.inline_calls(messages, self.tool_format)
            if tools:
                system = {"role": "system", "content": tool_calls.system_prompt(tools, self.tool_format)}
                messages = [system, *messages]
        try:
            text = self._template.render(
                messages=messages, tools=tools or None, add_generation_prompt=True, **self._special
            )
        except TemplateError as exc:
            raise BadRequest(f"the model's chat template rejected these messages: {exc}") from exc
        return self.encode(text)

    def token_bytes(self, token: int) -> bytes:
        """A token's own bytes (a piece of a multi-byte character is not U+FFFD, as `decode` makes it)."""
        return llg_tokenizer(self.tokenizer, ()).decode_bytes([token])

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids
