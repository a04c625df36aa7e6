"""Tables from recorded benchmark results (benchmarks/results/*.jsonl; see benchmarks/record.py).

Each benchmark gets a section; each CPU kind its latest record, with the date, commit and command it came
from. Benchmarks with a known shape show their headline figures; any other shows its scalar results.
"""

from __future__ import annotations

import statistics

ABOUT = {
    "compare": "k3 against llama.cpp (and mlx-lm) on one random checkpoint in K3's proportions, side by side",
    "engine": "the engine against a bare loop; decode against context length and batch size",
    "structured": "the cost of constrained decoding; the grammar library's time per token",
    "tool_calls": "tool calls whose arguments fail their schema, over generated and real-world schemas",
    "schema_corpus": "structured outputs on the public schema corpus: schemas accepted per subset (k3, llguidance alone, "
                     "xgrammar), compile time, mask time per token, decode cost of a constraint",
    "prefix_cache": "time to first token with the prefix cache on and off, multi-turn and shared-prefix",
    "speculative": "speculative decoding against plain decoding",
    "eval_harness": "the evaluation harness's own costs (sandbox, Inspect)",
    "engine_thread": "a served request with the model built on the stepping thread or not",
    "vision": "the vision tower at K3's dimensions: seconds per image by size and where they go; TTFT with an image",
    "ops": "every registered op, native against its PyTorch reference, at K3's dimensions (k3/ops/harness.py)",
    "compiled": "`torch.compile` of the bare model against eager decode (the native plan) and the plan off, batch 1",
    "prefill_gemm": "who multiplies prefill-sized products: k3's blocked GEMM against MKL's sgemm on a widened copy of the "
                    "weight, in a whole prefill and product by product",
    "decode_settings": "the decode settings whose default depends on the CPU: batch-1 decode with the defaults against "
                       "each other value of a setting, in turns",
    "load_sweep": "k3 check's load sweep beside GuideLLM's on the same server (the bundled model under `k3 serve`), both "
                  "synchronous, throughput and Poisson rates between; k3 also scores the answers at each level and decides "
                  "its requirements on their intervals",
    "foreign_server": "k3's commands against llama.cpp's `llama-server` serving the bundled model as GGUF (a server nobody "
                      "here wrote): what ran, its figure, and what the server does not report that k3 reads",
    "challenge": "the sim3d agent challenge run whole by the scripted agents (reference, do-nothing, cheat) and the bundled "
                 "model in-process on a few samples: the leaderboard their logs make, each task's time by part (reference, "
                 "one task at a time), the challenge's size",
    "image_starvation": "a text-only chat beside six clients of heavy images on one `k3 serve`: its latency alone and "
                        "under load, the image requests answered and refused, peak memory",
    "native_build": "building the native kernels: a first build, a rebuild after an edit to one unit and to the shared "
                    "header, a later process importing the published library (seconds)",
}


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _flat(d: dict, prefix: str = "", depth: int = 0) -> list[tuple[str, object]]:
    rows = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and depth < 2:
            rows += _flat(v, key + ".", depth + 1)
        elif isinstance(v, (int, float, str, bool)) and not (isinstance(v, str) and len(v) > 60):
            rows.append((key, v))
    return rows


def _engine(r: dict) -> list[str]:
    rows = ["| measure | " + " | ".join(c["checkpoint"] for c in r["results"]) + " | target |",
            "|---|" + "---|" * len(r["results"]) + "---|"]
    keys = (("engine / bare loop, batch 1", "engine_over_bare", "≥ 0.95"),
            ("decode at 8K / at 256 context", "context_8k_over_256", "≥ 0.9"),
            ("decode at 16K / at 256 context", "context_16k_over_256", "≥ 0.85"),
            ("decode batch 32 / batch 1", "batch32_over_batch1", "≥ 10"),
            ("engine, batch 1 (tok/s)", "engine_tok_s", ""),
            ("weights read per token (MB)", "weight_bytes_per_token", ""))
    for label, key, target in keys:
        if any(key not in c for c in r["results"]):
            continue                               # older records measured 16K only
        vals = [c[key] / 1e6 if key.endswith("bytes_per_token") else c[key] for c in r["results"]]
        rows.append(f"| {label} | " + " | ".join(_fmt(v) for v in vals) + f" | {target} |")
    return rows


