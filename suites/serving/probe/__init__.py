"""``moeperf probe``: what a target supports, found with a few bounded requests."""
