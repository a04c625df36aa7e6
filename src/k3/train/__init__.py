"""Training small K3-architecture models: init, data, the AdamW loop, data-parallel, official-layout export."""
