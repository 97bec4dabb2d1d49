"""What every model family's config is: the component that names a network, says which data
sets and task it is built for, and builds it (importing torch only then).

A family's package holds this config (config.py, torch-free) beside its network (model.py),
as torchtitan keeps a model's args beside its model; workloads/models/__init__.py lists the
families. Not here: any network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from workloads.configuration.components import Component

if TYPE_CHECKING:
    from torch import nn

    from workloads.optimization.objectives import ClosedForm, Objective


@dataclass(frozen=True, kw_only=True)
class ModelConfig(Component):
    name: str  # each family narrows it to its own Literal: the key `model`
    # The data sets whose input shape and number of outputs the network fits.
    datasets: ClassVar[tuple[str, ...]]
    task: ClassVar[str]  # what it is trained for: a task's kind (workloads/plugins/points.py TASKS)
    # Takes NCHW images, so memory_format=channels_last means something for it.
    image_input: ClassVar[bool] = False

    def build(self, num_classes: int, sample_shape: tuple[int, ...]) -> nn.Module:
        """The network: `num_classes` outputs (the vocabulary for sequence models), for
        samples of `sample_shape`."""
        raise NotImplementedError

    def objective(self, model: nn.Module) -> Objective:
        """What training minimizes: cross-entropy, unless the family says otherwise."""
        from workloads.optimization.objectives import CrossEntropy

        return CrossEntropy()

    def closed_form(self, model: nn.Module, objective: Objective) -> ClosedForm | None:
        """The loss and gradient of `model` under `objective` without autograd, where the
        family has one (workloads/optimization/objectives.py, ClosedForm); None: autograd."""
        return None

    def optimizer_weight_decay(self) -> float:
        """Weight decay the optimizer adds for the objective's own L2 penalty, whose gradient
        it is (workloads/optimization/objectives.py, RegularizedLogistic); 0 without one."""
        return 0.0
