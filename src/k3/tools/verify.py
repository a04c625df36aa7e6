"""`k3 verify DIR`: is this checkpoint complete and intact, and is it what its config says?

Checks, each reported with file and tensor: every shard the index names exists inside DIR and
parses (bounded header, contiguous data, exact file length); index and shard headers agree;
tensor names, shapes and dtypes match the layout config.json implies (missing, unexpected,
mis-shaped listed); no MXFP4 scale byte is 255; sizes and sha256 match a manifest when given.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from k3.checkpoint.errors import CheckpointError
from k3.checkpoint.header import ShardHeader, TensorEntry, read_header
from k3.checkpoint.layout import ExpectedTensor, expected_tensors
from k3.checkpoint.manifest import FileDigest, load_manifest, sha256_file
from k3.checkpoint.paths import member_path
from k3.checkpoint.vision_layout import vision_tensors
from k3.checkpoint.reader import TEXT_PREFIX, read_index, shard_map, superseded_names, text_name
from k3.config import load_config
from k3.config.model import ConfigError
from k3.tools.verify_content import check_scales_on_disk, check_tensor_spec, scan_non_finite


@dataclass(frozen=True)
class Problem:
    kind: str
    message: str
    file: str | None = None
    tensor: str | None = None

    def __str__(self) -> str:
        where = " ".join(x for x in (self.file, self.tensor) if x)
        return f"[{self.kind}] {where + ': ' if where else ''}{self.message}"


@dataclass
class VerifyReport:
    root: str
    files: int = 0
    tensors: int = 0
    bytes_hashed: int = 0
    scanned: bool = False             # --scan read every float weight for NaN/Inf
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, kind: str, message: str, file: str | None = None, tensor: str | None = None) -> None:
        self.problems.append(Problem(kind, message, file, tensor))

    def to_dict(self) -> dict:
        return asdict(self) | {"ok": self.ok}


def verify_checkpoint(root: str | Path, manifest: str | Path | dict[str, FileDigest] | None = None, *,
                      check_scales: bool = True, hash_files: bool = True, progress=None,
                      scan: bool = False) -> VerifyReport:
    """scan: also read every BF16/F16/F32 weight and report NaN/Inf by tensor (reads everything)."""
    root = Path(root)
    report = VerifyReport(str(root))
    headers, unread, superseded = _read_headers(root, report)
    if headers is not None:
        found = _index_agreement(headers, report, superseded)
        _layout_agreement(root, found, unread, report)
        if check_scales:
            check_scales_on_disk(root, found, report)
        if scan:
            scan_non_finite(root, found, report, progress)
    if manifest is not None:
        digests = manifest if isinstance(manifest, dict) else load_manifest(manifest)
        _manifest_agreement(root, digests, report, hash_files, progress)
    return report


def _read_headers(root: Path, report: VerifyReport):
    """-> ({file: (header, tensors the index places there)}, tensors in shards that could not be read,
    the index's superseded names), the index parsed once."""
    try:
        index = read_index(root)
        files = shard_map(root, index)
    except CheckpointError as e:
        report.add("index", str(e), e.file)
        return None, set(), set()
    headers: dict[str, tuple[ShardHeader, list[str] | None]] = {}
    for file, listed in sorted(files.items()):
        try:
            path = member_path(root, file)
            if not path.is_file():
                report.add("missing-file", "named by the index but absent; download it", file)
                continue
            headers[file] = (read_header(path, name=file), listed)
        except CheckpointError as e:
            report.add("shard", str(e), file, e.tensor)
    report.files = len(headers)
    referenced = set(files)
    for p in sorted(root.glob("*.safetensors")):
        if p.name not in referenced:
            report.warnings.append(f"{p.name} is not referenced by the index (stray or from another revision)")
    unread = {t for f, listed in files.items() if f not in headers for t in listed or ()}
    return headers, unread, superseded_names(index)


def _index_agreement(headers, report: VerifyReport, superseded: set[str]) -> dict[str, tuple[str, TensorEntry]]:
    """stored name -> (file, header entry) where the index places it; index entries the shard lacks are
    problems, and so are tensors a shard holds that the index does not place there, unless superseded."""
    found: dict[str, tuple[str, TensorEntry]] = {}
    for file, (header, listed) in headers.items():
        for name in listed or ():
            if name not in header.entries:
                report.add("index-mismatch", "the index places this tensor here but the shard does not hold it",
                           file, name)
        listed_set = set(listed) if listed is not None else None
        for name, entry in header.entries.items():
            if listed_set is not None and name not in listed_set:
                if name in superseded:
                    continue
                report.add("index-mismatch", "the shard holds this tensor but the index does not list it here",
                           file, name)
            found[name] = (file, entry)
    report.tensors = len(found)
    return found


def _layout_agreement(root: Path, found: dict[str, tuple[str, TensorEntry]], unread: set[str],
                      report: VerifyReport) -> None:
    """Tensors of shards already reported unreadable are not reported again as missing."""
    try:
        config = load_config(root)
    except ConfigError as e:
        report.add("config", str(e), "config.json")
        return
    expected: dict[str, ExpectedTensor] = {TEXT_PREFIX + s.name: s for s in expected_tensors(config)}
    _vision_agreement(config, found, unread, report)
    present_text = {n: v for n, v in found.items() if text_name(n) is not None}
    by_text = {TEXT_PREFIX + text_name(n): n for n in present_text}
    for name, spec in expected.items():
        stored = by_text.get(name)
        if stored is None and name in unread:
            continue
        if stored is None:
            report.add("missing-tensor", f"config.json implies {spec.dtype}{list(spec.shape)}; not in any shard",
                       tensor=name)
            continue
        file, entry = found[stored]
        check_tensor_spec(config, spec, file, entry, report)
    for full, stored in sorted(by_text.items()):
        if full not in expected:
            file, entry = found[stored]
            report.add("unexpected-tensor", f"{entry.dtype}{list(entry.shape)} is not part of the layout "
                       "config.json implies (wrong config, or a different model)", file, stored)


def _vision_agreement(config, found: dict[str, tuple[str, TensorEntry]], unread: set[str], report: VerifyReport) -> None:
    """The tower's and projector's tensors (stored without the text prefix) against the vision_config."""
    if config.vision is None:
        return
    for spec in vision_tensors(config.vision):
        if spec.name not in found:
            if spec.name not in unread:
                report.add("missing-tensor", f"the vision_config implies {spec.dtype}{list(spec.shape)}; not in any "
                           "shard (to use the text model alone, load it with vision=False: --no-vision on k3 generate "
                           "or k3 serve)", tensor=spec.name)
            continue
        file, entry = found[spec.name]
        check_tensor_spec(config, spec, file, entry, report)


def _manifest_agreement(root: Path, digests: dict[str, FileDigest], report: VerifyReport,
                        hash_files: bool, progress) -> None:
    for name, digest in sorted(digests.items()):
        try:
            path = member_path(root, name, source="the manifest")
        except CheckpointError as e:
            report.add("manifest", str(e), name)
            continue
        if not path.is_file():
            report.add("missing-file", "listed in the manifest but absent; download it", name)
            continue
        size = path.stat().st_size
        if digest.size is not None and size != digest.size:
            report.add("size", f"{size:,} bytes, manifest says {digest.size:,}: re-download it", name)
            continue
        if hash_files and digest.sha256:
            actual = sha256_file(path, progress)
            report.bytes_hashed += size
            if actual != digest.sha256:
                report.add("sha256", f"sha256 {actual[:16]}... differs from the manifest's {digest.sha256[:16]}...: "
                           "the file is corrupt; re-download it", name)
