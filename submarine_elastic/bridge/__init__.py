"""The py4j bridge: a JVM caller (Submarine's server, any JVM scheduler) reports jobs and metrics to the
controller and reads its decisions back, through the Java interface
``org.submarineelastic.bridge.ElasticScheduler`` (sources under ``java/``) that the Python side
implements over py4j's ``ClientServer``.

``api`` holds the errors, defaults, bounds and file locations, ``service`` the implementation of the
interface, ``wire`` the handling of py4j's protocol on the bridge's port (what a connection may call, and
its bounds), ``server`` the py4j server around them.
"""
