"""Engine-owned sequence state: KDA slots, paged MLA latent blocks, and the manager that sizes them."""
