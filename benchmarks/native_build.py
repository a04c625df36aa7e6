"""What building the native kernels costs: a first build, a rebuild after an edit to one kernel unit and
after an edit to the shared header, and a fresh process importing the published library. Each runs in its
own process on a copy of k3/ops/native in a temporary cache, with the flags this CPU gets.

    .venv/bin/python benchmarks/native_build.py

Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from k3.ops.native import CFLAGS, build, simd_level  # noqa: E402

CHILD = ("import sys, time; from pathlib import Path; from k3.ops.native import build as b; "
         "src, cache, flags = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]; start = time.monotonic(); "
         "final = cache / ('k3_native_' + b.build_key(b.sources_digest(src), flags)); "
         "m = b.import_from(final) if (final / 'k3_native.so').is_file() else "
         "b.build('k3_native', b.units(src), flags, cache / 'build', final, include=src); "
         "m.set_simd(0); print(time.monotonic() - start)")


def timed_child(src: Path, cache: Path, flags: list[str]) -> float:
    """Seconds the child spent building (or importing) the module, and using it once."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(src), str(cache), *flags], capture_output=True,
                          text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"the build failed:\n{done.stderr[-3000:]}")
    return float(done.stdout.split()[-1])


def measure(unit: str) -> dict:
    flags = CFLAGS + (["-mavx2", "-mfma"] if simd_level() >= 1 else [])
    with tempfile.TemporaryDirectory(prefix="k3-native-build-") as tmp:
        src, cache = Path(tmp) / "src", Path(tmp) / "cache"
        shutil.copytree(build.HERE, src, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
        rows = {"first_build_s": timed_child(src, cache, flags)}
        with open(src / unit, "a") as f:
            f.write("// an edit\n")
        rows["one_unit_edit_s"] = timed_child(src, cache, flags)
        with open(src / "k3.h", "a") as f:
            f.write("// an edit\n")
        rows["header_edit_s"] = timed_child(src, cache, flags)
        rows["published_import_s"] = timed_child(src, cache, flags)
        objects = sorted(p.stem for p in (cache / "build").glob("*.o"))
    return {"units": len(objects), "edited_unit": unit, "flags": flags, **rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--unit", default="norm.cpp", help="the kernel unit to edit (default norm.cpp)")
    args = ap.parse_args()
    start = time.monotonic()
    r = measure(args.unit)
    print(f"{'step':<40}{'seconds':>10}")
    for label, key in (("first build", "first_build_s"), (f"after an edit to {args.unit}", "one_unit_edit_s"),
                       ("after an edit to k3.h", "header_edit_s"), ("a later process (import)", "published_import_s")):
        print(f"{label:<40}{r[key]:>10.1f}")
    print(f"({r['units']} units; {time.monotonic() - start:.0f} s in all)")
    print(json.dumps({"bench": "native_build", **r}))   # record.py adds date, commit, CPU, command


if __name__ == "__main__":
    main()
