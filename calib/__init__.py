"""calib: neural-network calibration, from losses to reliability diagrams.

Data flows one way: data -> model -> trainer -> run record (logits + labels)
-> metrics / post-hoc -> plots and tables. Subpackages by layer (a module imports
only from its own layer or a lower one):

``metrics``      accuracy, NLL, Brier, ECE/MCE/AdaECE/Classwise-ECE, smooth ECE, bootstrap
``posthoc``      temperature scaling, histogram binning and richer calibrators (fit / predict_proba)
``losses``       every training loss of the five papers, the uncertainty weights, a registry
``theory``       sympy derivations the book shows and the tests check, by topic
``data``         Fashion-MNIST, CIFAR/SVHN/Tiny-ImageNet loaders, toy data with a known posterior
``models``       CIFAR ResNets, WideResNet, DenseNet, small CNNs and an MLP
``train``        the trainer and its pieces, presets, run records, mixup, meta-learning
``experiments``  sweeps and their tables, the papers' numbers as data, toy studies
``plots``        reliability diagrams and the book's figures
``profile``      the ``CALIB_PROFILE`` switch (quick | colab | paper), smoke mode, claims, Colab times
``cli``          ``python -m calib``
"""
__version__ = "0.1.0"
