"""The quickstart's digits: read from the file scikit-learn ships, without importing it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import torch

from workloads.data.digits import digits_file, load_digits, read_digits, stratified_split


def test_digits_are_the_images_and_labels_scikit_learn_loads():
    from sklearn.datasets import load_digits as sklearn_load_digits

    images, labels = read_digits(digits_file())
    expected_images, expected_labels = sklearn_load_digits(return_X_y=True)
    np.testing.assert_array_equal(images, expected_images)
    np.testing.assert_array_equal(labels, expected_labels)


def test_test_split_is_a_fixed_fifth_of_every_class():
    labels = np.repeat(np.arange(10), [178, 182, 177, 183, 181, 182, 181, 179, 174, 180])
    test = stratified_split(labels, 0.2, seed=0)
    for label in range(10):
        members = labels == label
        assert test[members].sum() == round(0.2 * members.sum())
    np.testing.assert_array_equal(test, stratified_split(labels, 0.2, seed=0))
    assert not np.array_equal(test, stratified_split(labels, 0.2, seed=1))


def test_splits_are_disjoint_and_cover_the_data_set():
    splits = load_digits(torch.device("cpu"))
    assert splits.num_train + splits.num_test == 1797
    assert splits.sample_shape == (1, 8, 8)
    assert abs(float(splits.train_x.mean())) < 1e-4  # normalized by the training split


def test_loading_digits_imports_neither_scikit_learn_nor_scipy():
    code = (
        "import sys, torch\n"
        "from workloads.data.digits import load_digits\n"
        "load_digits(torch.device('cpu'))\n"
        "print(sorted(m for m in ('sklearn', 'scipy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
