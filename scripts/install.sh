#!/usr/bin/env bash
# Installs everything submarine-elastic needs into a Python 3.11 virtualenv (.venv/ by default):
# TensorFlow (CPU), tf_keras, Horovod built from its sdist with TensorFlow + Gloo (patched, see
# patches/), this package (editable) with its test tools and, beside TensorFlow, scikit-learn (the digits
# the examples train on), the pinned gRPC stub generator (build/), and
# the Hadoop YARN / ZooKeeper jars (share/submarine-elastic/hadoop/lib), resolved by Maven from the
# project the package ships (submarine cluster install-jars).
#
# Re-running it skips every step whose inputs have not changed (a stamp file per step holds a hash
# of what the step was built from). Usage: scripts/install.sh [--tf 2.21|2.18] [--gpu] [--no-tensorflow]
#   --tf LINE         the TensorFlow line (default 2.21): 2.21 = tensorflow-cpu 2.21.0 + tf_keras 2.21.0,
#                     2.18 = tensorflow-cpu 2.18.1 + tf_keras 2.18.0, into .venv-tf2.18/ (make test uses it)
#   --gpu             (2.21 only) TensorFlow's CUDA build, tensorflow[and-cuda] 2.21.0, instead of tensorflow-cpu,
#                     and Horovod with NCCL (HOROVOD_GPU_OPERATIONS=NCCL) where the CUDA toolkit (nvcc) is found;
#                     without it, says what it found and builds Horovod with Gloo only. CPU is the default.
#   --no-tensorflow   controller side only: skip TensorFlow and Horovod (the extras stay installable)
# SUBMARINE_VENV overrides the virtualenv's directory, PYTHON the interpreter that creates it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3.11}

# Versions pinned here and in setup.cfg (whose extras name the default line); docs/versions.md says why.
DEFAULT_TF_LINE=2.21
HOROVOD_VERSION=0.28.1
# The sdist pip downloads is checked against this hash before the patch is applied to it.
HOROVOD_SDIST_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0
# Horovod 0.28.1 does not build against TensorFlow >= 2.19 as shipped; the patch says why, hunk by hunk.
HOROVOD_PATCH=$ROOT/patches/horovod-$HOROVOD_VERSION-tf2.21.patch

with_tf=1
with_gpu=0
tf_line=$DEFAULT_TF_LINE
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tensorflow) with_tf=0; shift ;;
    --gpu) with_gpu=1; shift ;;
    --tf)
      [ $# -ge 2 ] || { echo "install.sh: --tf needs a TensorFlow line (2.21 or 2.18)" >&2; exit 2; }
      tf_line=$2; shift 2 ;;
    --tf=*) tf_line=${1#--tf=}; shift ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
case "$tf_line" in
  2.21) TF_SPEC="tensorflow-cpu==2.21.0"; TF_KERAS_SPEC="tf_keras==2.21.0"; default_venv=$ROOT/.venv ;;
  2.18) TF_SPEC="tensorflow-cpu==2.18.1"; TF_KERAS_SPEC="tf_keras==2.18.0"; default_venv=$ROOT/.venv-tf2.18 ;;
  *) echo "install.sh: --tf '$tf_line' is not a tested TensorFlow line; use 2.21 or 2.18" >&2; exit 2 ;;
esac
VENV=${SUBMARINE_VENV:-$default_venv}
if [ "$with_gpu" = 1 ]; then
  [ "$with_tf" = 1 ] || { echo "install.sh: --gpu installs TensorFlow's CUDA build: it cannot go with --no-tensorflow" >&2; exit 2; }
  [ "$tf_line" = 2.21 ] || { echo "install.sh: --gpu installs the CUDA build of the 2.21 line only; it does not go with --tf $tf_line" >&2; exit 2; }
  TF_SPEC="tensorflow[and-cuda]==2.21.0"
fi

step() { printf '\033[1m==> %s\033[0m\n' "$*"; }
skip() { printf '    %s (already done)\n' "$*"; }
die() { printf 'install.sh: %s\n' "$*" >&2; exit 1; }

# A stamp holds the hash of a step's inputs; the step is skipped while it matches.
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
hash_of() { printf '%s' "$*" | sha256sum | cut -c1-16; }

# --- prerequisites -------------------------------------------------------------------------------
command -v "$PYTHON" >/dev/null || die "Python 3.11 is required ('$PYTHON' not found; set PYTHON=...)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || die "Python 3.11 is required; '$PYTHON' is $("$PYTHON" --version 2>&1)"
command -v java >/dev/null || die "Java 17 is required (no 'java' on PATH); on Debian: apt-get install openjdk-17-jdk-headless"
java_major=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
[ "${java_major:-0}" -ge 17 ] 2>/dev/null || die "Java 17 or newer is required; found '${java_major:-unknown}'"
command -v mvn >/dev/null || die "Maven is required (no 'mvn' on PATH); on Debian: apt-get install maven"

