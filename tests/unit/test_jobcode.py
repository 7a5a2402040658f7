"""What a job carries to the nodes (``submit.jobcode``): the code snapshot (what it holds and leaves out, its
bound, its refusals, ``--localization``), the packed environment, the Docker settings, and where ``job run``
puts each."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import types
from pathlib import Path, PurePosixPath

import pytest
import responses
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.submit import jobcode
from submarine_elastic.submit.jobcode import (
    CodeSnapshot,
    JobCodeError,
    Localization,
    PackedEnv,
    read_carried,
    snapshot,
)
from submarine_elastic.submit.jobfiles import HdfsJobFiles
from submarine_elastic.submit.jobspec import JobSpecError, build_service, job_dir
from submarine_elastic.submit.service import submit
from submarine_elastic.yarn import YarnError
from tests.unit.test_hdfs import FS, FakeHdfs
from tests.unit.test_jobspec import RecordingYarn, request


@pytest.fixture(autouse=True)
def jobs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    return tmp_path / "jobs"


@pytest.fixture()
def code(tmp_path: Path) -> Path:
    """A project as users have them: code, a git checkout, caches, a virtualenv and a conda env inside."""
    root = tmp_path / "project"
    files = {
        "train.py": "print('train')\n",
        "model/net.py": "NET = 1\n",
        "model/__pycache__/net.cpython-312.pyc": "x",
        "model/old.pyc": "x",
        ".git/HEAD": "ref: refs/heads/main\n",
        ".mypy_cache/3.12/x.json": "{}",
        ".venv/pyvenv.cfg": "home = /usr/bin\n",
        ".venv/lib/site.py": "x" * 1000,
        "env/conda-meta/history": "x",
        "env/bin/python": "x",
        "configs/a.yaml": "lr: 0.1\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "empty").mkdir()
    (root / "latest").symlink_to("configs/a.yaml")
    return root


def members(snap: CodeSnapshot) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(snap.archive, "r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_a_snapshot_holds_the_code_and_leaves_out_version_control_caches_compiled_python_and_environments(
    code: Path, tmp_path: Path
):
    snap = snapshot(code, [], tmp_path)
    got = members(snap)
    assert set(got) == {"train.py", "model/net.py", "configs/a.yaml", "empty", "latest"}
    assert got["latest"].issym() and got["latest"].linkname == "configs/a.yaml"  # a link stays a link
    assert got["empty"].isdir()
    with tarfile.open(snap.archive, "r:gz") as tar:
        extracted = tar.extractfile("train.py")
        assert extracted is not None and extracted.read() == b"print('train')\n"
    assert snap.files == 5 and snap.content_bytes == len("print('train')\n") + len("NET = 1\n") + len("lr: 0.1\n")
    assert snap.archive_bytes == snap.archive.stat().st_size and snap.name == f"code-{snap.sha256[:16]}.tar.gz"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_in_a_git_work_tree_what_git_ignores_stays_out(code: Path, tmp_path: Path):
    subprocess.run(["git", "init", "-q", str(code)], check=True)
    (code / ".gitignore").write_text("build/\n*.log\n")
    (code / "build" / "lib").mkdir(parents=True)
    (code / "build" / "lib" / "big.so").write_text("x" * 1000)
    (code / "run.log").write_text("log\n")
    assert set(members(snapshot(code, [], tmp_path))) == {
        ".gitignore",
        "train.py",
        "model/net.py",
        "configs/a.yaml",
        "empty",
        "latest",
    }


def test_the_same_code_has_the_same_name_whenever_it_is_packed_and_other_code_another(code: Path, tmp_path: Path):
    first = snapshot(code, [], tmp_path)
    os.utime(code / "train.py", (1, 1))  # times are not content
    (code / "model" / "__pycache__" / "new.pyc").write_text("y")  # nor what is left out
    assert snapshot(code, [], tmp_path).name == first.name
    (code / "train.py").write_text("print('changed')\n")
    assert snapshot(code, [], tmp_path).name != first.name


def test_localizations_go_into_the_snapshot_at_their_destination_read_only_when_asked(code: Path, tmp_path: Path):
    data = tmp_path / "vocab"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "words.txt").write_text("a b c\n")
    single = tmp_path / "settings.json"
    single.write_text("{}")
    locs = [
        Localization.parse(f"{data}:assets/vocab:ro", tmp_path),
        Localization.parse("settings.json:cfg.json", tmp_path),
    ]
    got = members(snapshot(code, locs, tmp_path))
    assert got["assets/vocab/sub/words.txt"].mode & 0o222 == 0
    assert got["cfg.json"].isfile() and got["cfg.json"].mode & 0o200
    assert "train.py" in got


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("hdfs:///user/me/data:data", "a remote source is not supported"),
        ("s3a://bucket/x:./x", "a remote source is not supported"),
        ("onlysrc", "expected SRC:DEST"),
        ("src:dest:rx", "expected SRC:DEST"),
        ("a:b:c:d", "expected SRC:DEST"),
        ("src:/opt/data", "DEST must be relative"),
        ("src:../up", "DEST must name a path inside"),
        ("missing:data", "the source .*missing does not exist"),
    ],
)
def test_a_bad_localization_is_refused_naming_it(text: str, problem: str, tmp_path: Path):
    (tmp_path / "src").mkdir()
    with pytest.raises(JobCodeError, match=problem) as refused:
        Localization.parse(text, tmp_path)
    assert f"--localization {text!r}" in str(refused.value)


def test_the_parsed_localization_has_submarines_meaning(tmp_path: Path):
    (tmp_path / "data").mkdir()
    assert Localization.parse("data:./data", tmp_path) == Localization(tmp_path / "data", PurePosixPath("data"))
    assert Localization.parse("data:d:ro", tmp_path).read_only
    assert not Localization.parse("data:d:rw", tmp_path).read_only


def test_a_snapshot_over_its_bound_is_refused_naming_the_source_and_its_largest_file_and_leaves_nothing(
    code: Path, tmp_path: Path
):
    (code / "data.bin").write_bytes(b"\0" * 4096)
    into = tmp_path / "out"
    into.mkdir()
    with pytest.raises(JobCodeError) as refused:
        snapshot(code, [], into, limit=4000)
    message = str(refused.value)
    assert f"--workdir {code}" in message and f"{code / 'data.bin'}" in message and "over its bound" in message
    assert list(into.iterdir()) == []
    # What is left out does not count: the virtualenv's 1000 bytes are not in the 2 KiB bound.
    (code / "data.bin").unlink()
    assert snapshot(code, [], into, limit=100).content_bytes <= 100


def test_a_missing_workdir_is_refused_naming_it(tmp_path: Path):
    with pytest.raises(JobCodeError, match=f"--workdir {tmp_path / 'gone'}: no such directory"):
        snapshot(tmp_path / "gone", [], tmp_path)


def test_with_a_snapshot_every_container_gets_it_as_a_file_and_the_command_runs_where_it_is_unpacked(
    code: Path, tmp_path: Path
):
    snap = snapshot(code, [], tmp_path)
    spec = build_service(request(code=snap, workdir=code)).to_dict()
    files = {f["dest_file"]: f for f in spec["configuration"]["files"]}
    # A file, not an ARCHIVE (a directory link the NodeManager's in-place relaunch turns into a loop).
    assert files["code.tar.gz"] == {
        "type": "STATIC",
        "src_file": f"file://{job_dir('mnist').resolve()}/{snap.name}",
        "dest_file": "code.tar.gz",
    }
    assert spec["configuration"]["env"]["SUBMARINE_WORKDIR"] == "$PWD/code"
    # Without one, the command runs where it was submitted from, as before.
    assert build_service(request(workdir=code)).to_dict()["configuration"]["env"]["SUBMARINE_WORKDIR"] == str(code)
    with_hdfs = build_service(request(code=snap, files_uri=f"{FS}/submarine-jobs/alice/mnist")).to_dict()
    archive = next(f for f in with_hdfs["configuration"]["files"] if f["dest_file"] == "code.tar.gz")
    assert archive["src_file"] == f"{FS}/submarine-jobs/alice/mnist/{snap.name}"


def test_the_agent_unpacks_the_snapshot_once_per_container(code: Path, tmp_path: Path):
    snap = snapshot(code, [], tmp_path)
    container = tmp_path / "container"
    container.mkdir()
    assert jobcode.unpack_code(container) is None  # a job without a snapshot
    (container / "code.tar.gz").symlink_to(snap.archive)  # as the NodeManager localizes it
    unpacked = jobcode.unpack_code(container)
    assert unpacked == container / "code" and (unpacked / "train.py").read_text() == "print('train')\n"
    assert (unpacked / "latest").is_symlink()
    # A worker relaunched in its container (the link made again) finds it unpacked, and nothing is unpacked twice.
    (unpacked / "train.py").write_text("changed by the job\n")
    (container / "code.tar.gz").unlink()
    (container / "code.tar.gz").symlink_to(snap.archive)
    assert jobcode.unpack_code(container) == unpacked and (unpacked / "train.py").read_text() == "changed by the job\n"


def packed_env(path: Path, *, python: bool = True) -> Path:
    """A venv-pack-like archive: ``bin/python`` and a module."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in ({"bin/python": b"#!", "lib/mod.py": b"X = 1\n"} if python else {"a": b"x"}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_packed_environment_runs_the_driver_the_agents_and_the_training_command(tmp_path: Path):
    env = PackedEnv.load(packed_env(tmp_path / "env.tar.gz"))
    spec = build_service(request(python_env=env, files_uri=f"{FS}/submarine-jobs/alice/mnist")).to_dict()
    driver, worker = spec["components"]
    assert driver["launch_command"] == "python-env/bin/python -m submarine_elastic.elastic.driver"
    assert worker["launch_command"] == "python-env/bin/python -m submarine_elastic.elastic.agent"
    assert spec["configuration"]["env"]["PATH"].startswith("$PWD/python-env/bin:")  # the command's `python` too
    archive = next(f for f in spec["configuration"]["files"] if f["dest_file"] == "python-env")
    assert archive == {
        "type": "ARCHIVE",
        "src_file": f"{FS}/submarine-jobs/alice/.python-envs/{env.sha256[:32]}.tar.gz",
        "dest_file": "python-env",
        "visibility": "PRIVATE",  # kept on each node for the user's next job of the same environment
    }
    # By default the submitter's own interpreter, as on the pseudo-cluster.
    assert build_service(request()).to_dict()["components"][0]["launch_command"].startswith("/venv/bin/python -m")


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda p: p / "none.tar.gz", "no such file"),
        (lambda p: (p / "env.zip").write_bytes(b"PK") and p / "env.zip", "must be a .tar.gz"),
        (lambda p: (p / "bad.tar.gz").write_bytes(b"not gzip") and p / "bad.tar.gz", "not a gzip'd tar"),
        (lambda p: packed_env(p / "nopy.tar.gz", python=False), "no bin/python in it"),
    ],
)
def test_a_bad_python_env_is_refused_naming_it(make, problem: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    path = make(tmp_path)
    with pytest.raises(JobCodeError, match=problem) as refused:
        PackedEnv.load(path)
    assert f"--python_env {path}" in str(refused.value)


def test_a_docker_image_gives_yarns_docker_runtime_settings_and_mounts_the_jobs_paths(tmp_path: Path):
    req = request(docker_image="tensorflow/tensorflow:2.18.0", checkpoint_path="/shared/ckpt", input_path="/data/in")
    spec = build_service(req).to_dict()
    env = spec["configuration"]["env"]
    assert env["YARN_CONTAINER_RUNTIME_TYPE"] == "docker"
    assert env["YARN_CONTAINER_RUNTIME_DOCKER_IMAGE"] == "tensorflow/tensorflow:2.18.0"
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"  # no path of the submitter's machine
    driver, worker = spec["components"]
    for comp in (driver, worker):
        assert comp["artifact"] == {"type": "DOCKER", "id": "tensorflow/tensorflow:2.18.0"}
        assert comp["launch_command"].startswith("python3 -m submarine_elastic.elastic.")
    jobs = str(job_dir("mnist").resolve().parent)
    assert worker["configuration"]["env"]["YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS"] == (
        "/shared/ckpt:/shared/ckpt:rw,/data/in:/data/in:ro"
    )
    assert driver["configuration"]["env"]["YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS"] == (
        f"/shared/ckpt:/shared/ckpt:rw,/data/in:/data/in:ro,{jobs}:{jobs}:rw"
    )
    # An HDFS input is read from HDFS, not mounted; a path a mount cannot hold is refused.
    hdfs_in = build_service(request(docker_image="img", input_path="hdfs://nn/x")).to_dict()
    worker_env = hdfs_in["components"][1]["configuration"]["env"]
    assert "YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS" not in worker_env
    with pytest.raises(JobSpecError, match="--checkpoint_path '/a:b'.*must not contain"):
        request(docker_image="img", checkpoint_path="/a:b")
    # With a packed environment, its interpreter even in the image.
    env_archive = PackedEnv.load(packed_env(tmp_path / "env.tar.gz"))
    both = build_service(request(docker_image="img", python_env=env_archive)).to_dict()
    assert both["components"][1]["launch_command"].startswith("python-env/bin/python -m")


def test_on_hdfs_the_snapshot_goes_into_the_jobs_directory_and_the_environment_once_into_the_users_cache(
    code: Path, tmp_path: Path
):
    hdfs = FakeHdfs()
    files = HdfsJobFiles(hdfs, FS)  # type: ignore[arg-type]
    snap = snapshot(code, [], tmp_path)
    env = PackedEnv.load(packed_env(tmp_path / "env.tar.gz"))
    req = request(code=snap, python_env=env, files_uri=files.uri("mnist"))
    submit(RecordingYarn(), req, files=files)  # type: ignore[arg-type]
    assert hdfs.paths[f"/submarine-jobs/alice/mnist/{snap.name}"] == (0o600, snap.archive.read_bytes())
    cached = f"/submarine-jobs/alice/.python-envs/{env.name}"
    assert hdfs.paths[cached] == (0o600, env.archive.read_bytes())
    assert hdfs.paths["/submarine-jobs/alice/.python-envs"][0] == 0o700
    shown = read_carried("mnist")
    assert shown["code"].startswith(f"snapshot {FS}/submarine-jobs/alice/mnist/{snap.name} (")
    assert shown["python"].startswith(f"packed environment {FS}/submarine-jobs/alice/.python-envs/{env.name}")

    # A second job of the same environment does not upload it again.
    writes: list[str] = []
    create = hdfs.create
    hdfs.create = lambda path, data, mode: (writes.append(path), create(path, data, mode))[1]  # type: ignore[method-assign]
    submit(RecordingYarn(), request(name="other", python_env=env, files_uri=files.uri("other")), files=files)  # type: ignore[arg-type]
    assert cached not in writes and writes


def test_a_refused_job_leaves_no_snapshot_behind_on_hdfs_or_here(code: Path, tmp_path: Path):
    hdfs = FakeHdfs()
    files = HdfsJobFiles(hdfs, FS)  # type: ignore[arg-type]
    snap = snapshot(code, [], tmp_path)
    with pytest.raises(YarnError):
        submit(RecordingYarn(refuse=True), request(code=snap, files_uri=files.uri("mnist")), files=files)  # type: ignore[arg-type]
    assert hdfs.under("/submarine-jobs/alice/mnist") == {}
    with pytest.raises(YarnError):
        submit(RecordingYarn(refuse=True), request(code=snap), files=None)  # type: ignore[arg-type]
    assert not job_dir("mnist").exists()
    # Accepted without HDFS: the snapshot beside the job's secrets, where the NodeManagers read it.
    submit(RecordingYarn(), request(code=snap), files=None)  # type: ignore[arg-type]
    assert (job_dir("mnist") / snap.name).read_bytes() == snap.archive.read_bytes()


@responses.activate
def test_job_run_refuses_a_snapshot_over_its_bound_or_a_missing_source_before_anything_is_sent(
    code: Path, monkeypatch: pytest.MonkeyPatch
):
    rm = "http://rm.example:8088"
    monkeypatch.setenv("SUBMARINE_RM_URL", rm)
    monkeypatch.chdir(code)
    responses.get(f"{rm}/conf", status=404)
    responses.get(f"{rm}/app/v1/services/big", status=404, json={"diagnostics": "not found"})
    args = ["job", "run", "--name", "big", "--worker_launch_cmd", "python train.py"]
    result = CliRunner().invoke(cli, [*args, "--localization", "nothere:data"])
    assert result.exit_code == 1 and f"the source {code / 'nothere'} does not exist" in result.output
    assert len(responses.calls) == 0  # refused before the RM was asked anything

    monkeypatch.setattr(jobcode, "MAX_SNAPSHOT_BYTES", 10)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and f"--workdir {code}" in result.output and "over its bound" in result.output
    assert all(c.request.method == "GET" for c in responses.calls)  # nothing submitted
    assert not job_dir("big").exists()


def test_pack_env_says_clearly_when_its_packer_is_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    venv = tmp_path / "venv"
    venv.mkdir()
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    monkeypatch.setitem(sys.modules, "venv_pack", None)  # import fails
    result = CliRunner().invoke(cli, ["job", "pack-env", "-o", str(tmp_path / "env.tar.gz")])
    assert result.exit_code == 1
    assert f"venv-pack is not installed in {venv}" in result.output and "pip install venv-pack" in result.output
    monkeypatch.setattr(sys, "prefix", "/usr")
    result = CliRunner().invoke(cli, ["job", "pack-env"])
    assert result.exit_code == 1 and "neither a virtualenv nor a conda environment" in result.output


def test_pack_env_packs_this_virtualenv_with_venv_pack_into_an_archive_job_run_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    venv = tmp_path / "venv"
    venv.mkdir()
    asked: list[dict[str, object]] = []

    def pack(**kw: object) -> None:
        asked.append(kw)
        packed_env(Path(str(kw["output"])))

    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    monkeypatch.setitem(sys.modules, "venv_pack", types.SimpleNamespace(pack=pack))
    out = tmp_path / "env.tar.gz"
    result = CliRunner().invoke(cli, ["job", "pack-env", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert asked == [{"prefix": str(venv), "output": str(out), "force": False}]
    assert f"submarine job run --python_env {out}" in " ".join(result.output.split())
    assert PackedEnv.load(out).archive_bytes == out.stat().st_size
