#!/usr/bin/env bash
# Regenerates the checked-in gRPC stubs beside each .proto file listed in PROTOS below.
#
# grpcio-tools is pinned: stubs it writes refuse to load on an older protobuf runtime (gencode must
# be <= runtime) or an older grpcio. 1.71.2 bundles protoc for protobuf 5.29.0 and stamps grpcio
# 1.71.2, the oldest of the runtimes the tested TensorFlow lines bring: TensorFlow 2.18.1 needs
# protobuf <6, TensorFlow 2.21.0 protobuf >=6.31.1,<8 (protobuf from 6.32 loads gencode of an older
# major without a word; 6.31 warns). So one set of stubs loads beside either; setup.cfg requires
# protobuf>=5.29.0 and grpcio>=1.71.2 for that reason.
#
# The generator cannot live in a TensorFlow 2.21 virtualenv (grpcio-tools 1.71.2 requires protobuf
# <6), so it has a directory of its own, build/grpcio-tools-<version>/ (pip install --target, with
# its own protobuf), installed on first use or by scripts/install.sh; it runs with that directory first
# on PYTHONPATH.
#
# Usage: scripts/gen_protos.sh [--out DIR] [--install-generator]
#   --out DIR             write the stubs under DIR (same relative paths) instead of into the checkout;
#                         tests/unit/test_metrics_protos_current.py uses it to check the stubs are current
#   --install-generator   install the pinned generator if it is missing, and generate nothing
# PYTHON selects the Python 3 interpreter that installs and runs the generator (default: python3).
set -euo pipefail

GRPCIO_TOOLS_VERSION=1.71.2

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
OUT=$ROOT
GENERATOR=$ROOT/build/grpcio-tools-$GRPCIO_TOOLS_VERSION
ONLY_INSTALL=0
PROTOS=(
  submarine_elastic/metrics/proto/metrics.proto
  submarine_elastic/protocol/proto/elastic.proto
  submarine_elastic/controller/proto/controller.proto
)

while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "gen_protos.sh: --out needs a directory" >&2; exit 2; }; OUT=$2; shift 2 ;;
    --install-generator) ONLY_INSTALL=1; shift ;;
    -h|--help) sed -n '2,23p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gen_protos.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

if [ -f "$GENERATOR/.installed" ] && [ "$ONLY_INSTALL" = 1 ]; then
  echo "    grpcio-tools==$GRPCIO_TOOLS_VERSION in $GENERATOR (already done)"
elif [ ! -f "$GENERATOR/.installed" ]; then
  echo "gen_protos.sh: installing grpcio-tools==$GRPCIO_TOOLS_VERSION into $GENERATOR" >&2
  mkdir -p "$(dirname "$GENERATOR")"
  partial=$(mktemp -d "$GENERATOR.partial.XXXXXX")
  # --no-warn-conflicts: pip would compare this directory with the virtualenv (protobuf 7 beside 5) and
  # print a resolver ERROR about packages this install does not touch.
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-warn-script-location --no-warn-conflicts \
    --target "$partial" "grpcio-tools==$GRPCIO_TOOLS_VERSION" >&2 \
    || { rm -rf "$partial"; echo "gen_protos.sh: could not install grpcio-tools==$GRPCIO_TOOLS_VERSION with $PYTHON" >&2; exit 1; }
  touch "$partial/.installed"
  rm -rf "$GENERATOR"
  mv -T "$partial" "$GENERATOR"
fi
have=$(PYTHONPATH=$GENERATOR "$PYTHON" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))' 2>/dev/null || true)
if [ "$have" != "$GRPCIO_TOOLS_VERSION" ]; then
  echo "gen_protos.sh: $GENERATOR holds grpcio-tools '${have:-none}', not $GRPCIO_TOOLS_VERSION; remove it and run again" >&2
  exit 1
fi
[ "$ONLY_INSTALL" = 1 ] && exit 0

mkdir -p "$OUT"
cd "$ROOT"
PYTHONPATH=$GENERATOR "$PYTHON" -m grpc_tools.protoc -I . \
  --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" "${PROTOS[@]}"
