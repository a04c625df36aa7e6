"""Runs inside the sandbox: `code_checker.py CODE_FILE TEST_FILE` prints one JSON line saying whether
the code parses, whether its imports exist, whether the module attributes it uses exist, whether it
runs, and whether the task's test passes. Standard library only (it runs under `python -I`)."""

import ast
import importlib
import importlib.util
import json
import sys


def _imports(tree):
    """-> ({local name: module}, [(module, name) from `from m import n`])."""
    aliases, froms = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            froms += [(node.module, a.name) for a in node.names]
    return aliases, froms


def _module(name):
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def check(src, test):
    out = {"parses": False, "missing_imports": [], "missing_attributes": [], "runs": False, "passes": False, "error": ""}
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        out["error"] = f"SyntaxError: {e.msg} (line {e.lineno})"
        return out
    out["parses"] = True
    aliases, froms = _imports(tree)
    modules = sorted(set(aliases.values()) | {m for m, _ in froms})
    out["missing_imports"] = [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]
    for m, name in froms:
        mod = _module(m)
        if mod is not None and name != "*" and not hasattr(mod, name) and importlib.util.find_spec(f"{m}.{name}") is None:
            out["missing_attributes"].append(f"{m}.{name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            mod = _module(aliases[node.value.id])
            if mod is not None and not hasattr(mod, node.attr):
                out["missing_attributes"].append(f"{aliases[node.value.id]}.{node.attr}")
    namespace = {"__name__": "__k3_checked__"}
    try:
        exec(compile(tree, "<answer>", "exec"), namespace)
        out["runs"] = True
        exec(compile(test, "<test>", "exec"), namespace)
        out["passes"] = True
    except BaseException as e:  # the code under test may raise anything, SystemExit included
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    return out


if __name__ == "__main__":
    with open(sys.argv[1]) as f, open(sys.argv[2]) as g:
        result = check(f.read(), g.read())
    print(json.dumps(result))
