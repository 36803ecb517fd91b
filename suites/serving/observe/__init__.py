"""What a serving run watches besides its requests: live export, the target's /metrics,
its per-level counters, and the synthetic target's ground truth."""
