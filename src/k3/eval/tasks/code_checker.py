"""Runs inside the sandbox's worker (sandbox/judge.py), before the answer it reads: whether the code parses,
whether its imports exist, whether the module attributes it uses and the functions it calls by name
exist. Whether it runs and whether the task's test passes are the judge's to say, in another process.
Standard library only (loaded by path under `python -I`)."""

import ast
import importlib
import importlib.util


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


def _undefined_calls(tree, aliases):
    """Plain-name calls (f(...)) to names that nothing in the code defines, imports or binds, and that
    are not builtins: a function the model assumed but never wrote."""
    import builtins

    bound = set(aliases) | set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ImportFrom):
            bound.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return sorted(called - bound)


def _module(name):
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def empty_result(error=""):
    """What a check reports for code that got nowhere (also the task's record when the checker died)."""
    return {"parses": False, "missing_imports": [], "missing_attributes": [], "undefined_calls": [], "runs": False,
            "passes": False, "error": error}


def findings(src):
    """The static checks of `src`, without running it -> parses, missing_imports, missing_attributes, undefined_calls."""
    out = {"parses": False, "missing_imports": [], "missing_attributes": [], "undefined_calls": []}
    try:
        tree = ast.parse(src)
    except SyntaxError:
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
    out["undefined_calls"] = _undefined_calls(tree, aliases)
    return out
