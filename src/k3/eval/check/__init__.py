"""`k3 check`: quality, speed and memory measured in one run, with a verdict against stated thresholds."""
