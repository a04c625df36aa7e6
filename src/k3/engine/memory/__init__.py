"""Batch memory: the sequence state the engine holds for the requests it runs. The allocator (who holds
which KDA slot and MLA blocks), the slot and block pools, the per-step index tensors, the capacity planning
that sizes them, a sequence's state copied in and out of the pools (`SequenceState`), and the state of
waiting sequences held on disk (offload)."""
