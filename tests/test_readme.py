"""The Python training example (the README's, now docs/python.md's) runs as written."""

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "python.md"


def test_readme_python_examples_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    runnable = [b for b in blocks if "Trainer(" in b]
    assert runnable, "docs/python.md lost its Python training example"
    for block in runnable:
        exec(compile(block, str(PAGE), "exec"), {})
    report = capsys.readouterr().out
    assert "'top1': 0.9" in report  # digits reaches > 90 % held-out accuracy
