"""Data: real images offline, real CIFAR predictions, toy data with a known posterior, a device-resident loader.

=================  ==========================================================================
``vision``         ``load(name, ...)``: Fashion-MNIST, CIFAR-10/100, SVHN, Tiny-ImageNet from
                   their on-disk formats (and the toy data by name); train/val splits,
                   ``train_size`` subsets; the downloads where the network allows
``idx``            Fashion-MNIST's IDX files: a strict reader and writer, the folders searched
                   (``$CALIB_DATA``, Debian's ``dataset-fashion-mnist``, ``data/``)
``predictions``    ``cifar_predictions(name)``: softmax outputs of WRN-16-4, DenseNet-BC-100 and
                   LeNet-5 on the CIFAR test sets (netcal's records, Apache-2.0), in float16
``toy``            Gaussian mixture with the true posterior eta(x); scikit-learn's bundled digits
``splits``         the ``Splits`` container every loader returns; smoke-mode subsets
``loader``         a loader that keeps a whole split on the device and augments a batch at once
``shift``          image corruptions at five severities (noise, blur, rotation) for shift studies
``fake``           tiny synthetic Fashion-MNIST/CIFAR/SVHN/Tiny-ImageNet in the real formats
=================  ==========================================================================
"""
from . import fake, shift  # noqa: F401
from .splits import *  # noqa: F401,F403
from .toy import *  # noqa: F401,F403
from .vision import *  # noqa: F401,F403
from .idx import IDXError  # noqa: F401
from .predictions import *  # noqa: F401,F403
from .loader import *  # noqa: F401,F403
