"""k3 inside Inspect AI (the `[eval]` extra): k3's sandbox as an Inspect sandbox environment ("k3") and the
in-process engine as an Inspect model provider ("k3/PATH").

Registered through Inspect's extension entry point (`inspect_ai` in pyproject.toml), so Inspect's own CLI
finds it: `inspect eval TASK --sandbox k3`."""
