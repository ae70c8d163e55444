"""OpenAI response shapes for chat and text completions, whole and streamed."""

import codecs
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from proto.gen import worker_pb2


def usage_dict(usage: worker_pb2.Usage) -> dict:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens},
    }


def finish_reason(worker_reason: str) -> str:
    return worker_reason if worker_reason in ("length", "tool_calls") else "stop"


@dataclass(frozen=True)
class ResponseShape:
    is_chat: bool
    response_id: str
    model: str
    created: int
    index: int = 0  # the choice this shape writes (n > 1: one shape per choice)
    # A stream whose last chunk carries the usage (stream_options.include_usage): every other chunk says
    # "usage": null, as OpenAI's do (a client reading chunk["usage"] found no key).
    streams_usage: bool = False

    @classmethod
    def new(cls, is_chat: bool, response_id: str, model: str, streams_usage: bool = False) -> "ResponseShape":
        return cls(is_chat, response_id, model, int(time.time()), streams_usage=streams_usage)

    def _envelope(self, streamed: bool) -> dict:
        kind = ("chat.completion.chunk" if streamed else "chat.completion") if self.is_chat else "text_completion"
        envelope = {"id": self.response_id, "object": kind, "created": self.created, "model": self.model}
        if streamed and self.streams_usage:
            envelope["usage"] = None
        return envelope

    def whole(
        self,
        text: str | None,
        reason: str,
        usage: worker_pb2.Usage,
        logprobs: dict | None = None,
        tool_calls=(),
        calls_finish: str = "tool_calls",
    ) -> dict:
        """`tool_calls`: serving.openai.tools.ToolCall, parsed from the answer (the reason is then `calls_finish`:
        ToolPlan.calls_finish)."""
        if self.is_chat:
            message = {"role": "assistant", "content": text, "refusal": None}
            if tool_calls:
                message["tool_calls"] = [call.as_openai() for call in tool_calls]
                reason = calls_finish if reason == "stop" else reason  # an answer cut by max_tokens says so
            choice = {"index": self.index, "message": message, "logprobs": logprobs}
        else:
            choice = {"index": self.index, "text": text, "logprobs": logprobs}
        choice["finish_reason"] = finish_reason(reason)
        return self._envelope(False) | {"choices": [choice], "usage": usage_dict(usage)}

    def opening(self, may_call: bool = False) -> str:
        """A streamed choice's first event. Chat: the role, with content "" as OpenAI's; without content where the
        answer may be tool calls, whose message's content is null (a client adding up the deltas got "")."""
        if not self.is_chat:
            return self.chunk(None)
        delta = {"role": "assistant"} if may_call else {"role": "assistant", "content": ""}
        return sse(self._envelope(True) | {"choices": [{"index": self.index, "delta": delta, "logprobs": None,
                                                         "finish_reason": None}]})  # fmt: skip

    def chunk(self, text: str | None, reason: str | None = None, logprobs: dict | None = None) -> str:
        if self.is_chat:
            delta = {"content": text} if text else {}
            choice = {"index": self.index, "delta": delta, "logprobs": logprobs}
        else:
            choice = {"index": self.index, "text": text or "", "logprobs": logprobs}
        choice["finish_reason"] = finish_reason(reason) if reason else None
        return sse(self._envelope(True) | {"choices": [choice]})

    def ending(self, worker_reason: str, held=None) -> list[str]:
        """The events that end a streamed choice: what `held` (serving.openai.tools.StreamedCalls) kept back, as text
        or as tool calls, then the finish reason (`held.calls_finish` when calls ended an answer that stopped by
        itself)."""
        events, reason = [], worker_reason
        if held is not None:
            rest, calls = held.finish(worker_reason)
            these = held.rest_logprobs(calls)
            if rest or these:
                events.append(self.chunk(rest, logprobs=these))
            if calls:
                events.append(self.tool_calls_chunk(calls))
                reason = held.calls_finish if reason == "stop" else reason
        return [*events, self.chunk(None, reason=reason)]

    def tool_calls_chunk(self, tool_calls) -> str:
        """Every parsed call as one delta each (index, id, name and the whole arguments), as OpenAI's clients
        assemble them."""
        calls = [call.as_openai(index=i) for i, call in enumerate(tool_calls)]
        return sse(self._envelope(True) | {"choices": [{"index": self.index, "delta": {"tool_calls": calls}, "logprobs": None,
                                                        "finish_reason": None}]})  # fmt: skip

    def usage_chunk(self, usage: worker_pb2.Usage) -> str:
        return sse(self._envelope(True) | {"choices": [], "usage": usage_dict(usage)})


