"""What the SDK raises. Every message says what happened and what was (not) sent."""


class TandemError(Exception):
    """Base class."""


class PrivateRequestError(TandemError):
    """A private request could not be served on this device. Nothing was sent anywhere."""


class GatewayUnavailable(TandemError):
    """The gateway could not be reached (and no local fallback was allowed or available)."""


class StreamInterrupted(TandemError):
    """A stream broke after its answer had begun (the connection dropped, a read timed out, the server sent what is
    not an event, the stream ended without `data: [DONE]`). The chunks already yielded are all there is; the request
    was not run again anywhere."""


class APIError(TandemError):
    """The gateway or the local agent answered with an error (OpenAI shape)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message, self.code = status, message, code


class PrivateAPIError(APIError, PrivateRequestError):
    """The local agent answered a private request with an error. Its words are `.message`, left out of the
    exception's text: they may quote the request (a tool's name, a schema, the prompt), and an app that logs the
    exception, or its crash reporter, would carry that text off the device (a review). Nothing was sent anywhere
    else."""

    def __init__(self, status: int, message: str, code: str | None = None, said: str | None = None) -> None:
        super().__init__(status, message, code)
        said = said or f"the local agent refused this private request{f' ({code})' if code else ''}"
        self.args = (
            f"{status}: {said}; its words are in .message, not here, since they may quote the request; it was not "
            "sent anywhere else",
        )