def _structured(r: dict) -> list[str]:
    d = r["decode"]
    rows = ["| measure | value |", "|---|---|",
            f"| constrained / plain decode | {_fmt(d['constrained_over_plain'])} |"]
    if "drafted_over_constrained" in d:
        rows.append(f"| constrained with drafts (k=4) / constrained | {_fmt(d['drafted_over_constrained'])} |")
    for m in r["mask"]:
        rows.append(f"| mask + take at {m['vocab']:,} tokens, p50 / p90 (ms) | {_fmt(m['mask_ms_p50'])} / "
                    f"{_fmt(m['mask_ms_p90'])} |")
    return rows


def _compare(r: dict) -> list[str]:
    rows = ["| trunk | measure | k3 | llama.cpp | k3 / llama.cpp |", "|---|---|---|---|---|"]
    for trunk, ours, other in (("bf16", "k3", "llama.cpp"), ("int8 / Q8_0", "k3-int8-trunk", "llama.cpp-q8_0")):
        if ours not in r["median"] or other not in r["median"]:
            continue
        turns = r.get("interleaved", {})
        if f"decode_ratio_{ours}_over_{other}" in turns:
            rows.append(f"| {trunk} | decode in turns (tok/s) | {_fmt(turns['decode_tok_s'][ours])} | "
                        f"{_fmt(turns['decode_tok_s'][other])} | **{_fmt(turns[f'decode_ratio_{ours}_over_{other}'])}** |")
        med = r["median"]
        rows += [f"| {trunk} | decode, separate runs (tok/s, median) | {_fmt(med[ours]['decode_tok_s'])} | "
                 f"{_fmt(med[other]['decode_tok_s'])} | {_fmt(r[f'decode_ratio_{ours}_over_{other}'])} |",
                 f"| {trunk} | prefill at 512 tokens (tok/s, median) | {_fmt(med[ours]['prefill_tok_s'])} | "
                 f"{_fmt(med[other]['prefill_tok_s'])} | **{_fmt(r[f'prefill_ratio_{ours}_over_{other}'])}** |",
                 f"| {trunk} | decode time / bandwidth floor | {_fmt(r['decode_over_floor'][ours])} | "
                 f"{_fmt(r['decode_over_floor'][other])} | |"]
    probes = r.get("bandwidth_by_probe", {})
    if probes:
        rows += ["", "Read bandwidth, median of the samples: " + ", ".join(
            f"{k} probe {_fmt(statistics.median(v) / 1e9)} GB/s" for k, v in probes.items()) + "."]
    return rows


def _tool_calls(r: dict) -> list[str]:
    rows = ["| model | calls | finished | arguments that fail their schema |", "|---|---|---|---|"]
    for model, t in r["totals"].items():
        rows.append(f"| {model} | {_fmt(t['calls'])} | {_fmt(t['finished'])} | **{_fmt(t['invalid'])}** |")
    return rows


def _schema_corpus(r: dict) -> list[str]:
    rows = ["| subset | schemas | k3 | llguidance alone | xgrammar | compile ms (median / max) | xgrammar compile ms |",
            "|---|---|---|---|---|---|---|"]
    for name, t in r["subsets"].items():
        rows.append(f"| {name} | {t['schemas']} | **{t['k3']}** | {t['llguidance_alone']} | {_fmt(t['xgrammar'])} | "
                    f"{_fmt(t['compile_ms_median'])} / {_fmt(t['compile_ms_max'])} | {_fmt(t['xgrammar_compile_ms_median'])} |")
    return rows + ["", "| per token | value |", "|---|---|", f"| mask, median / p99 (ms) | {_fmt(r['mask_ms_median'])} / "
                   f"{_fmt(r['mask_ms_p99'])} |", f"| decode, constrained / free time | **{_fmt(r['cost_per_token'])}** |"]


def _prefix_cache(r: dict) -> list[str]:
    rows = ["| multi-turn turn | prompt tokens | TTFT cache on / off | floor (new / all tokens) |",
            "|---|---|---|---|"]
    for t in r["multi_turn"]["turns"]:
        rows.append(f"| {t['turn']} | {_fmt(t['prompt_tokens'])} | {_fmt(t['ratio'])} | {_fmt(t['floor'])} |")
    shared = r.get("shared_prefix")
    if shared:
        rows += ["", "| shared prefix | value |", "|---|---|",
                 f"| time, cache off / on | **{_fmt(shared['speedup'])}** |",
                 f"| prompt tokens reused | {_fmt(shared['hit_rate'])} |"]
    return rows


