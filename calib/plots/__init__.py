"""Every figure of the book. Chapters call these; they never draw ad hoc.

Submodules, one per chapter family (all re-exported here):
``reliability``  reliability diagrams, confidence histograms, ECE against the number of bins
``losses``       loss and gradient curves against the true-class probability
``theory``       g(p, gamma), the binary focal optimum, simplex weight maps
``training``     training curves (NLL, ECE, entropy, weight norm over epochs)
``meta``         gamma distribution over epochs
``repro``        curves over epochs with bands, coefficient sweeps, grouped histograms
"""
from .reliability import *  # noqa: F401,F403
from .losses import *  # noqa: F401,F403
from .theory import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403
from .meta import *  # noqa: F401,F403
from .repro import *  # noqa: F401,F403
from .derivations import *  # noqa: F401,F403
