"""The image-folder extractor (see :mod:`sigmann_images.image_folder`), registered without importing Pillow."""

import importlib.util

from sigma_core.hookspecs import hookimpl


@hookimpl
def register_extractors(register):
    register("image_folder", "sigmann_images.image_folder:load_image_folder", aliases=("images",),
             check=lambda: (importlib.util.find_spec("PIL") is not None, "Pillow is not installed"),
             description="one subfolder of images per class")
