"""One sequence's state, copied out of the engine's pools: KDA recurrent matrices and conv tails
(one slot's worth) and the MLA rows of its cached tokens. Saved to files to resume later, or held on
disk while the sequence waits (state offload); importing it back gives bit-identical continuation."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class SequenceState:
    token_ids: list[int]  # tokens whose state this is (computed)
    pending_ids: list[int] = field(default_factory=list)  # sampled but not yet computed (the last output)
    kda: dict[int, tuple[torch.Tensor, tuple[torch.Tensor, ...]]] = field(default_factory=dict)
    mla: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> rows [len(token_ids), width]

    @property
    def nbytes(self) -> int:
        n = sum(r.nbytes + sum(t.nbytes for t in tails) for r, tails in self.kda.values())
        return n + sum(rows.nbytes for rows in self.mla.values())

    def tensors(self) -> dict[str, torch.Tensor]:
        """Flat name -> tensor map (for safetensors)."""
        out = {}
        for layer, (rec, tails) in self.kda.items():
            out[f"kda.{layer}.recurrent"] = rec
            out |= {f"kda.{layer}.tail{i}": t for i, t in enumerate(tails)}
        out |= {f"mla.{layer}.rows": rows for layer, rows in self.mla.items()}
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], token_ids: list[int], pending_ids: list[int],
                     kda_layers, mla_layers) -> "SequenceState":
        kda = {i: (tensors[f"kda.{i}.recurrent"], tuple(tensors[f"kda.{i}.tail{j}"] for j in range(3)))
               for i in kda_layers}
        mla = {i: tensors[f"mla.{i}.rows"] for i in mla_layers}
        return cls(list(token_ids), list(pending_ids), kda, mla)


def export_state(slots, blocks, slot: int, table: list[int], num_tokens: int) -> SequenceState:
    """Copy one sequence's state out of the pools (clones: the pools may be reused at once)."""
    return SequenceState([], [], export_kda(slots, slot), export_mla(blocks, table, num_tokens))


def export_kda(slots, slot: int) -> dict[int, tuple[torch.Tensor, tuple[torch.Tensor, ...]]]:
    return {i: (rec[slot].clone(), tuple(t[slot].clone() for t in slots.tails[i])) for i, rec in slots.recurrent.items()}


def export_mla(blocks, table: list[int], num_tokens: int) -> dict[int, torch.Tensor]:
    """layer -> rows [num_tokens, width] of the tokens the block table holds (a gather: a copy)."""
    return {i: pool[_rows(table, num_tokens, blocks.block_size, pool.device)] for i, pool in blocks.pools.items()}


def import_state(slots, blocks, slot: int, table: list[int], state: SequenceState) -> None:
    for i, (rec, tails) in state.kda.items():
        slots.recurrent[i][slot].copy_(rec)  # copy_ moves across devices
        for mine, saved in zip(slots.tails[i], tails):
            mine[slot].copy_(saved)
    import_mla(blocks, table, state.mla)


def import_mla(blocks, table: list[int], rows: dict[int, torch.Tensor]) -> None:
    """Write layer -> rows [n, width] at positions 0..n-1 of the block table."""
    for i, saved in rows.items():
        pool = blocks.pools[i]
        pool[_rows(table, saved.shape[0], blocks.block_size, pool.device)] = saved.to(pool.device, pool.dtype)


def _rows(table: list[int], num_tokens: int, block_size: int, device) -> torch.Tensor:
    if not num_tokens:
        return torch.zeros(0, dtype=torch.long, device=device)
    pos = torch.arange(num_tokens)
    return (torch.tensor(table, dtype=torch.long)[pos // block_size] * block_size + pos % block_size).to(device)