def _speculative(r: dict) -> list[str]:
    rows = ["| checkpoint | mode | tok/s | vs plain |", "|---|---|---|---|"]
    for part in ("random", "bundled", "streamed"):
        rates = r.get(part, {}).get("tokens_per_s", {})
        plain = rates.get("plain")
        for mode, rate in rates.items():
            ratio = "" if mode == "plain" or not plain else _fmt(rate / plain)
            rows.append(f"| {part} | {mode} | {_fmt(rate)} | {ratio} |")
    w = r.get("random", {}).get("window_cost_vs_one_token")
    if w:
        sizes = [k for k in w if k.startswith("T=")]
        rows += ["", f"A verify window of T positions against one token's forward ({_fmt(w['one_token_ms'])} ms), "
                 "random checkpoint:", "", "| " + " | ".join(sizes) + " |", "|" + "---|" * len(sizes),
                 "| " + " | ".join(_fmt(w[k]) for k in sizes) + " |"]
    return rows


def _eval_harness(r: dict) -> list[str]:
    ms = lambda key: _fmt(r[key] * 1e3)                      # noqa: E731
    return ["| what | value |", "|---|---|",
            f"| fresh sandbox, made and closed (ms) | {ms('sandbox_make_close_s')} |",
            f"| `exec /bin/true` in it (ms) | {ms('sandbox_exec_true_s')} |",
            f"| `run_python 'pass'` in it (ms) | {ms('sandbox_run_python_s')} |",
            f"| judged check, worker + judge (ms) | {ms('sandbox_judge_s')} |",
            f"| bare `python -I -c pass` (ms) | {ms('bare_python_s')} |",
            f"| challenge task, scripted agent (s) | {_fmt(r['challenge_task_s'])} |",
            f"| an Inspect run's fixed cost, bundled model (s) | {_fmt(r['local_harness_fixed_s'])} |",
            f"| refusal item through Inspect, 32 tokens (ms) | {ms('local_item_s')} |",
            f"| the same prompts straight through `LLM.chat` (ms) | {ms('local_direct_item_s')} |"]


def _vision(r: dict) -> list[str]:
    floor = "gflop" in r["tower"][0]          # records before the floor was measured have no FLOPs
    head = "| image | patches | image tokens | tower + projector (s) |" + (
        " GFLOP | / fp32 floor | / best floor |" if floor else "") + " largest part | peak RSS (GB) |"
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for t in r["tower"]:
        part, secs = next(iter(t["parts"].items()))
        extra = f" {_fmt(t['gflop'])} | {_fmt(t['over_floor_fp32'])} | {_fmt(t['over_floor_best'])} |" if floor else ""
        rows.append(f"| {t['size']}x{t['size']} | {_fmt(t['patches'])} | {_fmt(t['image_tokens'])} | "
                    f"{_fmt(t['seconds'])} |{extra} {part} ({secs / t['seconds']:.0%}) | {_fmt(t['peak_rss_gb'])} |")
    if r["tower"] and "bf16_seconds" in r["tower"][0]:
        rows += ["", "| image | float32 (s) | `--vision-dtype bfloat16` (s) | speed-up | bf16 / its floor |", "|---|---|---|---|---|"]
        rows += [f"| {t['size']}x{t['size']} | {_fmt(t['seconds'])} | {_fmt(t['bf16_seconds'])} | "
                 f"{_fmt(t['bf16_speedup'])} | {_fmt(t['bf16_over_floor_best'])} |" for t in r["tower"]]
    if floor:
        g = r["gemm_gflops"]
        rows += ["", f"Floor: FLOPs over the measured `torch.mm` rate at the tower's MLP shape: fp32 {_fmt(g['fp32'])} "
                     f"GFLOP/s (the tower computes in fp32), bf16 {_fmt(g['bf16'])} GFLOP/s (the best this CPU has)."]
    f = r["ttft"]
    rows += ["", "| time to first token (small text model in K3's layout) | value |", "|---|---|",
             f"| without an image ({f['prompt_tokens_text']} tokens) | {_fmt(f['ttft_text_s'] * 1e3)} ms |",
             f"| with one {f['size']}x{f['size']} image ({f['prompt_tokens_image']} tokens) | "
             f"{_fmt(f['ttft_image_s'] * 1e3)} ms |"]
    return rows


