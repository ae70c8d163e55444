"""Tandem's client SDK: OpenAI-shaped, device-aware, and private prompts never leave the device."""

from tandem_sdk.client import DEFAULT_LOCAL_AGENT, AsyncClient, AsyncStream, Client, Stream
from tandem_sdk.device import DeviceCapability, detect_device
from tandem_sdk.errors import (
    APIError,
    GatewayUnavailable,
    PrivateAPIError,
    PrivateRequestError,
    StreamInterrupted,
    TandemError,
)
from tandem_sdk.tags import TagError

__all__ = [
    "DEFAULT_LOCAL_AGENT",
    "APIError",
    "AsyncClient",
    "AsyncStream",
    "Client",
    "DeviceCapability",
    "GatewayUnavailable",
    "PrivateAPIError",
    "PrivateRequestError",
    "Stream",
    "StreamInterrupted",
    "TagError",
    "TandemError",
    "detect_device",
]
