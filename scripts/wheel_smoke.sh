#!/usr/bin/env bash
# Builds the wheel from the tree's files (tracked and new, never build/ leftovers), installs it (not editable)
# with Horovod into a fresh virtualenv, and checks from outside the checkout what a user of the wheel needs:
# the CLI and the controller's process start, a job's YARN spec renders from the shipped template, every runtime file is installed and
# found through importlib.resources, and a job's driver and agent import. Run by `make test`.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${SUBMARINE_VENV:-$ROOT/.venv}
PYTHON=${PYTHON:-python3.11}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/submarine-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

say "building the wheel from the tree"
mkdir -p "$WORK/src"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' \
  | tar --null -T - -cf -) | tar -xf - -C "$WORK/src"
"$VENV/bin/python" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  -w "$WORK/dist" "$WORK/src" >/dev/null
wheel=$(ls "$WORK"/dist/submarine_elastic-*.whl)
echo "    $(basename "$wheel") ($(du -k "$wheel" | cut -f1) kB)"

say "installing it into a fresh virtualenv, with Horovod (built without TensorFlow: the driver needs only its runner)"
"$PYTHON" -m venv "$WORK/venv"
HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_MPI=1 \
  "$WORK/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel[horovod]"

say "checking it from outside the checkout"
cd "$WORK"
"$WORK/venv/bin/submarine" --help >/dev/null
"$WORK/venv/bin/submarine" job run --help | grep -q -- "--elastic"
"$WORK/venv/bin/python" -m submarine_elastic.daemon --help >/dev/null  # the controller's process
SUBMARINE_JOBS_DIR="$WORK/jobs" "$WORK/venv/bin/python" - "$ROOT" <<'PY'
import importlib.metadata
import json
import sys
from pathlib import Path

root = Path(sys.argv[1]).resolve()
import submarine_elastic
import submarine_elastic.elastic.agent
import submarine_elastic.elastic.driver  # noqa: F401  (imports Horovod's elastic runner)
from submarine_elastic import env, resources
from submarine_elastic.protocol.api import Limits
from submarine_elastic.submit.jobspec import JobRequest, WorkerResources, build_service

installed = Path(submarine_elastic.__file__).resolve().parent
problems = [f"the package was imported from {installed}, inside the checkout"] if root in installed.parents else []
for name, path in {
    "job template": resources.job_template(),
    "Hadoop configuration": resources.hadoop_conf() / "yarn-site.xml",
    "Hadoop Maven project": resources.hadoop_pom(),
    "GPU discovery fixture": resources.gpu_fixture(),
    "simulator data": resources.pollux_data() / "workloads" / "workload-1.csv",
    "bridge Java sources": installed / "bridge" / "java" / "org" / "submarineelastic" / "bridge" / "ElasticScheduler.java",
    "metrics .proto": installed / "metrics" / "proto" / "metrics.proto",
    "elastic .proto": installed / "protocol" / "proto" / "elastic.proto",
    "controller .proto": installed / "controller" / "proto" / "controller.proto",
    "agent's sitecustomize": Path(__import__("tf_hooks.elastic._site", fromlist=["x"]).__file__).parent / "sitecustomize.py",
}.items():
    if not path.is_file():
        problems.append(f"{name}: {path} is missing")
    elif root in path.resolve().parents:
        problems.append(f"{name}: {path} is read from the checkout")
if env.settings().pollux_data_directory() != resources.pollux_data():
    problems.append("SUBMARINE_POLLUX_DATA's default is not the shipped copy")

service = build_service(
    JobRequest(
        name="smoke",
        launch_cmd="python train.py",
        limits=Limits(2, 1, 3),
        resources=WorkerResources(1024, 1),
        rm_url="http://127.0.0.1:8088",
        driver_port=30000,
    )
)
spec = json.loads(service.to_json())
components = {c["name"]: c for c in spec["components"]}
if components.get("worker", {}).get("number_of_containers") != 2:
    problems.append(f"the rendered spec has no worker component of 2: {sorted(components)}")
version = importlib.metadata.version("submarine-elastic")
if problems:
    sys.exit("wheel smoke test failed:\n  " + "\n  ".join(problems))
print(f"    submarine-elastic {version}: CLI, spec ({', '.join(sorted(components))}), resources, driver, agent: ok")
PY
