"""StepIndex's decode form (window(seqs, 1), built from Python ints) against its general window form."""

import torch

from k3.engine.memory.step_index import StepIndex

BS = 4


def _index(context_lens: tuple[int, ...]) -> StepIndex:
    """Sequence s in slot 5 - s, its blocks a scattered run of pool blocks covering context + 2 positions,
    written into the [slots, max_blocks] table as the runner writes them."""
    slots = [5 - s for s in range(len(context_lens))]
    blocks = [tuple(range(3 + 7 * s, 3 + 7 * s + (c + 2 + BS - 1) // BS)) for s, c in enumerate(context_lens)]
    table = torch.zeros(6, 8, dtype=torch.int32)
    for slot, bl in zip(slots, blocks):
        table[slot, :len(bl)] = torch.tensor(bl, dtype=torch.int32)
    return StepIndex(slots, blocks, context_lens, table, BS)


def test_decode_window_equals_the_general_form_at_its_first_position():
    contexts = (0, 3, 4, 9, 15)   # block edges: a new token at a block's first row, in its middle, at its last
    for seqs in ([0, 1, 2, 3, 4], [3, 1], [4]):
        tables, lens, rows = _index(contexts).window(seqs, 1)
        general = _index(contexts).window(seqs, 2)   # rows i*2 + 0: the same positions, by the general form
        first = slice(0, None, 2)
        assert tables.dtype == torch.int32 and lens.dtype == torch.int32 and rows.dtype == torch.long
        assert torch.equal(tables, general[0][first][:, :tables.shape[1]])
        assert torch.equal(lens, general[1][first]) and torch.equal(rows, general[2][first])
        assert rows.tolist() == [(3 + 7 * s + contexts[s] // BS) * BS + contexts[s] % BS for s in seqs]
