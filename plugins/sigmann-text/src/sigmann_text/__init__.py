"""sigmann-text: character-level text for Sigma.

The ``chars`` extractor (:mod:`sigmann_text.chars`), the ``one_hot`` layer
(:mod:`sigmann_text.layers`), the ``bits_per_character`` hook
(:mod:`sigmann_text.bits`) and ``sigma sample`` (:mod:`sigmann_text.sample`),
registered without importing NumPy.
"""

from sigma_core import hookimpl


@hookimpl
def register_extractors(register):
    register("chars", "sigmann_text.chars:chars", description="text file -> windows of character indices")


@hookimpl
def register_layers(register):
    register("one_hot", "sigmann_text.layers:OneHot", description="integer indices -> one-hot rows, on the handler")


@hookimpl
def register_hooks(register):
    register("bits_per_character", "sigmann_text.bits:BitsPerCharacter",
             description="logs training and validation cost in bits per character each epoch")


@hookimpl
def register_commands(cli):
    from sigmann_text.sample import add_parser

    add_parser(cli)
