"""The elastic job runtime: the job driver, the worker agent, job specs and the client of a running job.

Interfaces, errors and value types are in :mod:`submarine_elastic.elastic.api`.
"""
