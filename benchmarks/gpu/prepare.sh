#!/usr/bin/env bash
# Run here, before lending: the wheels check.sh needs that the GPU machine's image lacks.
# That image (Python 3.12, torch, numpy, pandas, pyarrow, aiohttp, uvloop, rich, scipy,
# psutil, prometheus-client, tokenizers, nvidia-ml-py: /work/.library/device/KINDS.md) has
# no pydantic and no plotly; nothing can be fetched there. They go into .whl/ (ignored by
# git: .git/info/exclude), which the device call carries; check.sh installs them.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
rm -rf .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl \
    "pydantic==2.14.4" "pydantic-core==2.50.5" "annotated-types==0.8.0" \
    "typing-inspection==0.4.5" "plotly==7.1.0"
ls .whl  # the versions the tests run with (tox -e test)
