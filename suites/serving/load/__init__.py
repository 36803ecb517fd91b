"""Load generation: arrival schedules, worker processes and their plans, the streaming
client and its SSE parser, and the self-watch that judges whether the client set the
numbers."""
