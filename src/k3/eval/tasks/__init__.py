"""Evaluation tasks. Each has a name, frozen items, a content hash, `run(item, ctx)` -> a JSON record
and `summarise(records)` -> scores. See `registry.py` for how `--tasks` names map to tasks."""