def _ops(r: dict) -> list[str]:
    rows = ["| op | example | level | native (ms) | reference (ms) | reference / native |", "|---|---|---|---|---|---|"]
    for x in r["rows"]:
        rows.append(f"| `{x['op']}` | {x['example']} | {x['level']} | {x['native_s'] * 1e3:.3f} | "
                    f"{x['reference_s'] * 1e3:.3f} | {_fmt(x['speedup'])} |")
    return rows


def _prefill_gemm(r: dict) -> list[str]:
    p = r["prefill"]
    dot = "bf16_dot_over_native" in p   # older records measured native and torch only

    def cells(native, torch, ratio, dot_rate="", dot_ratio="") -> str:
        return f"{native} | {torch} | {ratio} |" + (f" {dot_rate} | {dot_ratio} |" if dot else "")

    rows = ["| product | rows | outputs | depth | native (GFLOP/s) | torch (GFLOP/s) | native / torch |"
            + (" bf16-dot (GFLOP/s) | bf16-dot / native |" if dot else ""),
            "|---|---|---|---|---|---|---|" + ("---|---|" if dot else ""),
            f"| whole prefill (tok/s) | 512 | | | " + cells(_fmt(p['tok_s']['native']), _fmt(p['tok_s']['torch']),
                                                      f"**{_fmt(p['native_over_torch'])}**",
                                                      _fmt(p['tok_s'].get('bf16-dot')), _fmt(p.get('bf16_dot_over_native')))]
    for x in r["products"]:
        rows.append(f"| {x['weights']} | {x['rows']} | {x['outputs']} | {x['depth']} | "
                    + cells(_fmt(x['native_gflop_s']), _fmt(x['torch_gflop_s']), _fmt(x['native_over_torch']),
                            _fmt(x.get('bf16-dot_gflop_s')), _fmt(x.get('bf16_dot_over_native'))))
    notes = ["", f"The default on this CPU: `{r['default']}`."]
    if dot:
        notes.append(f"bf16-dot rounds x to bf16 (an opt-in; this CPU's bf16 dot-product units: "
                     f"{'yes' if r.get('bf16_dot_units') else 'no'}); its logits differ from native's by "
                     f"{p['bf16_dot_logits_rel_l2']:.1e} (relative L2).")
    return rows + notes


def _decode_settings(r: dict) -> list[str]:
    rows = ["| setting | default here | against | default / against (decode, in turns) | rounds the default won |",
            "|---|---|---|---|---|"]
    for x in r["settings"]:
        won = sum(p > 1 for p in x["per_round"])
        rows.append(f"| `{x['setting']}` | `{x['default']}` | `{x['other']}` | **{_fmt(x['default_over_other'])}** | "
                    f"{won} of {len(x['per_round'])} |")
    return rows


def _load_sweep(r: dict) -> list[str]:
    def ordered(rows: list[dict]) -> list[dict]:       # synchronous, the rates, throughput: ascending load
        rank = lambda x: (0 if x["level"].startswith("synchronous") else 2 if x["level"].startswith("throughput") else 1,
                          x["rate"] or 0)              # noqa: E731
        return sorted(rows, key=rank)

    ms = lambda v: "-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}"      # noqa: E731
    ours, theirs = ordered(r["k3"]["rows"]), ordered(r["guidellm"]["rows"])
    rows = ["| k3 level | req/s | TTFT p50 / p90 (ms) | TPOT p50 (ms) | status | GuideLLM level | req/s | "
            "TTFT p50 / p90 (ms) | ITL p50 (ms) |", "|---|---|---|---|---|---|---|---|---|"]
    for a, b in zip(ours, theirs):
        rows.append(f"| {a['level']} | {_fmt(a['rate'])} | {ms(a['ttft_p50_ms'])} / {ms(a['ttft_p90_ms'])} | "
                    f"{ms(a['tpot_p50_ms'])} | {a['status']} | {b['level']} | {_fmt(b['rate'])} | "
                    f"{ms(b['ttft_p50_ms'])} / {ms(b['ttft_p90_ms'])} | {ms(b['tpot_p50_ms'])} |")
    return rows + ["", f"{r['items']} requests a level, {r['max_tokens']} tokens each; k3's requirements "
                   f"{', '.join('`' + q + '`' for q in r['requirements'])}: {r['k3']['boundary']}. GuideLLM "
                   f"{r['guidellm_version']}; its ITL is vLLM's TPOT, the figure k3 reports as TPOT. Achieved rates: k3 "
                   "counts the calls completed between the first send and the last token, GuideLLM averages its "
                   "requests per second."]


