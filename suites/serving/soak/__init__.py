"""Soak runs (``[soak]`` in a serving spec): one long level watched for slow degradation."""
