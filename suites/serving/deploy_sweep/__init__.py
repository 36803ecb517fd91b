"""A deployment sweep (``[deploy_sweep]``): one arm per server configuration of a grid,
each started, probed, loaded and stopped in turn, and compared under an SLO."""
