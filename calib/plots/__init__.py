"""Every figure of the book. Chapters call these; they never draw ad hoc.

Submodules, one per chapter family (all re-exported here):
``palette``      one colour per loss and per focal parameter γ, shared by every figure
``reliability``  reliability diagrams (with resampled intervals), confidence histograms, ECE against bins
``losses``       loss and gradient curves against the true-class probability
``theory``       g(p, gamma), the binary focal optimum, simplex weight maps
``training``     training curves (NLL, ECE, entropy, weight norm over epochs)
``meta``         gamma distribution over epochs
``repro``        curves over epochs with bands, coefficient sweeps, grouped histograms
``stats``        seaborn, over seeds: a metric per loss with intervals, confidence violins, sweep heatmaps
``shift``        a metric against corruption severity, a line per method with seed bands
``verdicts``     a family of verdicts at a glance: an HTML grid of claims by conditions

:func:`book_style` sets what every chapter shares: fonts of at least 9 pt and SVG output
in notebooks, so figures stay sharp at any zoom.
"""
from .._optional import need

need("plots", "calib.plots", "matplotlib", "scipy")

from . import palette  # noqa: F401
from .palette import color_for, gamma_color, series_color  # noqa: F401
from .reliability import *  # noqa: F401,F403
from .losses import *  # noqa: F401,F403
from .theory import *  # noqa: F401,F403
from .training import *  # noqa: F401,F403
from .meta import *  # noqa: F401,F403
from .repro import *  # noqa: F401,F403
from .derivations import *  # noqa: F401,F403
from .stats import *  # noqa: F401,F403
from .shift import *  # noqa: F401,F403
from .verdicts import *  # noqa: F401,F403
from .style import book_style  # noqa: F401
