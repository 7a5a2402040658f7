#!/usr/bin/env bash
# Regenerates the checked-in gRPC stubs beside each .proto file listed in PROTOS below.
#
# grpcio-tools is pinned: stubs it writes refuse to load on an older protobuf runtime (gencode must
# be <= runtime) or an older grpcio. 1.71.2 bundles protoc for protobuf 5.29.0 and stamps grpcio
# 1.71.2, both inside TensorFlow 2.18.1's range (protobuf >=3.20.3,<6; grpcio <2), so the stubs
# load next to TensorFlow. setup.cfg requires protobuf>=5.29.0 and grpcio>=1.71.2 for that reason.
#
# Usage: scripts/gen_protos.sh [--out DIR]
#   --out DIR   write the stubs under DIR (same relative paths) instead of into the checkout;
#               tests/unit/test_metrics_protos_current.py uses it to check the stubs are current
# PYTHON selects the interpreter that has grpcio-tools (default: python3).
set -euo pipefail

GRPCIO_TOOLS_VERSION=1.71.2

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
OUT=$ROOT
PROTOS=(
  submarine_elastic/metrics/proto/metrics.proto
  submarine_elastic/elastic/proto/elastic.proto
  submarine_elastic/controller/proto/controller.proto
)

while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "gen_protos.sh: --out needs a directory" >&2; exit 2; }; OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gen_protos.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

have=$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))' 2>/dev/null || true)
if [ "$have" != "$GRPCIO_TOOLS_VERSION" ]; then
  echo "gen_protos.sh: needs grpcio-tools==$GRPCIO_TOOLS_VERSION in $PYTHON, found '${have:-none}';" \
       "run: $PYTHON -m pip install grpcio-tools==$GRPCIO_TOOLS_VERSION" >&2
  exit 1
fi

mkdir -p "$OUT"
cd "$ROOT"
"$PYTHON" -m grpc_tools.protoc -I . \
  --python_out="$OUT" --pyi_out="$OUT" --grpc_python_out="$OUT" "${PROTOS[@]}"
