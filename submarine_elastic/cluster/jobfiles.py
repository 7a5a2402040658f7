"""Where a cluster keeps its jobs' files (:class:`~submarine_elastic.submit.jobfiles.HdfsJobFiles`): the HDFS
its Hadoop configuration, the pseudo-cluster recorded here, or its ResourceManager's own configuration names; for
``job run`` and ``job kill``, and the controller removing an ended job's files."""

from __future__ import annotations

from submarine_elastic import env
from submarine_elastic.cluster.api import ClusterError
from submarine_elastic.cluster.hadoop_conf import hdfs_addresses
from submarine_elastic.cluster.local import LocalCluster
from submarine_elastic.submit.jobfiles import HdfsJobFiles
from submarine_elastic.webhdfs import WebHdfs
from submarine_elastic.yarn import YarnError, YarnServiceClient, cluster_away


class JobFilesLookupError(Exception):
    """Where a cluster keeps its jobs' files cannot be told: a Hadoop configuration or a cluster directory that
    cannot be read, or an HDFS whose NameNode web address nobody names."""


def cluster_job_files(rm_url: str) -> HdfsJobFiles | None:
    """The job directories, as the YARN user, on the HDFS that ``HADOOP_CONF_DIR`` names, else on the HDFS of
    the cluster recorded in ``SUBMARINE_CLUSTER_DIR`` when its RM is ``rm_url``, else on the HDFS the RM's own
    configuration names (its ``/conf`` page). None: the cluster has no HDFS, and the files are local.

    Raises:
        JobFilesLookupError: ``HADOOP_CONF_DIR`` cannot be read, or the RM's file system is HDFS but nothing
            names its NameNode's web address.
        YarnError: the RM did not answer when asked its configuration
            (:func:`~submarine_elastic.yarn.cluster_away`): whether the cluster has HDFS is not known.
    """
    conf = env.settings().hadoop_conf_dir
    try:
        if conf is not None:
            found = hdfs_addresses(conf)
        else:
            spec = LocalCluster().spec()
            found = (spec.default_fs, spec.webhdfs_url) if spec.webhdfs_url and spec.rm_url == rm_url else None
    except ClusterError as exc:
        if conf is not None:
            raise JobFilesLookupError(str(exc)) from exc
        found = None  # no cluster recorded here
    if found is None:
        found = _rm_hdfs(rm_url)
    if found is None:
        return None
    default_fs, webhdfs_url = found
    return HdfsJobFiles(WebHdfs(webhdfs_url, env.settings().user()), default_fs)


def _rm_hdfs(rm_url: str) -> tuple[str, str] | None:
    """``fs.defaultFS`` and the NameNode's WebHDFS address from the configuration of the ResourceManager at
    ``rm_url``; None when its file system is not HDFS or it does not answer.

    Raises:
        JobFilesLookupError: the RM's file system is HDFS but its configuration names no NameNode web address.
    """
    try:
        with YarnServiceClient(rm_url, retries=0) as yarn:
            default_fs = yarn.config_value("fs.defaultFS") or ""
            if not default_fs.startswith("hdfs://"):
                return None
            web = yarn.config_value("dfs.namenode.http-address")
    except YarnError as exc:
        if cluster_away(exc):
            raise  # not "no HDFS": files kept locally would be refused once the RM is back ("Wrong FS")
        return None
    if not web or web.startswith("0.0.0.0:"):
        raise JobFilesLookupError(
            f"the cluster's file system is {default_fs} (the ResourceManager's fs.defaultFS), where YARN looks for a "
            f"job's files, but its configuration names no NameNode web address to put them there: set "
            f"SUBMARINE_CLUSTER_DIR to the cluster's directory or HADOOP_CONF_DIR to a Hadoop configuration naming "
            f"dfs.namenode.http-address"
        )
    return default_fs, f"http://{web}"
