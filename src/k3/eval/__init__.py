"""`k3 eval`: quality, refusal and agent evaluation of a local k3 model or any OpenAI-compatible endpoint,
with frozen task hashes, independent judging, logged interventions and resumable, cached runs."""
