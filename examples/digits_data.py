"""The handwritten digits the examples train on, read from data/digits.npz
beside this file (no download, no extra package).

The set is the UCI "Optical Recognition of Handwritten Digits" test set
(E. Alpaydin, C. Kaynak, 1998; CC BY 4.0): 1797 images of 8x8 pixels, each
pixel a count of 0..16, with their digit, in the order scikit-learn's
load_digits() gives them, so results match runs that read it from there.

Why not scikit-learn: MXNet 1.9.1 imports sklearn.base (for its old
FeedForward API) and scipy.stats whenever they are installed, which costs
every rank process about 1.8 s of CPU at `import mxnet` on a 2-core machine
(measured 4.4 s with them, 2.6 s without), and a launch starts one process
per rank."""
import os

import numpy as np

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "digits.npz")


def load_digits():
    """(images, labels): images float64 of shape (1797, 64) holding 0..16,
    labels int64 of shape (1797,) holding 0..9."""
    with np.load(DATA) as data:
        return data["images"].astype(np.float64), data["labels"].astype(np.int64)
