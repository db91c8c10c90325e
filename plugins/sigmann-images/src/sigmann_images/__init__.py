"""Images for Sigma, registered without importing Pillow or NumPy: the image-folder extractor
(:mod:`sigmann_images.image_folder`) and image files for ``sigma predict`` (:mod:`sigmann_images.predict`)."""

import importlib.util

from sigma_core import hookimpl

#: The files both read, by suffix.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".pgm", ".ppm")


def _has_pillow():
    found = importlib.util.find_spec("PIL") is not None
    return found, "" if found else "Pillow is not installed"


@hookimpl
def register_extractors(register):
    register("image_folder", "sigmann_images.image_folder:load_image_folder", aliases=("images",),
             check=_has_pillow, description="one subfolder of images per class")


@hookimpl
def register_readers(register):
    png, *others = (suffix.lstrip(".") for suffix in IMAGE_SUFFIXES)
    register(png, "sigmann_images.predict:read_image", aliases=others, check=_has_pillow,
             description="one record per image, fitted to the network's input, preprocessed as the run's data")
