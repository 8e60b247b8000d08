#!/usr/bin/env bash
# Builds librdkafka's examples/rdkafka_performance (a native C load generator) from Debian's librdkafka
# source package into bench/.work/bin/rdkafka_performance, and our bench/loadgen/latency_producer.c into
# bench/.work/bin/latency_producer. Idempotent. Nothing built is committed.
#
# The binary is compiled against the source package's headers but linked to the librdkafka shipped in the
# confluent-kafka wheel that .venv already pins (2.x, ABI-compatible): Debian bookworm's librdkafka1 2.0.2
# fails the ApiVersions handshake with Tansu ("Read underflow"), while the newer library talks to every
# broker in the benchmark. Set RDKAFKA_SYSTEM_LIB=1 to link the system library instead.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
WORK="$ROOT/bench/.work"
OUT="$WORK/bin/rdkafka_performance"
SRC_PARENT="$WORK/src"
mkdir -p "$WORK/bin" "$SRC_PARENT"
LAT="$WORK/bin/latency_producer"
LAT_SRC="$ROOT/bench/loadgen/latency_producer.c"
if [ -x "$OUT" ] && [ -x "$LAT" ] && [ "$LAT" -nt "$LAT_SRC" ]; then echo "$OUT"; exit 0; fi

need_pkgs=()
command -v gcc >/dev/null 2>&1 || need_pkgs+=(gcc libc6-dev)
command -v dpkg-source >/dev/null 2>&1 || need_pkgs+=(dpkg-dev)
command -v make >/dev/null 2>&1 || need_pkgs+=(make)
[ -f /usr/include/librdkafka/rdkafka.h ] || need_pkgs+=(librdkafka-dev)

# deb-src entries are needed for `apt-get source`.
if ! grep -rqs '^Types:.*deb-src\|^deb-src ' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  . /etc/os-release
  cat > /etc/apt/sources.list.d/tidelog-bench-deb-src.sources <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: ${VERSION_CODENAME} ${VERSION_CODENAME}-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  need_update=1
fi

src_dir="$(ls -d "$SRC_PARENT"/librdkafka-*/ 2>/dev/null | head -n1 || true)"
if [ -n "${need_update:-}" ] || [ ${#need_pkgs[@]} -gt 0 ] || [ -z "$src_dir" ]; then
  apt-get update -qq >/dev/null
fi
if [ ${#need_pkgs[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
if [ -z "$src_dir" ]; then
  (cd "$SRC_PARENT" && apt-get source -qq librdkafka >/dev/null 2>&1)
  src_dir="$(ls -d "$SRC_PARENT"/librdkafka-*/ | head -n1)"
fi
src_dir="${src_dir%/}"

# rdkafka_performance.c includes internal headers that need the generated config.h.
if [ ! -f "$src_dir/config.h" ]; then
  (cd "$src_dir" && ./configure --disable-ssl --disable-gssapi --disable-zstd --disable-lz4-ext \
      --disable-curl >/dev/null)
fi

if [ "${RDKAFKA_SYSTEM_LIB:-0}" = 1 ]; then
  libargs=(-lrdkafka)
else
  libdir="$("$ROOT/.venv/bin/python" - <<'EOF'
import pathlib, confluent_kafka
p = pathlib.Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
print(p)
EOF
)"
  lib="$(ls "$libdir"/librdkafka*.so* | head -n1)"
  libargs=("$lib" "-Wl,-rpath,$libdir")
fi
gcc -O2 -w -I"$src_dir/src" -o "$OUT.tmp" "$src_dir/examples/rdkafka_performance.c" "${libargs[@]}" -lpthread -lm
mv "$OUT.tmp" "$OUT"
# our own paced latency producer (bench/loadgen/latency_producer.c), same headers and library
gcc -O2 -Wall -I"$src_dir/src" -o "$LAT.tmp" "$LAT_SRC" "${libargs[@]}" -lpthread -lm
mv "$LAT.tmp" "$LAT"
echo "$OUT"
