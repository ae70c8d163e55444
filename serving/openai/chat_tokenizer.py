"""Tokenize once, at the gateway: chat template rendering and encoding.

The template comes from the checkpoint (serving/openai/chat_template.py finds it) and
is rendered the way Hugging Face's `apply_chat_template` renders it (the same
jinja2 environment and variables; transformers is never imported), so the ids
equal HF's.
"""

import os
from pathlib import Path

from jinja2 import TemplateError

from modeling.model_config import CheckpointError, read_json_object, served_context
from serving.checkpoint import GenerationDefaults, load_tokenizer
from serving.grammar import llg_tokenizer
from serving.openai import tools as tool_calls
from serving.openai.chat_template import ChatTemplate
from serving.openai.errors import BadRequest


class ChatTokenizer:
    def __init__(self, checkpoint_dir: Path) -> None:
        """CheckpointError naming the file at fault where the folder's tokenizer, template or configs cannot be read
        (each was a traceback: in the gateway's start, after its port was bound; a review)."""
        checkpoint_dir = Path(checkpoint_dir)
        self.tokenizer = load_tokenizer(checkpoint_dir)
        try:
            self.generation_defaults = GenerationDefaults.read(checkpoint_dir)  # the sampling a request leaves unset
        except ValueError as exc:
            raise CheckpointError(str(exc)) from None
        self.max_context_tokens = served_context(read_json_object(checkpoint_dir / "config.json"))
        self.template = ChatTemplate.read(checkpoint_dir)
        # How this model writes a tool call: from the template a request with tools gets, or TANDEM_TOOL_FORMAT
        # (serving/openai/tools.py).
        self.tool_format = tool_calls.format_for(self.template.source(tools=[]), os.environ.get("TANDEM_TOOL_FORMAT"))
        # Each token's text and bytes on its own, once: log-probabilities name up to 21 tokens per token generated,
        # and decoding each was most of their cost on the event loop (bounded by the vocabulary).
        self._texts: dict[int, str] = {}
        self._bytes: dict[int, bytes] = {}
        self._unnamed_roles: frozenset[str] | None = None  # the roles whose `name` the template never writes

    @property
    def unnamed_roles(self) -> frozenset[str]:
        """The roles whose message `name` this template drops (many do: the demo's), found by
        rendering a message with a name and without: where both read alike, the name is written into the content
        instead (`Alice: …`), so OpenAI's `name` (participants of one role told apart) is honoured, not dropped."""
        if self._unnamed_roles is None:
            probes = {
                "system": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}],
                "user": [{"role": "user", "content": "x"}],
                "assistant": [{"role": "user", "content": "y"}, {"role": "assistant", "content": "x"}],
            }
            unnamed = set()
            for role, messages in probes.items():
                named = [m | {"name": "Q7zName"} if m["role"] == role else m for m in messages]
                try:
                    if "Q7zName" not in self.template.render(named, None, add_generation_prompt=True):
                        unnamed.add(role)
                except Exception:  # noqa: BLE001 - a template that refuses the probe: its names are as it says
                    pass
            self._unnamed_roles = frozenset(unnamed)
        return self._unnamed_roles

    def encode_chat(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The prompt's ids; `tools` as apply_chat_template passes them, or, for a template that never reads them,
        described in a system message of their own (first, before the caller's)."""
        source = self.template.source(tools)
        messages = tool_calls.template_messages(self._named(messages))
        if self.tool_format == "mistral":
            messages = tool_calls.mistral_ids(messages)
        if source is not None and "tools" not in source:
            messages = tool_calls.inline_calls(messages, self.tool_format)
            if tools:
                system = {"role": "system", "content": tool_calls.system_prompt(tools, self.tool_format)}
                messages = [system, *messages]
        return self.encode(self.render(messages, tools))

    def _named(self, messages: list[dict]) -> list[dict]:
        """Each message whose role's `name` the template drops, with the name before its content instead."""
        if not any("name" in m for m in messages) or not (unnamed := self.unnamed_roles):
            return messages
        out = []
        for m in messages:
            role = "system" if m["role"] == "developer" else m["role"]  # (as template_messages reads it)
            if m.get("name") and role in unnamed:
                name, m = m["name"], {k: v for k, v in m.items() if k != "name"}
                if m.get("content"):  # (a turn of calls alone keeps none: its calls are the assistant's)
                    m["content"] = f"{name}: {m['content']}"
            out.append(m)
        return out

    def render(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        """The prompt's text, as apply_chat_template(messages, tools=tools, add_generation_prompt=True,
        tokenize=False) renders it: the messages and tools as given."""
        if self.template.source(tools) is None:
            raise BadRequest("this model has no chat template; use /v1/completions")
        try:
            return self.template.render(messages, tools, add_generation_prompt=True)
        except TemplateError as exc:
            raise BadRequest(f"the model's chat template rejected these messages: {exc}") from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            # e.g. tojson of a value the template did not expect: a template's own error, on these messages
            raise BadRequest(
                f"the model's chat template failed on these messages ({type(exc).__name__}: {exc})"
            ) from exc

    def token_text(self, token: int) -> str:
        """A token's text on its own (a piece of a multi-byte character decodes to U+FFFD)."""
        text = self._texts.get(token)
        if text is None:
            text = self._texts[token] = self.tokenizer.decode([token])
        return text

    def token_bytes(self, token: int) -> bytes:
        """A token's own bytes (a piece of a multi-byte character is not U+FFFD, as `decode` makes it)."""
        raw = self._bytes.get(token)
        if raw is None:
            raw = llg_tokenizer(self.tokenizer, ()).decode_bytes([token])
            if b"\xff" not in raw and (spelt := _spelt_with_0xff(self.tokenizer, token)) is not None:
                raw = spelt  # llguidance drops the byte 0xFF (its mark of a special token)
            self._bytes[token] = raw
        return raw

    def encode(self, text: str) -> list[int]:
        # The same ids as encode(); without the character offsets no caller reads: about a quarter less time
        return self.tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids


def _byte_level_alphabet() -> dict[str, int]:
    """A byte-level BPE vocabulary's characters -> the bytes they stand for (GPT-2's table: the printable bytes
    as themselves, the others moved up to U+0100 and on)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    alphabet, moved = {chr(b): b for b in printable}, 0
    for b in range(256):
        if b not in printable:
            alphabet[chr(256 + moved)] = b
            moved += 1
    return alphabet


_BYTE_LEVEL = _byte_level_alphabet()


def _spelt_with_0xff(tokenizer, token: int) -> bytes | None:
    """The bytes of a token that holds the byte 0xFF, read off its vocabulary entry (`ÿ` in a byte-level BPE's,
    `<0xFF>` as a SentencePiece byte fallback); None for any other token."""
    piece = tokenizer.id_to_token(token) or ""
    if piece == "<0xFF>":
        return b"\xff"
    if "ÿ" in piece and type(tokenizer.decoder).__name__ == "ByteLevel" and all(c in _BYTE_LEVEL for c in piece):
        return bytes(_BYTE_LEVEL[c] for c in piece)
    return None
