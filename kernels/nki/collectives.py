"""``nki.collectives``: the collectives of NKI 0.2 between the ranks of a replica group.

A launch here is one kernel on one NeuronCore (or the cores of an ``nl.nc`` grid on one
chip); collectives between ranks are the system model's (``gen step``, ``gen infer``: the
collectives formula, executed where asked), not a kernel's. So the module imports, as
aws-neuron/nki-library's kernels import it whether or not they use it, and each call is
refused where it is made, naming what is supported instead."""

from __future__ import annotations

from .errors import Unimplemented
from .language import NKIObject

__all__ = ["ReplicaGroup", "all_gather", "all_gather_v", "all_reduce", "all_to_all",
           "all_to_all_v", "collective_permute", "collective_permute_implicit",
           "collective_permute_implicit_current_processing_rank_id",
           "collective_permute_implicit_reduce", "rank_id", "reduce_scatter"]

_SUPPORTED = ("a kernel on one NeuronCore or on the cores of one chip (nl.nc); collectives "
              "between ranks are timed by gen step and gen infer")


class ReplicaGroup(NKIObject):
    """The ranks of a collective, as sub-groups of rank numbers (``replica_groups``)."""

    def __init__(self, replica_groups=None, **kwargs):
        self.replica_groups = replica_groups
        self.__dict__.update(kwargs)


def _refused(name: str) -> Unimplemented:
    return Unimplemented(f"nki.collectives.{name}", _SUPPORTED)


all_reduce = _refused("all_reduce")
all_gather = _refused("all_gather")
all_gather_v = _refused("all_gather_v")
reduce_scatter = _refused("reduce_scatter")
all_to_all = _refused("all_to_all")
all_to_all_v = _refused("all_to_all_v")
collective_permute = _refused("collective_permute")
collective_permute_implicit = _refused("collective_permute_implicit")
collective_permute_implicit_reduce = _refused("collective_permute_implicit_reduce")
collective_permute_implicit_current_processing_rank_id = _refused(
    "collective_permute_implicit_current_processing_rank_id")
rank_id = _refused("rank_id")
