"""Faults at random under a live workload, and a checker that proves nothing was lost (:mod:`.run`)."""

from submarine_elastic.chaos.catalogue import FaultKind, catalogue
from submarine_elastic.chaos.run import ChaosResult, ChaosRun, Injected

__all__ = ["ChaosResult", "ChaosRun", "FaultKind", "Injected", "catalogue"]
