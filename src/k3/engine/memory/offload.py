"""Sequence state held outside the pools while its sequence waits its turn (state offload).

`put` takes a swapped-out state and writes it to a file in the background (on a GPU without a
directory given: copies it to host memory instead);
`prefetch` starts reading a state back before its sequence's next turn; `take` returns it, waiting
only for what is still in flight. Files are private to the engine and removed once read back.
"""

from __future__ import annotations

import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from k3.engine.memory.sequence_state import SequenceState


class StateOffloader:
    def __init__(self, directory: str | Path | None, kda_layers, mla_layers, device: torch.device | None = None):
        self.device = device or torch.device("cpu")
        self.to_host = directory is None and self.device.type != "cpu"
        self._host: dict[str, dict[str, torch.Tensor]] = {}
        self._owned = None if directory else tempfile.TemporaryDirectory(prefix="k3-state-offload-")
        self.dir = Path(directory or self._owned.name)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.kda_layers, self.mla_layers = list(kda_layers), list(mla_layers)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="k3-state-offload")
        self._writes: dict[str, Future] = {}
        self._reads: dict[str, Future] = {}
        self._ids: dict[str, tuple[list[int], list[int]]] = {}
        self._names: dict[str, str] = {}
        self._serial = 0
        self.counters = {"swap_outs": 0, "swap_ins": 0, "offload_bytes_written": 0, "offload_bytes_read": 0}

    def _path(self, request_id: str) -> Path:
        return self.dir / self._names[request_id]

    def put(self, request_id: str, state: SequenceState) -> None:
        self._serial += 1
        self._names[request_id] = f"{self._serial}.safetensors"
        self._ids[request_id] = (state.token_ids, state.pending_ids)
        self.counters["swap_outs"] += 1
        self.counters["offload_bytes_written"] += state.nbytes
        tensors = {k: v.contiguous() for k, v in state.tensors().items()}
        if self.to_host:
            self._host[request_id] = {k: v.to("cpu", non_blocking=True) for k, v in tensors.items()}
            return
        self._writes[request_id] = self._pool.submit(save_file, tensors, str(self._path(request_id)))

    def holds(self, request_id: str) -> bool:
        return request_id in self._ids

    def prefetch(self, request_id: str) -> None:
        if request_id in self._ids and request_id not in self._reads:
            self._reads[request_id] = self._pool.submit(self._read, request_id)

    def _read(self, request_id: str) -> dict[str, torch.Tensor]:
        if self.to_host:
            return {k: v.to(self.device, non_blocking=True) for k, v in self._host.pop(request_id).items()}
        self._writes[request_id].result()
        return {k: v.to(self.device) for k, v in load_file(str(self._path(request_id))).items()}

    def take(self, request_id: str) -> SequenceState:
        self.prefetch(request_id)
        tensors = self._reads.pop(request_id).result()
        token_ids, pending = self._ids.pop(request_id)
        self._writes.pop(request_id, None)
        self._path(request_id).unlink(missing_ok=True)
        del self._names[request_id]
        state = SequenceState.from_tensors(tensors, token_ids, pending, self.kda_layers, self.mla_layers)
        self.counters["swap_ins"] += 1
        self.counters["offload_bytes_read"] += state.nbytes
        return state

    def discard(self, request_id: str) -> None:
        """Forget a request's offloaded state (finished or aborted while swapped out)."""
        if self._ids.pop(request_id, None) is None:
            return
        self._host.pop(request_id, None)
        for futures in (self._writes, self._reads):
            f = futures.pop(request_id, None)
            if f is not None:
                f.result()
        self._path(request_id).unlink(missing_ok=True)
        del self._names[request_id]

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self._owned is not None:
            self._owned.cleanup()
