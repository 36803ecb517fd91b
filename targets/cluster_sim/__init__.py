"""Cluster-scale MoE training simulation, calibrated against the reference trainer."""
