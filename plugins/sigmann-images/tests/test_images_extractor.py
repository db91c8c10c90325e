"""sigmann-images: the image-folder extractor, one subfolder of images per class."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from PIL import Image

from sigma_core import plugins
from sigma_core.data import DataError, dataset_from_config
from sigmann_images.image_folder import load_image_folder


def pets(root, shapes=((4, 5), (4, 5))):
    """``root/pets/cat/{0,1}.png`` and ``root/pets/dog/{0,1}.png``; pixel value 50 * label + index."""
    for label, name in enumerate(["cat", "dog"]):
        (root / "pets" / name).mkdir(parents=True)
        for i in range(2):
            pixels = np.full(shapes[label], 50 * label + i, np.uint8)
            Image.fromarray(pixels).save(root / "pets" / name / f"{i}.png")
    return root / "pets"


def test_image_folder_one_class_per_subfolder(tmp_path):
    dataset = load_image_folder(pets(tmp_path))
    assert dataset.section("inputs").shape == (4, 4, 5) and dataset.section("targets").tolist() == [0, 0, 1, 1]
    assert dataset.section("inputs")[:, 0, 0].tolist() == [0, 1, 50, 51]
    resized = dataset_from_config({"extractor": "images", "path": str(tmp_path / "pets"), "size": [3, 2]})
    assert resized.section("inputs").shape == (4, 2, 3)


def test_images_of_different_sizes_need_a_size(tmp_path):
    with pytest.raises(DataError, match=r"dog/0.png is \(6, 5\), but earlier images are \(4, 5\); give size"):
        load_image_folder(pets(tmp_path, shapes=((4, 5), (6, 5))))


def test_image_folder_without_pillow_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # makes ``import PIL`` fail
    (tmp_path / "a").mkdir()
    with pytest.raises(DataError, match=r"needs Pillow: pip install Pillow"):
        load_image_folder(tmp_path)


def test_registered_by_this_distribution_with_its_alias():
    plugins.reset()
    component = plugins.get("extractor", "images")
    assert (component.name, component.distribution) == ("image_folder", "sigmann-images")
    assert component.availability()[0] is True


def test_damaged_images_and_unlistable_folders_are_one_line(tmp_path, monkeypatch):
    root = pets(tmp_path)
    (root / "dog" / "2.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(200)))  # a PNG signature, then garbage
    with pytest.raises(DataError, match=r"dog/2.png: cannot read it as an image \("):
        load_image_folder(root)
    (root / "dog" / "2.png").unlink()
    with pytest.raises(DataError, match=r"image mode 'XYZ' is not one of Pillow's"):
        load_image_folder(root, mode="XYZ")

    def no_permission(self):  # what listing a folder of another user's gives (the tests run as root)
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(type(root), "iterdir", no_permission)
    with pytest.raises(DataError, match=rf"image folder {root}: cannot list it \(Permission denied\)"):
        load_image_folder(root)


@pytest.mark.parametrize("kind", ["PNG", "GIF", "BMP", "JPEG"])
def test_fuzz_image_files(tmp_path, kind):
    """Mutants of a small image (bit flips, cuts, insertions): decoded, or one DataError naming the file."""
    from sigmann_testing import fuzz_loader

    from sigmann_images.decode import decode

    valid = tmp_path / "valid"
    Image.fromarray((np.arange(12 * 9 * 3) % 251).astype(np.uint8).reshape(12, 9, 3)).save(valid, kind)
    # the pixels decoded are a few times the file's size; what a damaged header claims is never read at once
    fuzz_loader(tmp_path / f"x.{kind.lower()}", valid.read_bytes(), lambda path: decode(path, "RGB"), seed=11,
                factor=16)


def test_an_image_that_is_a_device_is_one_error_not_endless_reading(tmp_path):
    """/dev/zero never ends: the reader checks for a regular file before Pillow reads a byte."""
    root = pets(tmp_path)
    (root / "dog" / "zero.png").symlink_to("/dev/zero")
    with pytest.raises(DataError, match=r"image .*dog/zero.png: cannot read it \(it is a character device, not a "):
        load_image_folder(root)