@dataclass
class Logprobs:
    """OpenAI's `logprobs` object from the workers' per-token log-probabilities, as chunks arrive.

    Chat: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}`; a token is named by what it decodes
    to on its own (a piece of a multi-byte character decodes to U+FFFD), and `bytes` are its own bytes.
    Completions: `{"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}`, where a piece of
    a character is named as OpenAI names it, `bytes:\\xe6\\x9d` (as U+FFFD, the pieces of one character were one key
    in `top_logprobs`, and one replaced another), `top_logprobs` always holds the chosen token (up to logprobs + 1
    keys, as OpenAI's), and `text_offset` counts the characters of the text before each token.
    """

    is_chat: bool
    token_text: Callable[[int], str]  # a token's text on its own (ChatTokenizer.token_text)
    token_bytes: Callable[[int], bytes]
    prompt_ids: list[int] | None = None  # completions with echo: the prompt's tokens come first
    keep: bool = True  # keep every entry for `whole()` (a streamed answer sends each once and needs none kept)
    offset: int = 0  # completions: where the next token's text starts in the answer
    entries: list = field(default_factory=list)  # every token's, for the whole answer (with `keep`)
    _utf8: codecs.IncrementalDecoder = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace"))

    def of(self, chunk: worker_pb2.GenerateChunk) -> dict | None:
        """The object for this chunk's tokens (None when it has none), remembered for `whole()` (with `keep`)."""
        entries = []
        if self.prompt_ids is not None:  # echo: the prompt's entries, from the worker's first chunk
            entries += self._prompt_entries(chunk)
        if chunk.token_ids and len(chunk.logprobs) == len(chunk.token_ids):
            tops = list(chunk.top_logprobs) or [None] * len(chunk.token_ids)
            for token, logprob, top in zip(chunk.token_ids, chunk.logprobs, tops, strict=True):
                entries.append(self._entry(token, logprob, _pairs(top)))
        if self.keep:
            self.entries += entries
        return self._object(entries) if entries else None

    def whole(self, chars: int | None = None) -> dict:
        """The whole answer's object; with `chars`, only the tokens whose text starts before that many characters
        (chat: the text before a tool call, whose tokens are the model's call syntax)."""
        if chars is None:
            return self._object(self.entries)
        kept, seen, utf8 = [], 0, codecs.getincrementaldecoder("utf-8")("replace")
        for entry in self.entries:
            if seen >= chars:
                break
            kept.append(entry)
            seen += len(utf8.decode(bytes(entry["bytes"])))
        return self._object(kept)

    def _prompt_entries(self, chunk) -> list[dict]:
        """Prompt token 0 has no log-probability (null, as OpenAI's); 1.. come from the worker."""
        ids, self.prompt_ids = self.prompt_ids, None
        scores, tops = list(chunk.prompt_logprobs), list(chunk.prompt_top_logprobs)
        entries = []
        for i, token in enumerate(ids):
            if i == 0 or i > len(scores):
                entries.append(self._entry(token, None, []))
            else:
                entries.append(self._entry(token, scores[i - 1], _pairs(tops[i - 1]) if i <= len(tops) else []))
        return entries

    def _entry(self, token: int, logprob: float, alternatives: list[tuple[int, float]]) -> dict:
        text = self.token_text(token)
        if self.is_chat:
            top = [{"token": self.token_text(t), "logprob": lp, "bytes": self._bytes(t)} for t, lp in alternatives]
            return {"token": text, "logprob": logprob, "bytes": self._bytes(token), "top_logprobs": top}
        name = self._name(token, text)
        top = None  # the echoed prompt's first token: null
        if logprob is not None:
            top = {self._name(t): lp for t, lp in alternatives}
            top.setdefault(name, logprob)
        if "\ufffd" in text:  # a piece of a character: the character counts once, with its last piece
            entry = {"token": name, "logprob": logprob, "top": top, "offset": self.offset}
            self.offset += len(self._utf8.decode(self.token_bytes(token)))
        else:  # bytes left waiting were no character: one U+FFFD in the text, before this token's
            self.offset += len(self._utf8.decode(b"", final=True))
            self._utf8.reset()
            entry = {"token": name, "logprob": logprob, "top": top, "offset": self.offset}
            self.offset += len(text)
        return entry

    def _bytes(self, token: int) -> list[int]:
        return list(self.token_bytes(token))

    def _name(self, token: int, text: str | None = None) -> str:
        """A completions token's name: its text, or `bytes:\\x..` for a piece of a character."""
        text = self.token_text(token) if text is None else text
        if "\ufffd" not in text:
            return text
        raw = self.token_bytes(token)
        try:
            return raw.decode()  # a real U+FFFD
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{byte:02x}" for byte in raw)

    def _object(self, entries: list[dict]) -> dict:
        if self.is_chat:
            return {"content": entries, "refusal": None}
        return {
            "tokens": [e["token"] for e in entries],
            "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [e["top"] for e in entries],
            "text_offset": [e["offset"] for e in entries],
        }


def _pairs(top: worker_pb2.TopLogprobs | None) -> list[tuple[int, float]]:
    """(token id, logprob) pairs of a worker's TopLogprobs; none for None."""
    return [] if top is None else list(zip(top.token_ids, top.logprobs, strict=True))


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


SSE_DONE = "data: [DONE]\n\n"
