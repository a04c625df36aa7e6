"""`k3 bench`: latency and throughput of the in-process k3 engine or any OpenAI-compatible endpoint."""
