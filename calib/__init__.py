"""calib: neural-network calibration, from losses to reliability diagrams.

Data flows one way: data -> model -> trainer -> run record (logits + labels)
-> metrics / post-hoc -> plots and tables. Modules, one idea each:

``metrics``      accuracy, NLL, Brier, ECE/MCE/AdaECE/Classwise-ECE, smooth ECE, bootstrap
``posthoc``      temperature, vector, matrix, Dirichlet and Platt scaling, isotonic, ensemble TS, histogram binning (fit / predict_proba)
``losses``       every training loss of the five papers, with a registry
``uncertainty``  sample-wise weights u_FL, u_DFL, u_gBS
``theory``       sympy derivations the book shows and the tests check
``data``         CIFAR/SVHN/Tiny-ImageNet loaders, Gaussian-mixture toy data
``models``       CIFAR ResNets, WideResNet, DenseNet, small CNN/MLP
``train``        the trainer; CLI ``python -m calib``
``records``      run-record files and pure functions over them (metrics.json from logits)
``presets``      the papers' protocols as data: schedules, TS method, selection, seeds
``sweep``        losses x seeds (x data x models) -> run dirs, results.csv, summary.md
``meta``         gamma-Net and SECE meta-regularisation; the learnable-L2 (CE-DECE/SECE) baselines
``mixup``        mixup batches and the mixed loss
``papers``       the papers' table numbers as data (``paper_results.csv``)
``plots``        reliability diagrams and the book's figures
``profile``      the ``CALIB_PROFILE`` switch (quick | colab | paper), smoke and debug modes
``runtime``      expected Colab T4 time of a chapter (measured, or estimated from FLOPs)
"""
__version__ = "0.1.0"
