"""The serving runtime every Tandem server process shares, below the gateway, the cloud worker and the edge agent.

- the engine contract both tiers implement (`engine_api`), the one sampler (`sampling`), logits processors,
  grammars, the detokenizer;
- the gRPC worker service over an engine (`worker_service`), worker metrics, the embedded HTTP server and the
  OpenAI routes an engine serves on it (`embedded_http`, `engine_app`);
- the OpenAI surface the gateway and the engines both speak (`serving.openai`: request models, response shapes,
  tool calls, the chat tokenizer, errors);
- what a checkpoint directory says besides its weights (`checkpoint`), telemetry, small counters.

It imports no server package (import-linter, `make test`).
"""
