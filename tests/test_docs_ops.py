"""docs/ops.md lists every handler op and is generated from the code: regenerated here, it must not change."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from sigma_core.compute.handler import Handler

DOCS = Path(__file__).resolve().parents[1] / "docs"


def generator():
    spec = importlib.util.spec_from_file_location("make_ops", DOCS / "make_ops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_ops_md_is_what_the_code_generates():
    assert (DOCS / "ops.md").read_text() == generator().render(), \
        "docs/ops.md is out of date: run python docs/make_ops.py"


def test_every_public_handler_method_is_listed_with_a_description():
    make_ops = generator()
    listed = [name for _, names in make_ops.sections() for name in names]
    assert sorted(listed) == sorted(name for name in vars(Handler) if not name.startswith("_"))
    assert all(make_ops.entry(name)[1] for name in listed), [name for name in listed if not make_ops.entry(name)[1]]
