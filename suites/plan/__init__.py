"""The memory planner: from a model's config.json and a deployment, bytes per device.

model_config.py reads the model, deploy.py the deployment; weights.py, kv.py,
activations.py and buffers.py compute one component each; plan.py puts them together and
checks the verdict; present.py draws it. docs/guides/memory-planning.md has every formula.
"""
