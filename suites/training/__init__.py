"""The training suites: MFU and OOM rate of the reference trainer under activation policies."""