# --- MIT Kerberos ---------------------------------------------------------------------------------
# `submarine cluster up --secure` runs a KDC of the cluster's own (krb5-kdc: krb5kdc, kdb5_util;
# krb5-admin-server: kadmin.local), and the `kerberos` extra builds python-gssapi against libkrb5-dev
# (krb5-config). Installed with apt-get when run as root on Debian; elsewhere a missing piece is named
# and the Kerberos parts are left out (their tests are skipped).
KRB5_PACKAGES=(krb5-kdc krb5-admin-server libkrb5-dev)
krb5_present() { command -v krb5-config >/dev/null && PATH="$PATH:/usr/sbin:/sbin" command -v kadmin.local >/dev/null \
  && PATH="$PATH:/usr/sbin:/sbin" command -v krb5kdc >/dev/null; }
if krb5_present; then
  skip "MIT Kerberos (${KRB5_PACKAGES[*]})"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  step "installing ${KRB5_PACKAGES[*]} with apt-get"
  # No service of the system's own is started: the package's KDC has no realm, and the cluster runs its own.
  blocker=/usr/sbin/policy-rc.d
  added_blocker=0
  if [ ! -e "$blocker" ]; then printf '#!/bin/sh\nexit 101\n' > "$blocker"; chmod 755 "$blocker"; added_blocker=1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt_ok=1
  apt-get install -y --no-install-recommends "${KRB5_PACKAGES[@]}" >/dev/null 2>&1 \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${KRB5_PACKAGES[@]}" >/dev/null; } \
    || apt_ok=0
  if [ "$added_blocker" = 1 ]; then rm -f "$blocker"; fi
  [ "$apt_ok" = 1 ] || die "apt-get could not install ${KRB5_PACKAGES[*]}"
  krb5_present || die "apt-get installed ${KRB5_PACKAGES[*]} but krb5-config, krb5kdc or kadmin.local is still missing"
else
  printf '    MIT Kerberos missing (%s): cluster up --secure and the kerberos extra are left out; on Debian, as root: apt-get install %s\n' \
    "krb5-config, krb5kdc or kadmin.local" "${KRB5_PACKAGES[*]}"
fi

# --- virtualenv ----------------------------------------------------------------------------------
if [ -x "$VENV/bin/python" ]; then
  skip "virtualenv $VENV"
else
  step "creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade "pip>=24" "setuptools>=68" wheel
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

