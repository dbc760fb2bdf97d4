#!/usr/bin/env bash
# Set up worldplay2 on a fresh machine: the CPU build of torch 2.13.0 first (a bare `torch`
# requirement would pull a multi-GB CUDA build), then the package. `dev` adds the notebook and
# test tools and, for the docs test, Debian's Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check "torch==2.13.0"
if [ "${1:-}" = "dev" ]; then
  python3 -m pip install -q --disable-pip-version-check -e ".[dev]"
  if ! command -v chromium >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
else
  python3 -m pip install -q --disable-pip-version-check -e .
fi