def _foreign_server(r: dict) -> list[str]:
    rows = ["| command | exit | result |", "|---|---|---|"]
    rows += [f"| `{x['command']}` | {x['exit']} | {x['figure']} |" for x in r["runs"]]
    rows += ["", f"What k3 reads, against {r['server']}:", "", "| k3 reads | the server gives it | where not, k3 |",
             "|---|---|---|"]
    rows += [f"| {k} | {'yes' if v else 'no'} | {r['without'].get(k, '')} |" for k, v in r["server_reports"].items()]
    return rows + ["", "Exit codes: 0 ran (or PASS), 1 FAIL, 2 refused before running, 3 INCONCLUSIVE. The bundled "
                   "model writes prose and is cut at the token limit, so its refusal rates have n = 0: "
                   "INCONCLUSIVE is the honest verdict."]


def challenge_leaderboard(r: dict) -> list[str]:
    """The leaderboard of a challenge record (benchmarks/challenge.py), as `k3 eval --leaderboard` prints it."""
    rows = ["| model | tasks completed | pass rate (95 % CI) | interventions | hallucinations | turns | tokens in / out "
            "| run's wall time (s) |", "|---|---|---|---|---|---|---|---|"]
    for x in r["runs"]:
        low, high = x["pass_rate"]["ci95"]
        rows.append(f"| {x['model']} | {x['completed']:g} / {x['tasks']} ({x['steps_run']:g} run) | "
                    f"{x['pass_rate']['rate']:.0%} ({low:.0%}-{high:.0%}) | {x['interventions']:g} | {x['hallucinations']:g} "
                    f"| {x['turns']:g} | {x['input_tokens']:,} / {x['output_tokens']:,} | {x['wall_s']:g} |")
    return rows


def _challenge(r: dict) -> list[str]:
    size, t = r["size"], r["task_seconds"]
    return [*challenge_leaderboard(r), "",
            f"{r['challenge']}: {size['tasks']} tasks ({size['bugs']} bugs, {size['features']} features, a chain of "
            f"{size['chain_steps']} steps), {size['files']} files, {size['code_lines']} lines of code, {size['test_lines']} "
            f"of shipped tests, {size['hidden_test_lines']} of hidden tests.", "",
            "| part of a task (reference agent) | median (s) | max (s) |", "|---|---|---|",
            *[f"| {part.removesuffix('_s').replace('_', ' ')} | {_fmt(v['median'])} | {_fmt(v['max'])} |"
              for part, v in t.items() if v]]


SHAPES = {"challenge": _challenge, "foreign_server": _foreign_server, "load_sweep": _load_sweep, "decode_settings": _decode_settings, "prefill_gemm": _prefill_gemm, "ops": _ops, "vision": _vision, "eval_harness": _eval_harness, "engine": _engine, "structured": _structured, "compare": _compare, "tool_calls": _tool_calls,
          "schema_corpus": _schema_corpus, "prefix_cache": _prefix_cache, "speculative": _speculative}


def _table(name: str, result: dict) -> list[str]:
    if name in SHAPES:
        try:
            return SHAPES[name](result)
        except (KeyError, TypeError):
            pass                                   # an older record's shape: show its scalars
    meta = ("bench", "date", "commit", "cpu", "command")      # the heading above the table has them
    return ["| result | value |", "|---|---|"] + [f"| {k} | {_fmt(v)} |" for k, v in _flat(result) if k not in meta]