# --- TensorFlow + Horovod -------------------------------------------------------------------------
if [ "$with_tf" = 1 ]; then
  tf_hash=$(hash_of "$TF_SPEC $TF_KERAS_SPEC")
  if stamp_ok "$VENV/.stamp-tensorflow" "$tf_hash"; then
    skip "$TF_SPEC, $TF_KERAS_SPEC"
  else
    step "installing $TF_SPEC and $TF_KERAS_SPEC (CPU: a ~275 MB download on a fresh machine; CUDA: several GB)"
    # tensorflow and tensorflow-cpu install the same modules: the build not wanted goes first.
    "${PIP[@]}" uninstall --yes --quiet tensorflow tensorflow-cpu >/dev/null 2>&1 || true
    "${PIP[@]}" install --progress-bar off "$TF_SPEC"
    # --no-deps: tf_keras would otherwise pull a second TensorFlow build (the non-CPU wheel).
    "${PIP[@]}" install --progress-bar off --no-deps "$TF_KERAS_SPEC"
    echo "$tf_hash" > "$VENV/.stamp-tensorflow"
  fi

  # With --gpu, NCCL where the CUDA toolkit is here: Horovod's CUDA operations are compiled with nvcc.
  hvd_gpu=()
  hvd_ops=gloo
  if [ "$with_gpu" = 1 ]; then
    nvcc=$(command -v nvcc || true)
    for dir in "${CUDA_HOME:-}" /usr/local/cuda; do
      if [ -z "$nvcc" ] && [ -n "$dir" ] && [ -x "$dir/bin/nvcc" ]; then nvcc=$dir/bin/nvcc; fi
    done
    gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | paste -sd, - || true)
    if [ -n "$nvcc" ]; then
      cuda_home=$(cd "$(dirname "$nvcc")/.." && pwd)
      printf '    CUDA toolkit: %s (%s); GPUs: %s\n' "$nvcc" "$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')" "${gpus:-none seen by nvidia-smi}"
      hvd_gpu=(HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_CUDA_HOME="$cuda_home")
      # NCCL from the system (HOROVOD_NCCL_HOME, if set), else the nvidia-nccl-cu12 wheel TensorFlow's CUDA build pulls.
      nccl=$("$VENV/bin/python" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
      if [ -z "${HOROVOD_NCCL_HOME:-}" ] && [ -n "$nccl" ] && [ -f "$nccl/include/nccl.h" ]; then
        hvd_gpu+=(HOROVOD_NCCL_INCLUDE="$nccl/include" HOROVOD_NCCL_LIB="$nccl/lib")
      fi
      hvd_ops=nccl
    else
      printf '    --gpu: no CUDA toolkit here (no nvcc on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin; GPUs: %s).\n' "${gpus:-none seen by nvidia-smi}"
      printf '    TensorFlow gets its CUDA build; Horovod is built with Gloo only (allreduce through host memory). Install the\n'
      printf '    CUDA toolkit (nvcc) and rerun scripts/install.sh --gpu for NCCL.\n'
    fi
  fi
  hvd_hash=$(hash_of "horovod==$HOROVOD_VERSION $HOROVOD_SDIST_SHA256 $(sha256sum < "$HOROVOD_PATCH") $tf_hash gloo$([ "$hvd_ops" = nccl ] && echo " nccl")")
  if stamp_ok "$VENV/.stamp-horovod" "$hvd_hash"; then
    skip "horovod==$HOROVOD_VERSION (patched)"
  else
    command -v cmake >/dev/null || die "cmake is required to build Horovod; on Debian: apt-get install cmake"
    command -v g++ >/dev/null || die "a C++ compiler is required to build Horovod; on Debian: apt-get install g++"
    command -v patch >/dev/null || die "patch is required to patch Horovod's sources; on Debian: apt-get install patch"
    step "building horovod==$HOROVOD_VERSION from its sdist with $(basename "$HOROVOD_PATCH"), TensorFlow + Gloo$([ "$hvd_ops" = nccl ] && echo " + NCCL") (about 3 minutes on 2 cores)"
    src=$(mktemp -d "${TMPDIR:-/tmp}/horovod-src.XXXXXX")
    trap 'rm -rf "$src"' EXIT
    "${PIP[@]}" download --quiet --no-deps --no-binary :all: -d "$src" "horovod==$HOROVOD_VERSION"
    sdist=$src/horovod-$HOROVOD_VERSION.tar.gz
    echo "$HOROVOD_SDIST_SHA256  $sdist" | sha256sum --check --status \
      || die "the downloaded $(basename "$sdist") does not have the sha256 pinned in install.sh ($HOROVOD_SDIST_SHA256)"
    tar -xzf "$sdist" -C "$src"
    patch --directory "$src/horovod-$HOROVOD_VERSION" --strip 1 --forward --batch --quiet < "$HOROVOD_PATCH" \
      || die "$HOROVOD_PATCH does not apply to horovod $HOROVOD_VERSION's sdist"
    # From the patched directory, which pip neither takes from nor puts into its wheel cache: a wheel
    # built against one TensorFlow line is never reused for another.
    # --no-build-isolation: Horovod's CMake must see the TensorFlow installed above.
    env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
      HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" "${hvd_gpu[@]}" \
      "${PIP[@]}" install --progress-bar off --no-build-isolation "$src/horovod-$HOROVOD_VERSION"
    rm -rf "$src"
    trap - EXIT
    HVD_OPS=$hvd_ops "$VENV/bin/python" - <<'PY' || die "Horovod was built without TensorFlow, Gloo or (--gpu) NCCL support"
import os

import horovod.tensorflow as hvd
import tensorflow as tf
from horovod.common.util import gloo_built, nccl_built
if not gloo_built():
    raise SystemExit("horovod built without gloo")
if os.environ["HVD_OPS"] == "nccl" and not nccl_built():
    raise SystemExit("horovod built without NCCL")
extra = " + NCCL" if nccl_built() else ""
print("    horovod", __import__("horovod").__version__, "with TensorFlow", tf.__version__, "+ Gloo" + extra)
if tf.test.is_built_with_cuda():
    print("    TensorFlow (CUDA build) sees GPUs:", tf.config.list_physical_devices("GPU") or "none")
PY
    echo "$hvd_hash" > "$VENV/.stamp-horovod"
  fi
fi

# --- this package ---------------------------------------------------------------------------------
# With TensorFlow named beside it, so that pip picks the protobuf and grpcio helper packages that
# TensorFlow allows (for 2.18, protobuf <6 and grpcio-health-checking 1.71).
extras=test
krb5_present && extras=test,kerberos
[ "$with_tf" = 1 ] && extras=$extras,examples,tensorboard
pkg_reqs=(-e "$ROOT[$extras]")
[ "$with_tf" = 1 ] && pkg_reqs+=("$TF_SPEC")
pkg_hash=$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)-$ROOT-$(hash_of "${pkg_reqs[@]}")
if stamp_ok "$VENV/.stamp-package" "$pkg_hash"; then
  skip "submarine-elastic (editable) and test tools"
else
  step "installing submarine-elastic (editable) with its test tools"
  "${PIP[@]}" install --progress-bar off --quiet "${pkg_reqs[@]}"
  echo "$pkg_hash" > "$VENV/.stamp-package"
fi

# --- gRPC stub generator --------------------------------------------------------------------------
# grpcio-tools, pinned, in build/ beside the virtualenvs (it needs a protobuf TensorFlow 2.21 refuses);
# the test that the checked-in stubs are current runs it. Skipped once installed.
PYTHON="$VENV/bin/python" "$ROOT/scripts/gen_protos.sh" --install-generator

# --- Hadoop jars ----------------------------------------------------------------------------------
# Into the virtualenv (share/submarine-elastic/hadoop/lib), where the package looks for them; the command
# skips the download while the jars match the Maven project the package ships.
step "Hadoop YARN and ZooKeeper jars"
"$VENV/bin/submarine" cluster install-jars

step "ready: $VENV/bin/submarine"
