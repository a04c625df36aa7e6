"""The results page keeps a table for each CPU a benchmark ran on: records of one kind on two CPU models
(two Xeons a VM names alike) each keep their latest run, and a record carries the model it ran on."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "scripts"))
import record  # noqa: E402
import results_tables  # noqa: E402


def _record(commit: str, cpu: dict, decode: float) -> dict:
    return {"date": "2026-12-07", "commit": commit, "command": "python benchmarks/x.py", "cpu": cpu,
            "result": {"decode": decode}}


def test_two_cpus_of_one_kind_keep_a_table_each_and_older_records_keep_theirs():
    xeon = {"model": "Intel(R) Xeon(R) Processor", "kind": "Intel AVX-512", "cores": 2}
    ice = dict(xeon, id="family 6, model 106", cache="49152 KB")
    sapphire = dict(xeon, id="family 6, model 143", cache="107520 KB")
    records = {"x": [_record("a1", xeon, 1.0), _record("b2", ice, 2.0), _record("c3", sapphire, 3.0),
                     _record("d4", ice, 4.0)]}
    page = results_tables.results_page(records)
    headings = [line for line in page.splitlines() if line.startswith("### ")]
    assert headings == ["### Intel AVX-512", "### Intel AVX-512 (family 6, model 106)",
                        "### Intel AVX-512 (family 6, model 143)"]
    ice_section = page.split("### Intel AVX-512 (family 6, model 106)")[1].split("###")[0]
    assert "commit `d4`" in ice_section and "49152 KB last-level cache" in ice_section   # its latest run
    assert "commit `b2`" not in page


def test_a_record_names_this_cpus_family_and_model():
    info = Path("/proc/cpuinfo").read_text()

    def first(name):
        found = re.search(rf"^{name}\s*: (.*)$", info, re.MULTILINE)
        return found.group(1).strip() if found else ""

    cpu = record.cpu()
    family, model = first("cpu family"), first("model")
    assert cpu["id"] == (f"family {family}, model {model}" if family and model else "")
    assert cpu["model"] == (first("model name") or cpu["model"])
    assert cpu["cache"] == first("cache size") and cpu["cores"] == info.count("\nprocessor") + info.startswith("processor")


def test_a_benchmark_run_on_a_choice_of_checkpoints_keeps_a_table_for_each():
    cpu = {"model": "AMD EPYC", "kind": "AMD AVX-512", "id": "family 26, model 2", "cores": 2}
    recs = [_record("a1", cpu, 1.0), _record("b2", cpu, 2.0), _record("c3", cpu, 3.0)]
    recs[0]["result"]["checkpoint"] = recs[2]["result"]["checkpoint"] = "wide"
    headings = [line for line in results_tables.results_page({"x": recs}).splitlines() if line.startswith("### ")]
    assert headings == ["### AMD AVX-512 (family 26, model 2)", "### AMD AVX-512 (family 26, model 2), wide checkpoint"]
