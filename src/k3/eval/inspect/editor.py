"""`text_editor`: Inspect AI's text-editor tool, with its name, commands and parameters, working through the
sandbox's file calls. Inspect's own injects a helper program into the sandbox (fetched for the sandbox's
OS), which an offline bubblewrap sandbox cannot take; this one needs nothing inside.

Paths are absolute under /workspace or relative to it. Edits keep the last UNDO versions of each file
in the sample's store, so `undo_edit` works as Inspect's does."""

from __future__ import annotations

from typing import Literal

from inspect_ai.tool import ToolError, tool
from inspect_ai.util import sandbox, store

UNDO = 10
SHOWN = 16_000   # characters of a view; more is cut with a note to ask for a line range


@tool(name="text_editor")
def text_editor():
    async def execute(command: Literal["view", "create", "str_replace", "insert", "undo_edit"], path: str,
                      file_text: str | None = None, insert_line: int | None = None, insert_text: str | None = None,
                      new_str: str | None = None, old_str: str | None = None, view_range: list[int] | None = None) -> str:
        """
        Use this function to view, create and edit files.

        Args:
          command: The command to execute. Note: `undo_edit` retains only the last 10 edits per file.
          path: Path to file or directory, e.g. `/workspace/file.py` or `file.py` (relative to /workspace).
          file_text: Required parameter of `create` command, with the content of the file to be created.
          insert_line: Required parameter of `insert` command. The `new_str` will be inserted AFTER the line `insert_line` of `path`.
          insert_text: Required parameter of `insert` command containing the string to insert.
          new_str: Optional parameter of `str_replace` command containing the new string (if not given, no string will be added).
          old_str: Required parameter of `str_replace` command containing the string in `path` to replace.
          view_range: Optional parameter of `view` command when `path` points to a file. If none is given, the full file is shown. If provided, the file will be shown in the indicated line number range, e.g. [11, 12] will show lines 11 and 12. Indexing at 1 to start. Setting `[start_line, -1]` shows all lines from `start_line` to the end of the file.

        Returns:
          The output of the command.
        """
        rel = _relative(path)
        if command == "view":
            return await _view(rel, view_range)
        if command == "create":
            if file_text is None:
                raise ToolError("create needs file_text")
            return await _write(rel, file_text, f"created {path}")
        text = await _read(rel)
        if command == "str_replace":
            return await _replace(rel, text, old_str, new_str or "")
        if command == "insert":
            return await _insert(rel, text, insert_line, new_str if new_str is not None else insert_text)
        if command == "undo_edit":
            return await _undo(rel)
        raise ToolError(f"unknown command {command!r}: view, create, str_replace, insert or undo_edit")

    return execute


def _relative(path: str) -> str:
    rel = path.removeprefix("/workspace").lstrip("/") if path.startswith("/workspace") or not path.startswith("/") else None
    if rel is None:
        raise ToolError(f"{path} is outside the workspace (/workspace)")
    return rel


async def _read(rel: str) -> str:
    try:
        return await sandbox().read_file(rel)
    except (FileNotFoundError, IsADirectoryError):
        raise ToolError(f"/workspace/{rel}: no such file") from None
    except UnicodeDecodeError:
        raise ToolError(f"/workspace/{rel} is not UTF-8 text") from None


async def _write(rel: str, text: str, done: str, before: str | None = None) -> str:
    if before is not None:
        history = store().get(f"text_editor:{rel}", [])
        store().set(f"text_editor:{rel}", (history + [before])[-UNDO:])
    await sandbox().write_file(rel, text)
    return done


async def _view(rel: str, view_range: list[int] | None) -> str:
    listing = await sandbox().exec(["find", rel or ".", "-maxdepth", "2", "-not", "-path", "*/.*"])
    if listing.success and "\n" in listing.stdout.strip():
        return f"files under /workspace/{rel}, two levels deep:\n{listing.stdout}"
    lines = (await _read(rel)).splitlines()
    first, last = (list(view_range) + [-1])[:2] if view_range else (1, -1)
    last = len(lines) if last == -1 else last
    if not 1 <= first <= max(last, 1) or last > len(lines):
        raise ToolError(f"view_range {view_range} is outside the file's {len(lines)} lines")
    shown = "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines[first - 1:last], first))
    if len(shown) > SHOWN:
        shown = shown[:SHOWN] + "\n[cut: ask for a view_range]"
    return f"/workspace/{rel}, lines {first}-{last}:\n{shown}"


async def _replace(rel: str, text: str, old: str | None, new: str) -> str:
    count = text.count(old) if old else 0
    if count != 1:
        raise ToolError(f"old_str must occur exactly once in /workspace/{rel}; it occurs {count} times")
    return await _write(rel, text.replace(old, new), f"replaced 1 occurrence in /workspace/{rel}", before=text)


async def _insert(rel: str, text: str, line: int | None, new: str | None) -> str:
    lines = text.splitlines(keepends=True)
    if line is None or new is None or not 0 <= line <= len(lines):
        raise ToolError(f"insert needs insert_line in 0..{len(lines)} and the text to insert")
    added = new if new.endswith("\n") else new + "\n"
    if line and not lines[line - 1].endswith("\n"):
        added = "\n" + added
    return await _write(rel, "".join(lines[:line]) + added + "".join(lines[line:]),
                        f"inserted after line {line} of /workspace/{rel}", before=text)


async def _undo(rel: str) -> str:
    history = store().get(f"text_editor:{rel}", [])
    if not history:
        raise ToolError(f"no edit of /workspace/{rel} to undo")
    store().set(f"text_editor:{rel}", history[:-1])
    await sandbox().write_file(rel, history[-1])
    return f"undid the last edit of /workspace/{rel}"
