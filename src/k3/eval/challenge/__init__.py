"""The fixed-repository agent challenge: a pinned project, seeded bugs, feature requests and multi-step chains
with frozen prompts, each step judged as it ends in a fresh sandbox, by hidden tests the agent's code
cannot reach (see docs/guide/eval.md, "The agent challenge"). A challenge is a directory holding
challenge.json; k3 ships two (`challenges/sim3d`, the default, and `challenges/inflection`), and users
bring their own in the same format."""
