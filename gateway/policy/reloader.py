"""Live policy reload: watch the file, swap in a valid policy atomically, keep the old one otherwise.

The directory is watched, not the file: editors save by renaming and
Kubernetes ConfigMaps swap a symlink, and either shows as a change there.
A request reads `state.policy` once, so in-flight requests finish on the
policy they started with.
"""

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from watchfiles import awatch

from gateway import metrics, privacy
from gateway.policy.loader import PolicyError, parse_policy

log = logging.getLogger(__name__)


@dataclass
class PolicyStatus:
    path: Path
    sha256: str
    loaded_at: float
    last_error: str | None = None

    def as_dict(self) -> dict:
        return {
            "file": str(self.path),
            "sha256": self.sha256[:16],
            "loaded_at": self.loaded_at,
            "last_error": self.last_error,
        }


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class PolicyReloader:
    def __init__(self, state) -> None:
        self._state = state

    async def run(self) -> None:
        status = self._state.policy_status
        async for _ in awatch(status.path.parent, debounce=50, step=50, recursive=False):
            await self.reload()

    async def reload(self) -> bool:
        """Load the file if its content changed; True when a new policy now serves."""
        status = self._state.policy_status
        try:
            text = status.path.read_text()
        except OSError as exc:
            return self._reject(f"{status.path}: cannot read: {exc.strerror}")
        new_digest = digest(text)
        if new_digest == status.sha256:
            return False
        try:
            policy = parse_policy(text, str(status.path))
            self._state.check_models(policy)
        except (PolicyError, ValueError) as exc:
            status.sha256 = new_digest  # do not report the same broken file again until it changes
            return self._reject(f"{status.path}: {exc}" if not isinstance(exc, PolicyError) else str(exc))
        await self._state.registry.apply(policy)
        self._state.policy = policy
        self._state.policy_status = PolicyStatus(status.path, new_digest, time.time())
        metrics.POLICY_RELOADS.labels("ok").inc()
        if warning := privacy.detection_warning(policy):
            log.warning("%s", warning)
        log.info(
            "policy reloaded from %s (sha256 %s): %d pools, %d rules",
            status.path,
            new_digest[:16],
            len(policy.pools),
            len(policy.rules),
        )
        return True

    def _reject(self, error: str) -> bool:
        self._state.policy_status.last_error = error
        metrics.POLICY_RELOADS.labels("error").inc()
        log.error("policy change rejected, the previous policy keeps serving:\n%s", error)
        return False
