"""Every request field of `/v1/chat/completions` and `/v1/completions`, with what Tandem does with it.

The table in docs/api.md is written from `FIELDS` by `python -m gateway.api.fields` (`--check`, which
`make test` runs, exits 1 when the doc is stale), and tests/unit/gateway/api/test_fields.py checks that
`FIELDS` names exactly the fields the request models declare and refuse, so the doc cannot drift from
the code.
"""

import sys
from pathlib import Path

HONOURED = "honoured"
EXTENSION = "honoured (extension)"
NO_EFFECT = "accepted, cannot change the answer"
REFUSED = "refused: 400 naming it"

CHAT, COMPLETIONS, BOTH = "chat", "completions", "both"

# name -> (endpoints, status, what it does); the order is the doc's.
FIELDS: dict[str, tuple[str, str, str]] = {
    "model": (BOTH, HONOURED, "the served model; any other is 404 `model_not_found`"),
    "messages": (
        CHAT,
        HONOURED,
        "text content or `text` parts; `name` (to the chat template; where the template drops a role's names, as "
        "the demo's does, written before the content instead: `Alice: I say yes.`, an assistant's "
        "turns too, after which a model may begin its answer with a name; scanned for PII with the content; a turn "
        "of calls alone keeps none), `tool_calls`, `tool_call_id`, `refusal` and `refusal` parts (read "
        "as the turn's text); `developer` is the system role unless the chat template names it; what "
        "`message.model_dump()` and `parse()` send back (`audio`/`function_call` null, no `annotations`, `parsed`, "
        "`parsed_arguments`: `content` and `arguments` again); any other key in a message is a 400; as OpenAI's, a "
        "`tool` message needs the `tool_call_id` of a call in the assistant's message before it, and each such call "
        "needs its `tool` message before the next turn (else a 400 naming the turn); a user's, system's or developer's "
        "turn without content (null, or `[]`) is a 400; the caller's words (content, names, tool outputs, "
        "arguments, tools) are text: a special token's name in them (`<|im_end|>`) is its characters, never the "
        "token, as on OpenAI (Hugging Face's encoding reads it as the token; a `prompt` on /v1/completions is the "
        "model's own text, special tokens and all)",
    ),  # fmt: skip
    "prompt": (
        COMPLETIONS,
        HONOURED,
        "text or token ids, or a batch of up to `TANDEM_MAX_BATCH` (32, prompts × `n` too): each prompt gets `n` choices, indexed "
        "prompt × `n` + choice, as OpenAI's; usage counts each prompt once. The batch is scanned as one: personal "
        "data in one prompt keeps them all private",
    ),  # fmt: skip
    "max_tokens": (
        BOTH,
        HONOURED,
        "default: what fits the context, up to `TANDEM_DEFAULT_MAX_TOKENS`. Completions: 0 with `echo` answers the "
        "prompt alone (with `logprobs`, scored: the log-likelihood form older lm-eval and HELM send), "
        "`finish_reason` `length`, 0 completion tokens",
    ),
    "max_completion_tokens": (CHAT, HONOURED, "as `max_tokens`; both at once is a 400, as OpenAI's"),
    "temperature": (
        BOTH,
        HONOURED,
        "0 (greedy) to 2, as OpenAI's (above 0 and under 0.01: served as 0.01, as vLLM does: logits divided by less "
        "overflow); default: the model's generation_config.json (`do_sample: false` is 0), else 1",
    ),  # fmt: skip
    "top_p": (
        BOTH,
        HONOURED,
        "[0, 1] (0, and anything under 1e-6: the most likely token, greedy); default: generation_config.json, else 1",
    ),
    "seed": (
        BOTH,
        HONOURED,
        "the same seed gives the same tokens from the same tier, in any batch (the edge's INT4 model and the cloud's "
        "answer differently: `X-Tandem-Route` says which answered); int64, modulo 2^63",
    ),
    "stop": (BOTH, HONOURED, "a string or up to 4, each of 1 to 256 characters"),
    "n": (
        BOTH,
        HONOURED,
        "up to `TANDEM_MAX_N` (8); seeds `seed`, `seed`+1, …; the local agent answers 1. The choices (and a batch's "
        "prompts) start in turn, each once the one before has its first token; on an edge agent (one sequence at a "
        "time) each waits for the one before it to finish, up to `TANDEM_FIRST_TOKEN_DEADLINE_S` (30 s) from its "
        "own start. Streamed, the answer starts with the first choice's first token and the others join as they "
        "start; one that cannot start is an `error` event, and those already streaming go on to their end",
    ),  # fmt: skip
    "stream": (BOTH, HONOURED, "server-sent events, ending with `[DONE]`"),
    "stream_options": (BOTH, HONOURED, "`include_usage`; `include_obfuscation` only false; any other key is a 400"),
    "presence_penalty": (BOTH, HONOURED, "-2 to 2, on answer tokens"),
    "frequency_penalty": (BOTH, HONOURED, "-2 to 2, times each answer token's count"),
    "logit_bias": (BOTH, HONOURED, "token id -> -100 to 100, up to 300 entries"),
    "logprobs": (
        BOTH,
        HONOURED,
        "chat: true/false; completions: 0 to 20 alternatives, the chosen token always among them (as OpenAI's); "
        "raw-model log-probabilities of the returned text's tokens (a matched stop string's and a tool call's are not "
        "reported); "
        "completions name a piece of a character `bytes:\\xe6`, as OpenAI does",
    ),
    "top_logprobs": (CHAT, HONOURED, "0 to 20, with `logprobs: true`"),
    "echo": (
        COMPLETIONS,
        HONOURED,
        "the prompt before the answer; with `logprobs`, the prompt's log-probabilities too "
        "(the first token's is null), as lm-eval's log-likelihood scoring needs",
    ),  # fmt: skip
    "response_format": (
        BOTH,
        HONOURED,
        "`text`, `json_object`, `json_schema` (with a `name` of 1-64 letters, digits, `_`, `-`, as OpenAI's): "
        "grammar-constrained decoding; with tools the model may call, the "
        "answer is a call or text that follows it; with a forced call, the call (it shapes a later turn's text)",
    ),  # fmt: skip
    "tools": (
        CHAT,
        HONOURED,
        "at least one (`[]` is a 400, as OpenAI's), through the chat template; calls parsed into `tool_calls`, their `arguments` compact JSON whatever spacing the "
        "model wrote (an answer cut by `max_tokens` mid-call: the "
        "calls so far, the last with its arguments as far as they got, never the model's call syntax); a `strict` function's "
        "calls follow its schema (forced: by grammar; auto: a call that does not stays text), and a schema that "
        "cannot be compiled (at most 64 KiB) is a 400 naming the function; "
        "a key beside `type` and `function`, or in `function` beside `name`, `description`, "
        "`parameters` and `strict`, is a 400, and so are `parameters` of a type other than `object` (null: none), "
        "a `description` not a string and a `strict` not true or false; for a Mistral-format model, call ids are its 9 letters and digits, "
        "and ids of another shape in the history reach its template as 9 drawn from them",
    ),  # fmt: skip
    "tool_choice": (CHAT, HONOURED, "`none`, `auto`, `required` or a named function (the last two constrain decoding)"),
    "parallel_tool_calls": (
        CHAT,
        HONOURED,
        "true: a forced answer may hold several calls; only with `tools`, as OpenAI's",
    ),
    "user": (BOTH, HONOURED, "kept in the usage record (not for private requests)"),
    "safety_identifier": (BOTH, HONOURED, "as `user`"),
    "metadata": (
        BOTH,
        HONOURED,
        "`metadata.privacy`: privacy tags; a tag the policy does not know, or a key meant for them "
        '(`Privacy`, `privcy`, `{"pii": "yes"}`, `is_private`, `local_only`), is a 400 `unknown_privacy_tag` (docs/policy.md); at most 16 keys '
        "of at most 64 characters, their values strings of at most 512 (`privacy` may be a list), as OpenAI's",
    ),
    "top_k": (BOTH, EXTENSION, "0 is off; default: the model's generation_config.json, else 0"),
    "min_p": (BOTH, EXTENSION, "0 to 1; default: the model's generation_config.json, else 0"),
    "repetition_penalty": (BOTH, EXTENSION, "HF's, 0.01 to 10, on prompt and answer tokens; default as top_k, else 1"),
    "ignore_eos": (BOTH, EXTENSION, "go on past end-of-sequence"),
    "stop_token_ids": (BOTH, EXTENSION, "up to 64 token ids that end the answer"),
    "priority": (BOTH, EXTENSION, "higher first, clamped to the tenant's `max_priority`"),
    "store": (BOTH, NO_EFFECT, "only `false`: answers are never stored"),
    "service_tier": (BOTH, NO_EFFECT, "only `auto` or `default`"),
    "prompt_cache_key": (BOTH, NO_EFFECT, "prefixes are cached and routed automatically"),
    "prompt_cache_retention": (
        BOTH,
        NO_EFFECT,
        "only `in_memory` (or `in-memory`): prefixes stay cached while the KV memory holds them",
    ),
    "modalities": (BOTH, NO_EFFECT, 'only `["text"]`'),
    "best_of": (COMPLETIONS, REFUSED, "unless 1"),
    "suffix": (COMPLETIONS, REFUSED, 'unless ""'),
    "functions": (CHAT, REFUSED, "the deprecated form of `tools`"),
    "function_call": (CHAT, REFUSED, 'the deprecated form of `tool_choice`, unless "none"'),
    "audio": (CHAT, REFUSED, "text models only"),
    "prediction": (CHAT, REFUSED, ""),
    "reasoning_effort": (CHAT, REFUSED, ""),
    "verbosity": (CHAT, REFUSED, ""),
    "web_search_options": (CHAT, REFUSED, ""),
}
DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
BEGIN, END = "<!-- fields:begin (python -m gateway.api.fields) -->", "<!-- fields:end -->"


def render() -> str:
    rows = ["| field | endpoint | status | notes |", "|---|---|---|---|"]
    rows += [f"| `{name}` | {where} | {status} | {note} |" for name, (where, status, note) in FIELDS.items()]
    rows.append("| any other name | both | refused: 400 `unknown field` | |")
    return "\n".join(rows)


def updated(doc: str) -> str:
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC} lacks the markers {BEGIN} ... {END}")
    head, rest = doc.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{render()}\n{END}{rest.split(END, 1)[1]}"


def main() -> None:
    doc = DOC.read_text()
    if "--check" in sys.argv:
        if updated(doc) != doc:
            raise SystemExit(f"{DOC}'s field table is stale: run python -m gateway.api.fields")
        print("field table up to date")
        return
    DOC.write_text(updated(doc))
    print(f"wrote the field table to {DOC}")


if __name__ == "__main__":
    main()
