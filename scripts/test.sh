#!/usr/bin/env bash
# Install everything the tests need (Python deps pinned, kcat from apt), lint, type-check, then run the whole test suite.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v kcat >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat) >/dev/null 2>&1 \
      || echo "warning: could not install kcat; kcat tests will be skipped" >&2
  else
    echo "warning: kcat not found and cannot apt-get install it; kcat tests will be skipped" >&2
  fi
fi
if [ ! -x /usr/share/zookeeper/bin/zkServer.sh ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper) >/dev/null 2>&1 \
      || echo "warning: could not install zookeeper; tests/cluster will be skipped" >&2
  else
    echo "warning: zookeeper not found and cannot apt-get install it; tests/cluster will be skipped" >&2
  fi
fi
if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then  # tests/jepsen: network namespaces
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2) >/dev/null 2>&1 \
      || echo "warning: could not install iproute2; tests/jepsen will be skipped" >&2
  else
    echo "warning: ip/tc not found; tests/jepsen will be skipped" >&2
  fi
fi
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then  # tests/console: headless Chromium e2e
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver) >/dev/null 2>&1 \
      || echo "warning: could not install chromium; tests/console browser tests will be skipped" >&2
  else
    echo "warning: chromium/chromedriver not found; tests/console browser tests will be skipped" >&2
  fi
fi
scripts/bootstrap.sh test,spark
.venv/bin/ruff check src tests bench
.venv/bin/mypy  # [tool.mypy] in pyproject.toml: src/tidelog, less the modules it still lists
exec .venv/bin/python -m pytest "$@"
