"""Features from a request's parts: the one place the gateway, explain and the CLI build them."""

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tandem_sdk.detectors import Scan

from gateway import privacy
from gateway.classify.features import DeviceCapability, RequestFeatures, parse_device_header

if TYPE_CHECKING:  # classify reads the policy's privacy settings; the policy's rules match on features
    from gateway.policy.schema import Policy


def classify(
    policy: "Policy",
    *,
    text: str | Scan,
    parts: Sequence[str | Scan] = (),
    prompt_tokens: int,
    max_tokens: int,
    metadata_privacy: object = None,
    privacy_header: str | None = None,
    device_header: str | None = None,
    reported_device: DeviceCapability | None = None,
    tenant: str = "default",
    priority: int = 0,
    model: str = "",
) -> RequestFeatures:
    """`parts`: pieces of the text read on their own as well (a completions batch's prompts, a chat's turns), so
    what the whole text joins across them (a number at the end of one and a phone number at the start of the next)
    hides nothing."""
    detected = privacy.detected(policy, text)
    for part in parts:
        detected += tuple(name for name in privacy.detected(policy, part) if name not in detected)
    tagged = privacy.request_tags(policy, metadata_privacy, privacy_header)
    return RequestFeatures(
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        privacy_tags=privacy.tags_with_detection(policy, tagged, detected),
        # The caller's own header wins; else what the device's registered edge agent reported.
        device=parse_device_header(device_header) or reported_device,
        tenant=tenant,
        priority=priority,
        detected=detected,
        model=model,
        tagged=tagged,
    )
