"""k3 quantize IN OUT (--experts mxfp4 | --trunk int8 [--copy]) [--report FILE]"""

from __future__ import annotations

import json


def add_arguments(p) -> None:
    p.add_argument("src", metavar="IN", help="checkpoint to quantise")
    p.add_argument("dst", metavar="OUT", help="new directory for the derived checkpoint")
    p.add_argument("--experts", choices=["mxfp4"],
                   help="BF16/FP32 routed experts -> compressed-tensors mxfp4-pack-quantized (the release's format)")
    p.add_argument("--trunk", choices=["int8"],
                   help="the trunk's projection matrices -> int8 with per-32 bf16 scales (int-quantized); OUT holds "
                        "only those, IN's shards hard-linked beside them")
    p.add_argument("--copy", action="store_true", help="with --trunk: copy IN's shards into OUT instead of hard-linking")
    p.add_argument("--report", metavar="FILE", help="write per-tensor error (rel L2, max abs) as JSON")


def run(args) -> int:
    from k3.checkpoint.writer import atomic_write_text
    from k3.tools.progress import byte_progress

    if bool(args.experts) == bool(args.trunk):
        raise ValueError("give one of --experts mxfp4 or --trunk int8 (for both, quantise twice: experts first)")
    if args.trunk:
        from k3.tools.quantize_trunk import quantize_trunk, trunk_source_bytes

        with byte_progress("quantizing", trunk_source_bytes(args.src)) as tick:
            report = quantize_trunk(args.src, args.dst, copy=args.copy, tick=tick)
        what = "trunk matrices to int8"
    else:
        from k3.tools.quantize import quantize_checkpoint, source_bytes

        with byte_progress("quantizing", source_bytes(args.src)) as tick:
            report = quantize_checkpoint(args.src, args.dst, tick=tick)
        what = "expert matrices to mxfp4"
    summary = report.to_dict()
    print(f"quantized {summary['quantized']} {what}, {summary['passed_through']} tensors copied byte for byte; "
          f"{summary['bytes_in']:,} -> {summary['bytes_out']:,} bytes written; "
          f"rel L2 error mean {summary['mean_rel_l2']:.4f}, max {summary['max_rel_l2']:.4f}"
          + (f" ({summary['worst_tensor']})" if summary["worst_tensor"] else ""))
    if args.report:
        from pathlib import Path

        rows = [e.__dict__ for e in report.errors]
        atomic_write_text(Path(args.report), json.dumps({"summary": summary, "tensors": rows}, indent=1))
    print(json.dumps(summary))
    return 0
