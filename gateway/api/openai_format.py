"""OpenAI response shapes for chat and text completions, whole and streamed."""

import json
import time
from dataclasses import dataclass

from proto.gen import worker_pb2


def usage_dict(usage: worker_pb2.Usage) -> dict:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens},
    }


def finish_reason(worker_reason: str) -> str:
    return "length" if worker_reason == "length" else "stop"


@dataclass(frozen=True)
class ResponseShape:
    is_chat: bool
    response_id: str
    model: str
    created: int

    @classmethod
    def new(cls, is_chat: bool, response_id: str, model: str) -> "ResponseShape":
        return cls(is_chat, response_id, model, int(time.time()))

    def _envelope(self, streamed: bool) -> dict:
        kind = ("chat.completion.chunk" if streamed else "chat.completion") if self.is_chat else "text_completion"
        return {"id": self.response_id, "object": kind, "created": self.created, "model": self.model}

    def whole(self, text: str, reason: str, usage: worker_pb2.Usage) -> dict:
        if self.is_chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
        choice["finish_reason"] = finish_reason(reason)
        return self._envelope(False) | {"choices": [choice], "usage": usage_dict(usage)}

    def chunk(self, text: str | None, reason: str | None = None, first: bool = False) -> str:
        if self.is_chat:
            delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "logprobs": None}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None}
        choice["finish_reason"] = finish_reason(reason) if reason else None
        return sse(self._envelope(True) | {"choices": [choice]})

    def usage_chunk(self, usage: worker_pb2.Usage) -> str:
        return sse(self._envelope(True) | {"choices": [], "usage": usage_dict(usage)})


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


SSE_DONE = "data: [DONE]\n\n"
