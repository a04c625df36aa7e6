"""Every registered op, native against its PyTorch reference, on its examples at K3's dimensions
(k3.ops.harness; the registry's `examples(large=True)`), at each instruction set this CPU runs.

    .venv/bin/python benchmarks/ops.py                 # every op, every level
    .venv/bin/python benchmarks/ops.py --ops rms_norm kda_step --levels avx2

Prints a table (median seconds per call of each side, and the reference's time over the native one) and one
JSON line. The check of each result against the reference is the test suite's (tests/ops/test_op_harness.py);
here each example is also checked once, so a timing never stands for a wrong kernel.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from k3.ops.harness import compare, kernels, seconds  # noqa: E402
from k3.ops.native import SIMD_LEVELS as LEVELS, native, simd_level  # noqa: E402
from k3.testing.tolerance import rel_l2  # noqa: E402


def measure(names: list[str], levels: list[str], repeat: int) -> list[dict]:
    rows, module = [], native()
    for level in levels:
        module.set_simd(LEVELS[level])
        for name in names:
            kernel = kernels()[name]
            for example in kernel.examples(True):
                worst = max((rel_l2(n, r) for _, n, r in compare(kernel, example) if n.is_floating_point()), default=0.0)
                if worst > kernel.tol:
                    raise SystemExit(f"{name} [{example.label}] at {level}: native is {worst:.2e} from the reference")
                nat, ref = seconds(kernel, example, True, repeat), seconds(kernel, example, False, repeat)
                rows.append({"op": name, "example": example.label, "level": level, "native_s": nat,
                             "reference_s": ref, "speedup": ref / nat})
    module.set_simd(simd_level())
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", nargs="+", help="registered names (default: all)")
    ap.add_argument("--levels", nargs="+", choices=list(LEVELS), help="default: every level this CPU runs")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    if native() is None:
        raise SystemExit("the native kernels are not built: python -m k3.ops.native")
    names = args.ops or list(kernels())
    levels = args.levels or [lv for lv, n in LEVELS.items() if n <= simd_level()]
    rows = measure(names, levels, args.repeat)
    print(f"{'op':<18}{'example':<52}{'level':<8}{'native ms':>11}{'ref ms':>11}{'ref/native':>12}")
    for r in rows:
        print(f"{r['op']:<18}{r['example'][:50]:<52}{r['level']:<8}{r['native_s'] * 1e3:>11.3f}"
              f"{r['reference_s'] * 1e3:>11.3f}{r['speedup']:>12.2f}")
    print(json.dumps({"bench": "ops", "levels": levels, "rows": rows}))   # record.py adds date, commit, CPU, command


if __name__ == "__main__":
    main()
