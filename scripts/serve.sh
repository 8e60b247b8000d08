#!/usr/bin/env bash
# Install tidelog into .venv, then start one broker on 127.0.0.1:9092 with data in ./data (no ZooKeeper).
# Extra arguments go to `tidelog serve` (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/tidelog serve "$@"
