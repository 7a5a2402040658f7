"""submarine-elastic: change the worker count of a running TensorFlow job on Hadoop YARN."""

__version__ = "0.1.0"
