"""Execution-provider choice: NPU first, CPU last, never a silent fallback.

onnxruntime quietly falls back to CPU when asked for a provider it does not
have, so the choice is checked against what the session really got
(`get_providers()`), and every provider passed over is logged with its reason.
"""

import logging
from dataclasses import dataclass, field

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
):
    """An InferenceSession on the best provider there is, and the provider that really runs it. `options`: the
    session's own (bench/edge_decode.py --profile turns on onnxruntime's profiler); onnxruntime's defaults when
    None."""
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
    session = ort.InferenceSession(model_path, sess_options=options, providers=list(choice.requested))
    actual = session.get_providers()[0]
    if actual != choice.requested[0]:
        log.warning("execution provider %s requested but session runs on %s", choice.requested[0], actual)
        if require_npu and actual not in NPU_PROVIDERS:
            raise ProviderError(f"--require-npu: session fell back to {actual}")
    return session, actual
