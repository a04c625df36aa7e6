"""Plain-text rendering of a `DoctorReport`."""

from __future__ import annotations


def gb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e9:,.2f} GB"


def format_doctor(r) -> str:
    lines = [f"k3 doctor: {r.target}", ""]
    if r.format:
        f = r.format
        lines.append(f"format: {f['model_type']}, quantisation {f['quant_method'] or 'none'} / "
                     f"{f['quant_format'] or '-'}, experts {f['expert_format']}; {f['layers']} layers, "
                     f"{f['experts']} experts, top-{f['top_k']}")
        lines += ["", "k3 code paths:"] + [f"  {row['part']:<32} {row['k3']}" for row in r.code_paths]
    lines += ["", "unsupported: " + ("none" if not r.unsupported else "")] + [f"  {u}" for u in r.unsupported]
    lines += ["problems: " + ("none" if not r.problems else "")] + [f"  {p}" for p in r.problems]
    m = r.machine
    cold = "" if m["disk_read_cold"] else " (may be cached)"
    lines += ["", f"machine: {m['cpus']} CPUs, {gb(m['mem_total'])} RAM ({gb(m['mem_available'])} available), "
              f"{gb(m['disk_free'])} free at {m['disk_path']}"]
    if m["disk_read_bytes_per_s"] or m["mem_bytes_per_s"]:
        lines.append(f"  measured: disk read {gb(m['disk_read_bytes_per_s'])}/s{cold}, memory copy "
                     f"{gb(m['mem_bytes_per_s'])}/s")
    else:
        lines.append("  bandwidths not measured (--no-measure)")
    if r.plan:
        lines += ["", *plan_lines(r.plan)]
    lines += ["", "other engines and what they need for this checkpoint:"]
    lines += [f"  {e['engine']:<16} official MXFP4: {e['loads_official_mxfp4']:<8} {e['hardware']}; {e['needs']} "
              f"[{e['ref']}]" for e in r.engines]
    return "\n".join(lines)


def plan_lines(p: dict) -> list[str]:
    if p["mode"] == "refused":
        return [f"memory plan (budget {gb(p['budget'])}): refused - k3 will not run this model at this budget",
                f"  {p['refusal']}"]
    out = [f"memory plan (budget {gb(p['budget'])}): {p['mode']}",
           f"  trunk {gb(p['trunk_bytes'])}"
           + (f" ({p['trunk_format']})" if p.get("trunk_format", "as stored") != "as stored" else "")
           + f"; routed experts {gb(p['expert_bytes_total'])}, "
           f"cached {gb(p['expert_cache_bytes'])} (hit rate ~{p['hit_rate']:.0%})",
           f"  expert bytes per token {gb(p['expert_bytes_per_token'])}, streamed {gb(p['streamed_bytes_per_token'])}"]
    if p.get("streamed_layers"):
        out.insert(2, f"  trunk does not fit: {p['streamed_layers']} layers' large matrices stream from the shards "
                      f"({gb(p['trunk_streamed_bytes_per_token'])} a token, counted in streamed); the rest of the trunk, "
                      "then experts, stay resident (trunk bytes are read every token)")
    if p["seconds_per_token"] is not None:
        out.append(f"  expected {p['seconds_per_token']:.3f} s/token at batch 1 (bandwidth bound)")
    else:
        out.append("  (no speed estimate without measured bandwidths; drop --no-measure)")
    return out
