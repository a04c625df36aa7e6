"""Engine-owned sequence state: the allocator (who holds which slot and blocks), the KDA slot and paged MLA
block pools, the per-step index tensors, and the capacity planning that sizes them."""
