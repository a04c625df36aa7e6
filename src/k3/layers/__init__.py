"""nn.Modules that own K3's parameters and call `k3.ops`. They never allocate engine state."""
