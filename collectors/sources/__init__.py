"""What measures: the accelerator sources and their sampler, the host fingerprint, and the
target's own /metrics read through dialect adapters."""
