"""A job's files on the cluster's HDFS: what ``job run`` gives its containers (its token, TLS files, the
metrics credentials, the keytab, its code snapshot) kept in a directory of the submitting user's alone, from
which YARN localizes them into each container; ``job kill`` removes it. Packed Python environments are kept
beside the jobs' directories, once per content (``jobspec.ENV_CACHE``).

Without HDFS the files are in the job's directory under the jobs directory, which every NodeManager must
read (``jobspec.job_dir``); with it the submitting side keeps only what ``job flex|show`` need
(``jobspec.CLIENT_FILES``).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from submarine_elastic.submit.jobspec import ENV_CACHE, JOB_NAME, JobRequest, JobSpecError, job_secrets

if TYPE_CHECKING:
    from submarine_elastic.submit.jobcode import PackedEnv
from submarine_elastic.limits import HDFS_JOBS
from submarine_elastic.webhdfs import WebHdfs, WebHdfsError

#: Modes of a user's and a job's directories and of a job's files on HDFS: the user's alone.
DIR_MODE, FILE_MODE = 0o700, 0o600


@dataclass(frozen=True)
class HdfsJobFiles:
    """The job directories of ``hdfs.user`` on the HDFS whose ``fs.defaultFS`` is ``default_fs``.

    Every call blocks for a few WebHDFS requests (each bounded by ``webhdfs.WEBHDFS_TIMEOUT``).
    """

    hdfs: WebHdfs
    default_fs: str

    def path(self, job: str) -> str:
        """The job's directory on HDFS.

        Raises:
            JobSpecError: ``job`` is not a job name (so never a path outside the jobs' directory).
        """
        if (problem := JOB_NAME.problem(job)) is not None:
            raise JobSpecError(problem)
        return f"{self.home}/{job}"

    @property
    def home(self) -> str:
        """The user's directory of jobs on HDFS."""
        return f"{HDFS_JOBS}/{self.hdfs.user}"

    def uri(self, job: str) -> str:
        """The job's directory as YARN localizes from it (``hdfs://<NameNode>/user/...``)."""
        return f"{self.default_fs.rstrip('/')}{self.path(job)}"

    def put(self, req: JobRequest) -> str:
        """Writes the files ``req``'s containers get (``jobspec.job_secrets``) into the job's directory, made
        anew with mode 0700, each file 0600. What was written is removed again when a write fails.

        Returns:
            The directory's path.

        Raises:
            WebHdfsError: HDFS refused or did not answer, or the user's directory of jobs is not theirs alone
                (another user made it first); nothing of the job is left on HDFS.
        """
        directory = self.path(req.name)
        self.hdfs.mkdirs(self.home, DIR_MODE)
        home = self.hdfs.status(self.home)
        if home is None or (home.get("owner"), home.get("permission")) != (self.hdfs.user, f"{DIR_MODE:o}"):
            found = "missing" if home is None else f"owner {home.get('owner')}, mode {home.get('permission')}"
            raise WebHdfsError(
                f"HDFS {self.home} must be {self.hdfs.user}'s alone (mode {DIR_MODE:o}) to hold their jobs' files: "
                f"it has {found}; its owner or HDFS's superuser must remove it"
            )
        self.hdfs.delete(directory, recursive=True)  # an earlier job of that name
        try:
            self.hdfs.mkdirs(directory, DIR_MODE)
            self.hdfs.set_permission(directory, DIR_MODE)  # MKDIRS applies the NameNode's umask
            for name, value in job_secrets(req).items():
                self.hdfs.create(f"{directory}/{name}", value.encode() if isinstance(value, str) else value, FILE_MODE)
            if req.code is not None:
                with req.code.archive.open("rb") as code:
                    self.hdfs.create(f"{directory}/{req.code.name}", code, FILE_MODE)
            if req.python_env is not None:
                self.put_env(req.python_env)
        except BaseException:
            with contextlib.suppress(WebHdfsError):
                self.remove(req.name)
            raise
        return directory

    def put_env(self, env: PackedEnv) -> str:
        """Uploads a packed environment into the user's :data:`ENV_CACHE` unless a file of its content hash and
        size is there already. A failed upload is removed again.

        Returns:
            Its path on HDFS.

        Raises:
            WebHdfsError: HDFS refused or did not answer.
        """
        cache = f"{self.home}/{ENV_CACHE}"
        path = f"{cache}/{env.name}"
        found = self.hdfs.status(path)
        if found is not None and found.get("length") == env.archive_bytes:
            return path
        self.hdfs.mkdirs(cache, DIR_MODE)
        try:
            with env.archive.open("rb") as data:
                self.hdfs.create(path, data, FILE_MODE)
        except BaseException:
            with contextlib.suppress(WebHdfsError):
                self.hdfs.delete(path)
            raise
        return path

    def remove(self, job: str) -> bool:
        """Removes the job's directory and its files. Returns False when there was none.

        Raises:
            WebHdfsError: HDFS refused or did not answer.
        """
        return self.hdfs.delete(self.path(job), recursive=True)
