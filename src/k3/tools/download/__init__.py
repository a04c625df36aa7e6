"""`k3 download`: fetch a checkpoint from plain HTTP(S) mirrors with parallel ranged requests,
resume after interruption, mirror failover, retries with backoff, and per-file verification
before a file is renamed into place."""

from k3.tools.download.run import DownloadError, DownloadOptions, DownloadSummary, download

__all__ = ["DownloadError", "DownloadOptions", "DownloadSummary", "download"]
