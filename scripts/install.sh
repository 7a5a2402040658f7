#!/usr/bin/env bash
# Installs everything submarine-elastic needs, into the repository:
#   .venv/          Python 3.11 virtualenv: TensorFlow (CPU), tf_keras, Horovod built from its sdist
#                   with TensorFlow + Gloo, this package (editable) and its test tools
#                   and the Hadoop YARN / ZooKeeper jars (share/submarine-elastic/hadoop/lib), resolved by
#                   Maven from the project the package ships (submarine cluster install-jars)
#
# Re-running it skips every step whose inputs have not changed (a stamp file per step holds a hash
# of what the step was built from). Usage: scripts/install.sh [--no-tensorflow]
#   --no-tensorflow   controller side only: skip TensorFlow and Horovod (the extras stay installable)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${SUBMARINE_VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3.11}

# Versions pinned here and in setup.cfg; the README ("Versions pinned, and why") says why (TF >= 2.19 does not build Horovod 0.28.1).
TF_SPEC="tensorflow-cpu==2.18.1"
TF_KERAS_SPEC="tf_keras==2.18.0"
HOROVOD_SPEC="horovod==0.28.1"

with_tf=1
for arg in "$@"; do
  case "$arg" in
    --no-tensorflow) with_tf=0 ;;
    -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

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
    step "installing $TF_SPEC and $TF_KERAS_SPEC (a ~250 MB download on a fresh machine)"
    "${PIP[@]}" install --progress-bar off "$TF_SPEC"
    # --no-deps: tf_keras would otherwise pull a second TensorFlow build (the non-CPU wheel).
    "${PIP[@]}" install --progress-bar off --no-deps "$TF_KERAS_SPEC"
    echo "$tf_hash" > "$VENV/.stamp-tensorflow"
  fi

  hvd_hash=$(hash_of "$HOROVOD_SPEC $tf_hash gloo")
  if stamp_ok "$VENV/.stamp-horovod" "$hvd_hash"; then
    skip "$HOROVOD_SPEC"
  else
    command -v cmake >/dev/null || die "cmake is required to build Horovod; on Debian: apt-get install cmake"
    command -v g++ >/dev/null || die "a C++ compiler is required to build Horovod; on Debian: apt-get install g++"
    step "building $HOROVOD_SPEC from its sdist with TensorFlow + Gloo (about 3-5 minutes on 2 cores)"
    # --no-build-isolation: Horovod's CMake must see the TensorFlow installed above.
    # pip's wheel cache keeps the built wheel, keyed by the sdist; TensorFlow is pinned, so reuse is safe.
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
      HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" \
      "${PIP[@]}" install --progress-bar off --no-build-isolation "$HOROVOD_SPEC"
    "$VENV/bin/python" - <<'PY' || die "Horovod was built without TensorFlow or Gloo support"
import horovod.tensorflow as hvd
from horovod.common.util import gloo_built
if not gloo_built():
    raise SystemExit("horovod built without gloo")
print("    horovod", __import__("horovod").__version__, "with TensorFlow + Gloo")
PY
    echo "$hvd_hash" > "$VENV/.stamp-horovod"
  fi
fi

# --- this package ---------------------------------------------------------------------------------
pkg_hash=$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)-$ROOT
if stamp_ok "$VENV/.stamp-package" "$pkg_hash"; then
  skip "submarine-elastic (editable) and test tools"
else
  step "installing submarine-elastic (editable) with its test tools"
  "${PIP[@]}" install --progress-bar off --quiet -e "$ROOT[test]"
  echo "$pkg_hash" > "$VENV/.stamp-package"
fi

# --- Hadoop jars ----------------------------------------------------------------------------------
# Into the virtualenv (share/submarine-elastic/hadoop/lib), where the package looks for them; the command
# skips the download while the jars match the Maven project the package ships.
step "Hadoop YARN and ZooKeeper jars"
"$VENV/bin/submarine" cluster install-jars

step "ready: $VENV/bin/submarine"
