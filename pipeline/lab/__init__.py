"""The consumer-group scaling lab: the R-LAB-1 model, and runs that measure it.

* :mod:`.scenario` / :mod:`.loader` -- the scenario file (TOML) as frozen value objects.
* :mod:`.formulas` / :mod:`.assignors` / :mod:`.model` -- the model alone, pure.
* ``fleet lab predict`` prints it; ``docs/lab.md`` states its assumptions.
"""

from .loader import load_scenario
from .model import Prediction, predict
from .scenario import Scenario

__all__ = ["Prediction", "Scenario", "load_scenario", "predict"]
