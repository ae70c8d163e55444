"""Tandem: pieces shared by every process (CLI, local launcher, demo model,
telemetry, the engine contract both worker kinds serve)."""
