"""What exports: the metric names, the live /metrics endpoint of a run and the push to a
Pushgateway."""
