"""The reference serving target: a continuous-batching engine for the tiny MoE, served
over an OpenAI-compatible HTTP API."""
