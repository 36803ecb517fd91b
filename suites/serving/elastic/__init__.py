"""Replicas of a server behind a router, scaled and killed under load (issue 44)."""
