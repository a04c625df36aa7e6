"""k3 quantize IN OUT --experts mxfp4 [--report FILE]"""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("src", metavar="IN", help="checkpoint with BF16/FP32 routed experts")
    p.add_argument("dst", metavar="OUT", help="new directory for the MXFP4 checkpoint")
    p.add_argument("--experts", choices=["mxfp4"], required=True,
                   help="expert format to write (compressed-tensors mxfp4-pack-quantized)")
    p.add_argument("--report", metavar="FILE", help="write per-tensor error (rel L2, max abs) as JSON")


def run(args) -> int:
    from k3.checkpoint.writer import atomic_write_text
    from k3.tools.progress import byte_progress
    from k3.tools.quantize import quantize_checkpoint, source_bytes

    with byte_progress("quantizing", source_bytes(args.src)) as tick:
        report = quantize_checkpoint(args.src, args.dst, tick=tick)
    summary = report.to_dict()
    print(f"quantized {summary['quantized']} expert matrices, copied {summary['passed_through']} tensors "
          f"byte for byte; {summary['bytes_in']:,} -> {summary['bytes_out']:,} bytes; "
          f"rel L2 error mean {summary['mean_rel_l2']:.4f}, max {summary['max_rel_l2']:.4f}"
          + (f" ({summary['worst_tensor']})" if summary["worst_tensor"] else ""))
    if args.report:
        from pathlib import Path

        rows = [e.__dict__ for e in report.errors]
        atomic_write_text(Path(args.report), json.dumps({"summary": summary, "tensors": rows}, indent=1))
    print(json.dumps(summary))
    return 0
