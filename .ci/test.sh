#!/usr/bin/env bash
# The fast test tier, as CI runs it: notebooks clean, package in sync with the notebooks,
# README in sync with nbs/index.ipynb, the notebooks' own tests, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
# two notebooks (or DDP processes) run at once on two cores: one thread each, or OpenMP spin-waits thrash
export OMP_NUM_THREADS=1
snapshot() { find nbs worldplay2 -type f \( -name '*.ipynb' -o -name '*.py' \) -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha1sum; }

echo "== nbdev_clean leaves the notebooks unchanged"
before=$(snapshot); nbdev_clean; after=$(snapshot)
if [ "$before" != "$after" ]; then diff <(echo "$before") <(echo "$after") || true; echo "FAIL: notebooks are not clean; run nbdev_clean and commit"; exit 1; fi

echo "== nbdev_export leaves the package unchanged"
before=$(snapshot); nbdev_export; after=$(snapshot)
if [ "$before" != "$after" ]; then diff <(echo "$before") <(echo "$after") || true; echo "FAIL: the package differs from the notebooks; edit the notebooks, run nbdev_export and commit"; exit 1; fi

echo "== README.md is built from nbs/index.ipynb"
python3 .ci/build_readme.py --check

echo "== nbdev_test (fast tier)"
nbdev_test --n_workers 2 --timing

echo "== pytest (fast tier; two workers, the docs tests on one)"
python3 -m pytest -q -m "not slow" -n 2 --dist loadgroup --durations=10 tests

echo "== fast tier done in ${SECONDS} s"