def _machine(rec: dict) -> str:
    """A record's CPU as a heading: its kind, and its family and model where the record has them (older
    records do not), so two CPUs of one kind keep a table each; and the checkpoint, where a benchmark
    runs on a choice of them (decode_settings.py)."""
    cpu, checkpoint = rec["cpu"], rec["result"].get("checkpoint")
    name = f"{cpu['kind']} ({cpu['id']})" if cpu.get("id") else cpu["kind"]
    return f"{name}, {checkpoint} checkpoint" if checkpoint else name


def _latest_by_kind(records: list[dict]) -> dict[str, dict]:
    latest: dict[str, dict] = {}
    for rec in records:
        latest[_machine(rec)] = rec                # files are appended in time order
    return latest


def results_page(records: dict[str, list[dict]]) -> str:
    out = ["# Benchmark results", "",
           "Generated from the JSON lines the benchmark scripts print, kept by `benchmarks/record.py` in "
           "`benchmarks/results/`. Each table is the latest run on that CPU kind; how each benchmark "
           "measures is in [methodology](methodology.md). Ratios are the figures to read: absolute rates "
           "move with the machine's memory bandwidth from one run to the next.", ""]
    if not records:
        out.append("No results recorded yet.")
    else:
        out += ["## Across CPU kinds", "", "The latest run of each CPU kind, side by side: k3 against llama.cpp "
                "(`benchmarks/compare.py`) and the engine's own ratios (`benchmarks/engine.py`).", "",
                headline_table(records), ""]
        if records.get("compare") and records.get("engine"):
            out += [headline_table({"engine": records["engine"]}), ""]
    for name, recs in records.items():
        about = ABOUT.get(name, f"`benchmarks/{name}.py`")
        out += [f"## {name}", "", about[0].upper() + about[1:] + ".", ""]
        for kind, rec in sorted(_latest_by_kind(recs).items()):
            dirty = " (uncommitted changes)" if rec.get("dirty") else ""
            cache = f", {rec['cpu']['cache']} last-level cache" if rec["cpu"].get("cache") else ""
            out += [f"### {kind}", "", f"{rec['date']}, commit `{rec['commit']}`{dirty}, {rec['cpu']['model']} "
                    f"({rec['cpu']['cores']} cores{cache}): `{rec['command']}`", "", *_table(name, rec["result"]), ""]
        if len(recs) > 1:
            out += [f"{len(recs)} runs recorded in `benchmarks/results/{name}.jsonl`.", ""]
    return "\n".join(out)


def headline_table(records: dict[str, list[dict]]) -> str:
    """The README's one table: k3 against llama.cpp per CPU kind (latest run), else the engine's ratios."""
    if records.get("compare"):
        rows = ["| CPU | decode, k3 / llama.cpp (in turns) | prefill at 512, k3 / llama.cpp | k3 decode / bandwidth floor "
                "| date, commit |", "|---|---|---|---|---|"]
        for kind, rec in sorted(_latest_by_kind(records["compare"]).items()):
            r = rec["result"]
            turns = r.get("interleaved", {}).get("decode_ratio_k3_over_llama.cpp", r["decode_ratio_k3_over_llama.cpp"])
            rows.append(f"| {kind} | {_fmt(turns)} | {_fmt(r['prefill_ratio_k3_over_llama.cpp'])} | "
                        f"{_fmt(r['decode_over_floor']['k3'])} | {rec['date']}, `{rec['commit']}` |")
        return "\n".join(rows)
    recs = records.get("engine", [])
    if not recs:
        return "No benchmark results recorded yet (see the docs' benchmark pages)."
    rows = ["| CPU | engine / bare loop | 8K / 256 context | 16K / 256 context | batch 32 / 1 | date, commit |",
            "|---|---|---|---|---|---|"]
    for kind, rec in sorted(_latest_by_kind(recs).items()):
        c = next((c for c in rec["result"]["results"] if c["checkpoint"] == "compare"), rec["result"]["results"][0])
        rows.append(f"| {kind} | {_fmt(c['engine_over_bare'])} | {_fmt(c.get('context_8k_over_256', '-'))} | "
                    f"{_fmt(c['context_16k_over_256'])} | {_fmt(c['batch32_over_batch1'])} | {rec['date']}, `{rec['commit']}` |")
    return "\n".join(rows)
