"""The YARN service specs submarine-elastic submits, shipped as data (``resources.job_template()``)."""
