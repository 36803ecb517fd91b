"""Training measurements of the tiny MoE: model FLOPs, the device's peak FLOP/s, and MFU."""
