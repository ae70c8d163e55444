"""Locust users for bench/soak.py (locust, from PyPI, is the load generator: nobody here wrote it).

`ChatUser` (the soak): a steady mix of whole and streamed chat completions,
public and private, at `TANDEM_USER_RPS` requests per second per user.
`StreamUser` (the scale run): each user holds one long stream open, reading
it to the end, then opens the next.
"""

import json
import os
import random

from locust import FastHttpUser, constant, constant_throughput, task

RPS = float(os.environ.get("TANDEM_USER_RPS", "1"))
STREAM_TOKENS = int(os.environ.get("TANDEM_STREAM_TOKENS", "100"))
QUESTIONS = ["hi", "Tandem answers a question where it is", "tell me more. " * 20, "What is the plan for today?"]


def body(stream: bool, private: bool, max_tokens: int) -> dict:
    out = {"model": "tandem-demo", "max_tokens": max_tokens, "stream": stream, "temperature": 0,
           "messages": [{"role": "user", "content": random.choice(QUESTIONS)}]}  # fmt: skip
    if private:
        out["metadata"] = {"privacy": "pii"}
    return out


def read_stream(response) -> bool:
    """True when the SSE body ends with [DONE] and carries no error event."""
    buffer = b""
    for chunk in response.iter_content(chunk_size=4096):
        buffer += chunk if isinstance(chunk, bytes) else chunk.encode()
    events = [line.strip() for line in buffer.split(b"\n") if line.strip()]
    return bool(events) and events[-1] == b"data: [DONE]" and not any(e.startswith(b'data: {"error"') for e in events)


class ChatUser(FastHttpUser):
    weight = 1 if os.environ.get("TANDEM_LOCUST_MODE", "soak") == "soak" else 0
    wait_time = constant_throughput(RPS)

    @task
    def chat(self) -> None:
        stream, private = random.random() < 0.5, random.random() < 0.3
        with self.client.post("/v1/chat/completions", json=body(stream, private, 12), name="chat",
                              catch_response=True, stream=stream) as response:  # fmt: skip
            if response.status_code != 200:
                response.failure(f"{response.status_code}: {response.text[:200]}")
            elif stream and not read_stream(response):
                response.failure("stream ended without [DONE], or with an error event")
            elif not stream and not json.loads(response.text)["choices"][0]["message"]["content"]:
                response.failure("empty answer")


class StreamUser(FastHttpUser):
    weight = 1 if os.environ.get("TANDEM_LOCUST_MODE", "soak") == "scale" else 0
    wait_time = constant(0)
    network_timeout = connection_timeout = 600.0

    @task
    def hold_a_stream(self) -> None:
        with self.client.post("/v1/chat/completions", json=body(True, False, STREAM_TOKENS), name="stream",
                              catch_response=True, stream=True) as response:  # fmt: skip
            if response.status_code != 200:
                response.failure(f"{response.status_code}: {response.text[:200]}")
            elif not read_stream(response):
                response.failure("stream ended without [DONE], or with an error event")
