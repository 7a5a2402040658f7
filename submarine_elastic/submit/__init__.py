"""The submit side: what runs on the submitting machine to put a job on the cluster (``submarine job run``).

``service`` (flags -> ``prepare`` -> the cluster's checks -> ``submit``), ``jobspec`` (the request and the YARN
service spec built from it, with the containers' settings), ``jobcode`` (the job's code and Python
environment), ``jobfiles`` (the job's files on HDFS), ``store`` (what this machine keeps of each job) and
``client`` (the client of a running job's driver, with the credentials ``store`` keeps: ``job flex / show``, the
controller). The in-container runtime (``elastic``) imports none of it but ``jobcode.unpack_code``.
"""
