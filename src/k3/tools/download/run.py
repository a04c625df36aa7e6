"""The download as a whole: list files, probe sizes, fetch chunks in parallel, verify, rename.

Small files first (config, index, tokenizer), then the shards the index names. A file is renamed
to its final name only after it verifies; one that fails verification is fetched again from one
mirror at a time, so a mirror serving bad bytes cannot poison the result.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from k3.checkpoint.manifest import parse_manifest
from k3.checkpoint.paths import writable_member_path
from k3.checkpoint.reader import INDEX_FILE, SINGLE_FILE
from k3.tools.download.checks import VerifiedRecord, VerifyFailed, check_file
from k3.tools.download.http import FetchError, probe, url_for
from k3.tools.download.listing import (OPTIONAL_META, REQUIRED_META, Wanted, check_include, selected,
                                       shards_from_index)
from k3.tools.download.partial import WORK_DIR, PartialFile
from k3.tools.download.ratelimit import RateLimit
from k3.tools.download.worker import ChunkFetcher, Counters, FileJob
from k3.tools.progress import byte_progress


class DownloadError(Exception):
    pass


@dataclass
class DownloadOptions:
    mirrors: list[str]
    dest: Path
    include: list[str] | None = None
    jobs: int = 4
    chunk_size: int = 32 * 2 ** 20
    max_rate: float | None = None
    manifest: str | None = None  # local path or URL
    retries: int = 6
    backoff: float = 0.5
    stall_timeout: float = 30.0
    token: str | None = None
    progress: bool | None = None
    log: object = field(default=lambda msg: print(msg, file=sys.stderr))


@dataclass
class DownloadSummary:
    downloaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    absent_optional: list[str] = field(default_factory=list)
    # Downloaded files no sha256 vouched for (no --manifest, none advertised): size and header only.
    unhashed: list[str] = field(default_factory=list)
    bytes: int = 0
    seconds: float = 0.0
    retries: int = 0
    failovers: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__) | {"bytes_per_s": self.bytes / self.seconds if self.seconds else 0.0}


def download(opts: DownloadOptions) -> DownloadSummary:
    if not opts.mirrors:
        raise ValueError("give at least one --from URL")
    check_include(opts.include)
    opts.dest.mkdir(parents=True, exist_ok=True)
    headers = {"Authorization": f"Bearer {opts.token}"} if opts.token else {}
    timeout = httpx.Timeout(opts.stall_timeout, connect=min(opts.stall_timeout, 15.0))
    limits = httpx.Limits(max_connections=2 * opts.jobs + 2)
    with httpx.Client(follow_redirects=True, timeout=timeout, headers=headers, limits=limits) as client:
        return Session(opts, client).run()


class Session:
    def __init__(self, opts: DownloadOptions, client: httpx.Client):
        self.opts, self.client = opts, client
        self.counters = Counters()
        self.summary = DownloadSummary()
        self.record = VerifiedRecord(opts.dest / WORK_DIR)
        self.limit = RateLimit(opts.max_rate)

    def run(self) -> DownloadSummary:
        t0 = time.perf_counter()
        digests = self._manifest()
        if digests is not None:
            wanted = [Wanted(n, d.size, d.sha256) for n, d in digests.items()]
            shards = {n: [] for n in digests if n.endswith(".safetensors")}
            if INDEX_FILE in digests:  # the index says which shards hold the trunk (--include @trunk)
                self._fetch([w for w in wanted if w.name == INDEX_FILE])
                shards = shards_from_index(self.opts.dest / INDEX_FILE)
            self._fetch([w for w in wanted if selected(w.name, self.opts.include, shards)])
        else:
            self._fetch([Wanted(n) for n in REQUIRED_META]
                        + [Wanted(n, required=False) for n in (INDEX_FILE, *OPTIONAL_META)])
            shards = self._shards()
            # Small files are always fetched (the index is needed to list shards); --include picks shards.
            self._fetch([Wanted(n) for n in shards if selected(n, self.opts.include, shards)])
        self.summary.seconds = time.perf_counter() - t0
        self.summary.bytes = self.counters.bytes
        self.summary.retries, self.summary.failovers = self.counters.retries, self.counters.failovers
        return self.summary

    def _manifest(self):
        src = self.opts.manifest
        if not src:
            return None
        if src.startswith(("http://", "https://")):
            try:
                r = self.client.get(src)
                r.raise_for_status()
            except httpx.HTTPError as e:
                raise DownloadError(f"cannot fetch the manifest {src}: {e}") from None
            return parse_manifest(r.text, source=src)
        return parse_manifest(Path(src).read_text(), source=src)

    def _shards(self) -> dict[str, list[str]]:
        if (self.opts.dest / INDEX_FILE).is_file():
            return shards_from_index(self.opts.dest / INDEX_FILE)
        try:
            self._fetch([Wanted(SINGLE_FILE)])
        except DownloadError:
            raise DownloadError(f"the mirrors have neither {INDEX_FILE} nor {SINGLE_FILE}: is the URL the "
                                "directory of a checkpoint (for Hugging Face: .../resolve/main/)?") from None
        return {SINGLE_FILE: []}

    def _fetch(self, wanted: list[Wanted]) -> None:
        jobs = [job for w in wanted if (job := self._prepare(w)) is not None]
        if not jobs:
            return
        total = sum(j.partial.size or 0 for j in jobs)
        with byte_progress(f"downloading {len(jobs)} file(s)", total, self.opts.progress) as tick:
            fetcher = ChunkFetcher(self.client, self.opts.mirrors, self.limit, self.opts.retries,
                                   self.opts.backoff, self.counters, tick, self.opts.log)
            pending = jobs
            while pending:
                self._round(fetcher, pending)
                pending = [j for j in pending if self._finish_or_requeue(j)]
        failed = [j.error for j in jobs if j.error]
        if failed:
            raise DownloadError("could not download:\n  " + "\n  ".join(failed)
                                + "\nfinished chunks are kept; run the same command again to resume")

    def _round(self, fetcher: ChunkFetcher, jobs: list[FileJob]) -> None:
        tasks = [(j, i) for j in jobs for i in j.partial.missing()]
        with ThreadPoolExecutor(max_workers=self.opts.jobs) as pool:
            for future in [pool.submit(fetcher.run, j, i) for j, i in tasks]:
                future.result()

    def _finish_or_requeue(self, job: FileJob) -> bool:
        """True if the job needs another round."""
        pf = job.partial
        if job.error or not pf.complete:
            pf.close()
            job.error = job.error or f"{pf.name}: incomplete"
            return False
        try:
            how = check_file(pf.part, pf.name, pf.size, pf.sha256)
        except VerifyFailed as e:
            return self._retry_verification(job, str(e))
        final = pf.finish()
        self.record.add(final, pf.name, pf.sha256)
        self.summary.downloaded.append(pf.name)
        if how != "sha256":
            self.summary.unhashed.append(pf.name)
        self.opts.log(f"done {pf.name} ({pf.size:,} bytes, verified by {how})")
        return False

    def _retry_verification(self, job: FileJob, why: str) -> bool:
        self.opts.log(f"verification failed, fetching again from one mirror at a time: {why}")
        job.partial.reset()
        untried = [i for i in range(len(self.opts.mirrors)) if i not in job.tried_pinned and i not in job.bad_mirrors]
        if not untried:
            job.partial.close()
            job.error = f"{why} - every mirror gave bad bytes"
            return False
        job.pinned = untried[0]
        job.tried_pinned.add(job.pinned)
        return True

    def _prepare(self, w: Wanted) -> FileJob | None:
        final = writable_member_path(self.opts.dest, w.name, source="the download list")
        if self.record.matches(final, w.name, w.size, w.sha256):
            self.summary.skipped.append(w.name)
            return None
        size, sha, validator = w.size, w.sha256, None
        if size is None or sha is None:
            found = self._probe(w.name)
            if found is None:
                if w.required:
                    raise DownloadError(f"{w.name} is on none of the mirrors: "
                                        + ", ".join(url_for(m, w.name) for m in self.opts.mirrors))
                self.summary.absent_optional.append(w.name)
                return None
            size, sha = size if size is not None else found.size, sha or found.sha256
            validator = found.validator
        if final.is_file() and size is not None and final.stat().st_size == size and self._already_good(final, w, sha):
            return None
        return FileJob(PartialFile(self.opts.dest, w.name, size, sha, self.opts.chunk_size, validator))

    def _already_good(self, final: Path, w: Wanted, sha: str | None) -> bool:
        try:
            check_file(final, w.name, final.stat().st_size, sha)
        except VerifyFailed:
            return False
        self.record.add(final, w.name, sha)
        self.summary.skipped.append(w.name)
        return True

    def _probe(self, name: str):
        """Size and sha256 from the first mirror that answers; None if every mirror says 404."""
        errors, dead = [], set()
        for attempt in range(self.opts.retries + 1):
            for i, base in enumerate(self.opts.mirrors):
                if i in dead:
                    continue
                try:
                    return probe(self.client, base, name)
                except FetchError as e:
                    errors.append(e)
                    if not e.retryable:
                        dead.add(i)
                    else:
                        self.counters.retries += 1
            if len(dead) == len(self.opts.mirrors):
                break
            time.sleep(min(30.0, self.opts.backoff * 2 ** attempt))
        if all(e.not_found for e in errors):
            return None
        raise DownloadError(f"cannot get {name} from any mirror:\n  " + "\n  ".join(map(str, errors[-4:])))
