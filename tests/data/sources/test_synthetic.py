"""data=synthetic: noisy gratings, balanced, deterministic, told apart by their spatial pattern only."""

from __future__ import annotations

import torch

from vitladder.data.sources.synthetic import make_synthetic


def test_synthetic_shapes_dtypes_and_balance() -> None:
    s = make_synthetic(200, 50, seed=0)
    assert s.train_images.shape == (200, 3, 32, 32) and s.train_images.dtype == torch.uint8
    assert s.test_images.shape == (50, 3, 32, 32) and s.test_images.dtype == torch.uint8
    assert s.train_labels.shape == (200,) and s.train_labels.dtype == torch.int64
    assert len(s.classes) == 10 and len(set(s.classes)) == 10
    assert s.train_labels.bincount(minlength=10).tolist() == [20] * 10
    assert s.test_labels.bincount(minlength=10).tolist() == [5] * 10
    assert make_synthetic(8, 8, image_size=16).train_images.shape == (8, 3, 16, 16)
    assert s.origin == "synthetic images"


def test_synthetic_is_deterministic_given_seed() -> None:
    a, b, c = make_synthetic(64, 16, seed=3), make_synthetic(64, 16, seed=3), make_synthetic(64, 16, seed=4)
    for name in ("train_images", "train_labels", "test_images", "test_labels"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert not torch.equal(a.train_images, c.train_images)


def _nearest_centroid_accuracy(
    train: torch.Tensor, y_train: torch.Tensor, test: torch.Tensor, y_test: torch.Tensor
) -> float:
    centroids = torch.stack([train[y_train == k].mean(0) for k in range(10)])  # (10, F)
    predicted = torch.cdist(test, centroids).argmin(1)
    return (predicted == y_test).float().mean().item()


def test_synthetic_classes_share_colour_but_differ_in_space_and_survive_flips() -> None:
    s = make_synthetic(5000, 1000, seed=0)
    # Mean colour is the same law for every class: class means agree within sampling noise.
    class_means = torch.stack([s.train_images[s.train_labels == k].float().mean((0, 2, 3)) for k in range(10)])
    assert (class_means.amax(0) - class_means.amin(0)).max() < 8  # of 255

    # ...so a colour-only classifier is at chance,
    def colour(x: torch.Tensor) -> torch.Tensor:
        return x.float().mean((2, 3))  # (N, 3)

    colour_inputs = (colour(s.train_images), s.train_labels, colour(s.test_images), s.test_labels)
    assert _nearest_centroid_accuracy(*colour_inputs) < 0.2

    # ...while the spatial spectrum (orientation x frequency, phase-free) separates the classes.
    def spectrum(x: torch.Tensor) -> torch.Tensor:
        grey = x.float().mean(1)
        return torch.fft.rfft2(grey - grey.mean((1, 2), keepdim=True)).abs().flatten(1)  # (N, F)

    centroid_inputs = (spectrum(s.train_images), s.train_labels)
    assert _nearest_centroid_accuracy(*centroid_inputs, spectrum(s.test_images), s.test_labels) > 0.9
    # A horizontal flip (the ladder's augmentation) must not turn one class into another.
    flipped = s.test_images.flip(-1)
    assert _nearest_centroid_accuracy(*centroid_inputs, spectrum(flipped), s.test_labels) > 0.9
