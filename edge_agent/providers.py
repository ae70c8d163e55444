"""Execution-provider choice: NPU first, CPU last, never a silent fallback.

onnxruntime quietly falls back to CPU when asked for a provider it does not
have, so the choice is checked against what the session really got
(`get_providers()`), and every provider passed over is logged with its reason.
"""

import json
import logging
import os
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import onnxruntime as ort

log = logging.getLogger(__name__)

NPU_PROVIDERS = (
    "QNNExecutionProvider",  # Qualcomm HTP
    "OpenVINOExecutionProvider",  # Intel NPU
    "VitisAIExecutionProvider",  # AMD Ryzen AI
    "CoreMLExecutionProvider",  # Apple Neural Engine
    "DmlExecutionProvider",  # DirectML
)
DEFAULT_PRIORITY = (*NPU_PROVIDERS, "CUDAExecutionProvider", "CPUExecutionProvider")
_PLACEMENT = "tandem-placement-"  # the temporary folder of a profile create_session turned on


class ProviderError(RuntimeError):
    """No acceptable execution provider; the message lists what was tried and why it failed."""


@dataclass(frozen=True)
class ProviderChoice:
    requested: tuple[str, ...]  # in priority order, the ones this build of onnxruntime has
    skipped: dict[str, str] = field(default_factory=dict)  # provider -> why it was passed over


def choose_providers(priority: tuple[str, ...], available: list[str], known: list[str] | None = None) -> ProviderChoice:
    """The providers of `priority` this build has, in order. A name onnxruntime does not know at all (`known`: every
    provider of any build) is a typo, refused: skipped as "not in this build", `QnnExecutionProvider` ran the model
    on the CPU with a note at INFO."""
    known = ort.get_all_providers() if known is None else known
    for name in priority:
        if name not in known:
            meant = next((k for k in known if k.lower() == name.lower()), None) or next(
                (k for k in known if k.lower().startswith(name.lower().removesuffix("executionprovider"))), None
            )
            advice = f" (did you mean {meant}?)" if meant else ""
            raise ProviderError(f"unknown execution provider {name!r}{advice}; onnxruntime knows {sorted(known)}")
    requested = tuple(p for p in priority if p in available)
    skipped = {p: "not in this onnxruntime build" for p in priority if p not in available}
    if not requested:
        raise ProviderError(f"none of {list(priority)} is available; this onnxruntime has {available}")
    return ProviderChoice(requested, skipped)


def create_session(
    model_path: str,
    priority: tuple[str, ...] = DEFAULT_PRIORITY,
    require_npu: bool = False,
    options: ort.SessionOptions | None = None,
    placement: bool = False,
):
    """An InferenceSession on the best provider there is, and the provider registered first. `options`: the
    session's own (bench/edge_decode.py --profile turns on onnxruntime's profiler); onnxruntime's defaults when
    None. `placement`: the first run is profiled, for `ran_on` to read which provider ran the model."""
    choice = choose_providers(priority, ort.get_available_providers())
    chosen_first = priority != DEFAULT_PRIORITY  # an operator's own list: passing over its first is news
    for provider, reason in choice.skipped.items():
        if chosen_first and priority.index(provider) < priority.index(choice.requested[0]):
            log.warning("execution provider %s skipped: %s; running on %s", provider, reason, choice.requested[0])
        else:
            log.info("execution provider %s skipped: %s", provider, reason)
    options = options or ort.SessionOptions()
    if require_npu:
        choice = ProviderChoice(tuple(p for p in choice.requested if p in NPU_PROVIDERS), choice.skipped)
        if not choice.requested:
            raise ProviderError(
                f"--require-npu: no NPU execution provider in this onnxruntime build "
                f"(has {ort.get_available_providers()}); install the vendor's onnxruntime package"
            )
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    profile_dir = None
    if placement and not options.enable_profiling:  # the caller's own profile (bench --profile) is its to read
        profile_dir = tempfile.mkdtemp(prefix=_PLACEMENT)
        options.enable_profiling = True  # the first run's placement: `ran_on`, which turns it off
        options.profile_file_prefix = os.path.join(profile_dir, "run")
    try:
        session = ort.InferenceSession(model_path, sess_options=options, providers=list(choice.requested))
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own errors are plain (Fail, RuntimeException)
        if profile_dir is not None:
            shutil.rmtree(profile_dir, ignore_errors=True)
        if not require_npu:
            raise
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise ProviderError(
            f"--require-npu: {', '.join(choice.requested)} cannot run this model without the CPU ({first})"
        ) from None
    actual = session.get_providers()[0]
    if actual != choice.requested[0]:
        log.warning("execution provider %s requested but session runs on %s", choice.requested[0], actual)
        if require_npu and actual not in NPU_PROVIDERS:
            raise ProviderError(f"--require-npu: session fell back to {actual}")
    return session, actual


def ran_on(session, registered: str, require_npu: bool = False) -> str:
    """After the session's first run (profiled by create_session): the provider that ran most of the model's work
    (the most kernel time), which the agent reports. A session's first provider is only the first
    registered: on this onnxruntime `AzureExecutionProvider,CPUExecutionProvider` reported Azure everywhere while the
    CPU ran every node (a review), as an NPU provider that takes no node of the graph would. Where the caller
    profiles the session itself, its first provider."""
    options = session.get_session_options()
    if not (options.enable_profiling and _PLACEMENT in options.profile_file_prefix):
        return registered
    path = Path(session.end_profiling())
    try:
        events = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        log.warning("could not read which provider ran each node (%s); reporting %s", exc, registered)
        return registered
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
    nodes, time_us = Counter(), Counter()
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time") and "provider" in args:
            nodes[args["provider"]] += 1
            time_us[args["provider"]] += event.get("dur") or 0
    if not nodes:
        return registered
    # By kernel time, not by op: an NPU provider runs each partition it takes as one fused node of its own name,
    # which no op list knows (credited with nothing, the real NPU lost to four shape ops left on the CPU: a review)
    actual = max(nodes, key=lambda provider: (time_us[provider], nodes[provider]))
    placed = ", ".join(f"{provider} {count}" for provider, count in nodes.most_common())
    if actual != registered:
        log.warning("execution provider %s was registered first, but %s runs the model (nodes: %s)",
                    registered, actual, placed)  # fmt: skip
    else:
        log.info("nodes by execution provider: %s", placed)
    if require_npu and actual not in NPU_PROVIDERS:
        raise ProviderError(f"--require-npu: {actual} runs the model (nodes: {placed})")
    return actual
