"""``scripts/check_module_size.py``, the 400-line cap of ``make lint``: it fails on a module over the cap,
naming the file and its length, passes at the cap, and refuses a folder that does not exist."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_module_size.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_module_size", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def write_lines(path: Path, n: int, *, last_newline: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(f"x{i} = {i}" for i in range(n))
    path.write_text(text + ("\n" if last_newline else ""))


def test_fails_naming_each_module_over_the_cap_longest_first(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    check = load()
    write_lines(tmp_path / "pkg" / "ok.py", 400)  # exactly the cap: allowed
    write_lines(tmp_path / "pkg" / "sub" / "long.py", 401)
    write_lines(tmp_path / "pkg" / "longer.py", 599, last_newline=False)  # the last line counts without "\n"
    assert check.main([str(tmp_path / "pkg")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{tmp_path / 'pkg' / 'longer.py'}: 599 lines (more than 400)",
                   f"{tmp_path / 'pkg' / 'sub' / 'long.py'}: 401 lines (more than 400)"]


def test_passes_when_every_module_is_at_or_under_the_cap(tmp_path: Path) -> None:
    check = load()
    write_lines(tmp_path / "a.py", 400)
    write_lines(tmp_path / "b.py", 3)
    assert check.main([str(tmp_path)]) == 0
    assert check.main([str(tmp_path), "--max", "399"]) == 1


def test_a_missing_folder_is_an_error_not_a_pass(tmp_path: Path) -> None:
    assert load().main([str(tmp_path / "nope")]) == 2


def test_runs_as_a_script_over_the_product_packages_by_default() -> None:
    # The default folders are the three product packages, read from the repository root.
    done = subprocess.run([sys.executable, str(SCRIPT), "--max", "100000"], cwd=SCRIPT.parents[1],
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (0, "")
    done = subprocess.run([sys.executable, str(SCRIPT), "--max", "1"], cwd=SCRIPT.parents[1],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "updater/__main__.py: " in done.stdout
