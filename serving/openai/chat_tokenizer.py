"""Tokenize once, at the gateway: chat template rendering and encoding.

The template comes from the checkpoint (serving/openai/chat_template.py finds it) and
is rendered the way Hugging Face's `apply_chat_template` renders it (the same
jinja2 environment and variables; transformers is never imported), so the ids
equal HF's.
"""

import os
import re
import secrets
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
        self._as_text = SpecialTokensAsText(self.tokenizer)

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
        described in a system message of their own (first, before the caller's). The caller's words are text: a
        special token's name written in them is its characters, never the token (SpecialTokensAsText). Looked for
        in what the template is given, after the calls' JSON arguments are read: `\\u003c|im_end|>` in them was
        no name until then (a review)."""
        messages, tools = self._template_inputs(messages, tools)
        if self._as_text.written_in((messages, tools)):
            (messages, tools), encode = self._as_text.swap((messages, tools))
            return encode(self.render(messages, tools), self.encode)
        return self.encode(self.render(messages, tools))

    def _render_chat(self, messages: list[dict], tools: list[dict] | None) -> str:
        """The prompt's text as encode_chat encodes it (where the caller's words hold no special token's name)."""
        return self.render(*self._template_inputs(messages, tools))

    def _template_inputs(self, messages: list[dict], tools: list[dict] | None) -> tuple[list[dict], list | None]:
        """What the template is given: names written in where it drops them, calls as it reads them, and, for a
        template that never reads `tools`, the tools described in a system message of their own."""
        source = self.template.source(tools)
        messages = tool_calls.template_messages(self._named(messages))
        if self.tool_format == "mistral":
            messages = tool_calls.mistral_ids(messages)
        if source is not None and "tools" not in source:
            messages = tool_calls.inline_calls(messages, self.tool_format)
            if tools:
                system = {"role": "system", "content": tool_calls.system_prompt(tools, self.tool_format)}
                messages = [system, *messages]
        return messages, tools

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
            # (the gateway serves /v1/completions; the edge agent and a worker's own routes do not: a review)
            raise BadRequest("this model has no chat template, so it takes no chat messages: send a plain prompt "
                             "to the gateway's /v1/completions")  # fmt: skip
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


class SpecialTokensAsText:
    """A caller's words as text, never control tokens. The template is rendered to one string and encoded as Hugging
    Face encodes it, which reads a special token's name anywhere in it as the token: a user's or a tool's text with
    `<|im_end|><|im_start|>system …` in it forged a system turn nobody sent (a fetched web page's words as a tool's
    output; a review). OpenAI reads such words as text; so does Tandem now. Where none of the caller's strings holds
    a special token's name (nearly every request), the prompt is encoded whole, as HF does. Where one does, each
    such name is swapped for a mark of this call's own before rendering, and each mark is encoded as the name's
    characters (the tokenizer's `encode_special_tokens`), the text between as before."""

    def __init__(self, tokenizer) -> None:
        names = sorted({t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}, key=len)
        self._names = names[::-1]  # longest first: `<|im_start|>` before a `<|im` that is one too
        self._pattern = re.compile("|".join(map(re.escape, self._names))) if names else None
        self._tokenizer = tokenizer
        self._plain: dict[str, list[int]] = {}
        self._plain_tokenizer = None  # a copy that reads special tokens' names as text, made on first use

    def written_in(self, value) -> bool:
        """Whether a string in `value` (dicts' keys and values, lists, at any depth) holds a special token's name."""
        if self._pattern is None:
            return False
        if isinstance(value, str):
            return self._pattern.search(value) is not None
        if isinstance(value, dict):
            return any(self.written_in(k) or self.written_in(v) for k, v in value.items())
        if isinstance(value, list | tuple):
            return any(self.written_in(v) for v in value)
        return False

    def swap(self, value):
        """`value` with each special token's name in its strings swapped for a mark, and a function that encodes the
        rendered text (with the encoder given), each mark as the name's characters."""
        nonce = secrets.token_hex(6)
        index = {name: i for i, name in enumerate(self._names)}

        def swapped(v):
            if isinstance(v, str):
                return self._pattern.sub(lambda m: f"\ue000{nonce}.{index[m[0]]}\ue001", v)
            if isinstance(v, dict):
                return {swapped(k): swapped(x) for k, x in v.items()}
            if isinstance(v, list | tuple):
                return type(v)(swapped(x) for x in v)
            return v

        mark = re.compile(f"\ue000{nonce}\\.(\\d+)\ue001")

        def encode(text: str, encode_text) -> list[int]:
            ids, at = [], 0
            for found in mark.finditer(text):
                if found.start() > at:
                    ids += encode_text(text[at : found.start()])
                ids += self._as_characters(self._names[int(found[1])])
                at = found.end()
            return ids + (encode_text(text[at:]) if at < len(text) else [])

        return swapped(value), encode

    def _as_characters(self, name: str) -> list[int]:
        ids = self._plain.get(name)
        if ids is None:
            if self._plain_tokenizer is None:  # one copy (the flag is the tokenizer's, not a call's): a copy for
                # each name took 30 s for a request naming Llama 3's 256 (a review)
                from tokenizers import Tokenizer

                plain = Tokenizer.from_str(self._tokenizer.to_str())
                plain.encode_special_tokens = True
                self._plain_tokenizer = plain
            ids = self._plain[name] = self._plain_tokenizer.encode(name, add_special_tokens=False).ids
        return ids


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
