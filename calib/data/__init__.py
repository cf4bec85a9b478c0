"""Data: offline toy data with a known posterior, real image datasets, a device-resident loader.

``toy``     Gaussian mixture with the true posterior eta(x); scikit-learn's bundled digits
``splits``  the Splits container every loader returns
``vision``  CIFAR-10/100, SVHN, Tiny-ImageNet from their on-disk formats; train/val splits
``loader``  a loader that keeps a whole split on the device and augments a batch at once
``splits``  the ``Splits`` container every loader returns; smoke-mode subsets
``fake``    tiny synthetic CIFAR/SVHN/Tiny-ImageNet in the real on-disk formats
"""
from . import fake  # noqa: F401
from .splits import *  # noqa: F401,F403
from .toy import *  # noqa: F401,F403
from .splits import *  # noqa: F401,F403
from .vision import *  # noqa: F401,F403
from .loader import *  # noqa: F401,F403
