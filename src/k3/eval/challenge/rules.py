"""Static checks of the code an agent added, for the rules a challenge states (read, never run: they take
the agent's files as text, in the harness's process).

    imports               no module imported that the repository did not import before, unless it is of the
                          standard library, the repository's own, or in the rule's "allowed" list
    documented_and_tested every new public function, method or class has a docstring, and its name appears
                          in a test file of the agent's repository
    naming                new functions, methods, arguments and variables in snake_case, classes in CapWords

Each compares the agent's repository after a step with the one it started the step from: only what is
new counts, so code the challenge shipped never breaks a rule. A file that does not parse breaks no
rule here (its tests fail instead)."""

from __future__ import annotations

import ast
import re
import sys
import threading

SNAKE = re.compile(r"^_*[a-z][a-z0-9_]*$|^__[a-z0-9_]+__$")
CAPWORDS = re.compile(r"^_*[A-Z][A-Za-z0-9]*$")
CONSTANT = re.compile(r"^_*[A-Z][A-Z0-9_]*$")
Tree = dict[str, bytes]
# CPython 3.11's parser keeps its recursion depth in shared state: two threads parsing at once (samples are
# judged in threads) can fail with "SystemError: AST constructor recursion depth mismatch".
PARSING = threading.Lock()


def _parse(data: bytes | None):
    try:
        with PARSING:
            return ast.parse(data.decode("utf-8")) if data is not None else None
    except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError, MemoryError):
        return None


def _sources(before: Tree, final: Tree, is_test) -> list[tuple[str, ast.AST, ast.AST | None]]:
    """(path, final tree, tree before) of every changed .py file that parses."""
    out = []
    for path in sorted(final):
        if path.endswith(".py") and final[path] != before.get(path):
            tree = _parse(final[path])
            if tree is not None:
                out.append((path, tree, _parse(before.get(path))))
    return out


def _imports(tree) -> set[str]:
    found = set()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def imports(rule, before: Tree, final: Tree, is_test, own: set[str]) -> list[dict]:
    had = set().union(*(_imports(_parse(d)) for p, d in before.items() if p.endswith(".py")))
    ok = set(sys.stdlib_module_names) | set(rule.allowed) | own | had
    return [{"rule": rule.text, "path": path, "why": f"imports {name}"}
            for path, tree, _ in _sources(before, final, is_test) for name in sorted(_imports(tree) - ok)]


def _defs(tree) -> dict[str, ast.AST]:
    """qualified name -> public function or class definition (module level and one class deep)."""
    out = {}
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            out[node.name] = node
            if isinstance(node, ast.ClassDef):
                out.update({f"{node.name}.{m.name}": m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                            and not m.name.startswith("_")})
    return out


def documented_and_tested(rule, before: Tree, final: Tree, is_test, own: set[str]) -> list[dict]:
    tests = "\n".join(d.decode("utf-8", "replace") for p, d in final.items() if is_test(p) and p.endswith(".py"))
    broken = []
    for path, tree, old in _sources(before, final, is_test):
        if is_test(path):
            continue
        for name, node in sorted(_defs(tree).items()):
            if name in _defs(old):
                continue
            if ast.get_docstring(node) is None:
                broken.append({"rule": rule.text, "path": path, "why": f"{name} has no docstring"})
            if not re.search(rf"\b{re.escape(name.split('.')[-1])}\b", tests):
                broken.append({"rule": rule.text, "path": path, "why": f"{name} is named in no test"})
    return broken


def _names(tree) -> set[tuple[str, str]]:
    """(kind, name) of every function, class, argument and assigned variable."""
    out = set()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(("function", node.name))
            out.update(("argument", a.arg) for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs)
        elif isinstance(node, ast.ClassDef):
            out.add(("class", node.name))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(("variable", node.id))
    return out


def naming(rule, before: Tree, final: Tree, is_test, own: set[str]) -> list[dict]:
    broken = []
    for path, tree, old in _sources(before, final, is_test):
        for kind, name in sorted(_names(tree) - _names(old)):
            ok = CAPWORDS.match(name) if kind == "class" else SNAKE.match(name) or (
                kind == "variable" and CONSTANT.match(name))
            if not ok:
                broken.append({"rule": rule.text, "path": path, "why": f"{kind} {name}"})
    return broken


CHECKS = {"imports": imports, "documented_and_tested": documented_and_tested, "naming": naming}


def check(rules, before: Tree, final: Tree, is_test, own: set[str]) -> list[dict]:
    """Every rule with a check, over the step from `before` to `final` -> the broken ones [{rule, path, why}]."""
    return [b for r in rules if r.check for b in CHECKS[r.check](r, before, final, is_test, own)]
