"""`tandem policy`: check a policy file, explain where a request would go, replay recorded traffic."""

from pathlib import Path
from typing import Annotated

import typer

from tandem.cli.common import ModelDir, fail

app = typer.Typer(help="Routing policies.", no_args_is_help=True)


@app.command("check")
def check(file: Path) -> None:
    """Validate a policy file; exit 1 with the precise error if it is not valid."""
    from gateway.policy.loader import PolicyError, load_policy
    from gateway.privacy import detection_warning

    try:
        policy = load_policy(file)
    except PolicyError as exc:
        fail(exc, 1, exc)
    if warning := detection_warning(policy):  # as the gateway says it on loading the file (a bare "ok" before)
        typer.echo(f"warning: {warning}", err=True)
    typer.echo(f"{file}: ok ({len(policy.pools)} pools, {len(policy.rules)} rules)")


def _load_policy_or_exit(path: Path):
    from gateway.policy.loader import PolicyError, load_policy

    try:
        return load_policy(path)
    except PolicyError as exc:
        fail(exc, 1, exc)


@app.command("explain")
def explain(
    file: Annotated[Path, typer.Argument(help="policy YAML")],
    message: Annotated[str, typer.Option(help="the user message")],
    model: ModelDir,
    max_tokens: int = 128,
    privacy: Annotated[str | None, typer.Option(help="privacy tags, as X-Tandem-Privacy")] = None,
    device: Annotated[str | None, typer.Option(help='device JSON, as X-Tandem-Device, e.g. {"npu": true}')] = None,
    tenant: str = "default",
    priority: Annotated[int, typer.Option(help="the request's `priority`, which rules may match on")] = 0,
    model_id: Annotated[
        str | None, typer.Option(help="the request's `model` (default: the checkpoint directory's name)")
    ] = None,
) -> None:
    """Where a chat request would go under FILE, and why (offline: backends assumed healthy)."""
    import json

    from gateway.backends.registry import backend_label
    from gateway.classify.classify import classify
    from gateway.policy.explain import explain
    from gateway.routing.candidate import Candidate
    from modeling.model_config import CheckpointError
    from serving.checkpoint import model_id_for
    from serving.openai.chat_tokenizer import ChatTokenizer
    from serving.openai.errors import GatewayError

    policy = _load_policy_or_exit(file)
    if max_tokens < 1:
        fail(f"--max-tokens {max_tokens}: at least 1", 2)
    try:
        chat = ChatTokenizer(model)
        prompt_ids = chat.encode_chat([{"role": "user", "content": message}])
    except (CheckpointError, GatewayError) as exc:
        fail(getattr(exc, "message", exc), 1, exc)
    if len(prompt_ids) + max_tokens > chat.max_context_tokens:  # the gateway's 400 before any routing
        fail(
            f"--max-tokens {max_tokens}: the prompt's {len(prompt_ids)} tokens and {max_tokens} more exceed the model's"
            f" context of {chat.max_context_tokens}; the gateway answers 400 context_length_exceeded",
            1,
        )
    try:
        features = classify(
            policy,
            text=message,
            prompt_tokens=len(prompt_ids),
            max_tokens=max_tokens,
            privacy_header=privacy,
            device_header=device,
            tenant=tenant,
            priority=priority,
            model=model_id_for(model, model_id),
        )
    except GatewayError as exc:
        fail(exc.message, 1, exc)

    candidates = {
        name: [Candidate(url, is_healthy=True, kind=pool.kind) for url in pool.endpoints]
        for name, pool in policy.pools.items()
    }
    labels = {
        name: {url: backend_label(name, i) for i, url in enumerate(pool.endpoints)}
        for name, pool in policy.pools.items()
    }
    typer.echo(json.dumps(explain(policy, features, candidates, labels), indent=2))


@app.command("replay")
def replay(
    trace: Annotated[Path, typer.Argument(help="decision log (JSON lines) from TANDEM_DECISION_LOG")],
    policy: Annotated[Path, typer.Option("--policy", help="policy to replay")],
    against: Annotated[Path | None, typer.Option("--against", help="a second policy to compare with")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of tables")] = False,
) -> None:
    """Replay recorded decisions against a policy (and compare with another) before it serves anyone."""
    import json

    from gateway.policy.replay import TraceError, differences, read_trace, replay
    from gateway.policy.replay_report import print_report

    policies = {"policy": _load_policy_or_exit(policy)}
    if against:
        policies["against"] = _load_policy_or_exit(against)
    try:
        read = read_trace(trace)
    except TraceError as exc:
        fail(exc, 1, exc)
    except OSError as exc:
        fail(f"{trace}: cannot read: {exc.strerror}", 1, exc)
    if read.torn:
        typer.echo(f"{trace}: {read.torn} record(s) cut short (a crash mid-write?), replayed without them", err=True)
    features = read.features
    results = {name: replay(p, features) for name, p in policies.items()}
    out = {name: report.as_dict() for name, (report, _) in results.items()}
    if against:
        out["differences"] = differences(results["policy"][1], results["against"][1])
    if as_json:
        typer.echo(json.dumps(out, indent=2))
    else:
        print_report(out, {"policy": str(policy), "against": str(against) if against else None})
