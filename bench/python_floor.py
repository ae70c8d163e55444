"""The least a Python gateway can be: bench/gateway_overhead.py's floor, run as `python bench/python_floor.py PORT
GRPC_TARGET TOKENIZER_JSON` (it prints "ready").

What every request to a Tandem-like gateway must do and nothing more: FastAPI under uvicorn (uvloop and httptools,
as the gateway runs), the body validated by a pydantic model, the prompt tokenized, one grpc.aio `Generate` call to
the worker, an OpenAI-shaped JSON answer. No auth, privacy scan, policy, routing, metrics or tracing. The bench runs
it beside Tandem's gateway and sglang-router, so the gap between Tandem and a Rust router splits into what Python's
serving stack costs (this app) and what Tandem adds on top.
"""

import sys
import time
import uuid
from pathlib import Path

import grpc
import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from proto.gen import worker_pb2, worker_pb2_grpc  # noqa: E402


class Completion(BaseModel):
    model: str
    prompt: str
    max_tokens: int = 16


def make_app(grpc_target: str, tokenizer_path: str) -> FastAPI:
    app = FastAPI()
    tokenizer = Tokenizer.from_file(tokenizer_path)
    stub = None

    @app.post("/v1/completions")
    async def completions(body: Completion) -> dict:
        nonlocal stub
        if stub is None:  # made on the server's loop
            stub = worker_pb2_grpc.WorkerStub(grpc.aio.insecure_channel(grpc_target))
        request = worker_pb2.GenerateRequest(
            request_id=uuid.uuid4().hex,
            prompt_token_ids=tokenizer.encode(body.prompt).ids,
            sampling=worker_pb2.SamplingParams(max_tokens=body.max_tokens),
        )
        text, finish, usage = [], "", None
        async for chunk in stub.Generate(request):
            text.append(chunk.text)
            finish = chunk.finish_reason or finish
            usage = chunk.usage if chunk.HasField("usage") else usage
        return {
            "id": f"cmpl-{request.request_id}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": [{"index": 0, "text": "".join(text), "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens},
        }

    return app


class _Server(uvicorn.Server):
    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        print("ready", flush=True)


if __name__ == "__main__":
    port, target, tokenizer_json = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    config = uvicorn.Config(make_app(target, tokenizer_json), port=port, log_level="warning", access_log=False)
    _Server(config).run()
