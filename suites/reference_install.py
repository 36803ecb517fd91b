"""How to install what the reference target and trainer need (PyTorch), and whether it is here."""

from __future__ import annotations

import importlib.util

# PyPI's Linux torch wheel is the CUDA build (with ~20 nvidia-* packages, several GB): a
# machine without a GPU takes the CPU build from PyTorch's own index
# (docs/getting-started/install.md).
TORCH_CPU_INDEX_URL = "https://download.pytorch.org/whl/cpu"
REFERENCE_INSTALL = (
    f"pip install torch==2.13.0 --index-url {TORCH_CPU_INDEX_URL} (the CPU build; "
    "without --index-url on a CUDA machine), then pip install '.[reference]'"
)


def torch_installed() -> bool:
    """Whether PyTorch can be imported here (found, not imported: that takes seconds)."""
    return importlib.util.find_spec("torch") is not None
