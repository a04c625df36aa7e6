"""The fixed-repository agent challenge: a pinned project, seeded bugs and feature requests with frozen
prompts, judged after the agent finishes in a fresh sandbox from the pristine repository plus the agent's
changes (see docs/guide/eval.md, "Agent challenge"). A challenge is a directory holding challenge.json;
k3 ships one (`challenges/inflection`), and users bring their own in the same format."""
