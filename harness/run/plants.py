"""Find, and remove, the modules a solution planted where later processes import from.

A solution runs with the user's permissions: it can write a `torch.py` into the working directory
or a `numpy.py` beside itself. Every later process that imports from there (the next worker, the
next run.py) would run that file instead of the real module, before the harness records the
clocks it must trust. So before each job the parent lists the importable entries of every folder
on the import path (its own sys.path, the working directory, the problem's and the solution's
folders), and after it, however the job ended, each new entry that shadows a module found
elsewhere on the path or in the standard library, and each new start-up hook (a `.pth` file,
`sitecustomize`, `usercustomize`), is removed, and the job is rejected ("planted_module").

Not seen: files changed in place (an installed package edited), and new modules that shadow
nothing (a package installed under a new name stays installed; a solution's own new helper files
stay where it put them).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from harness import status
from harness.measure.judged import Judged

MODULE_SUFFIXES = (".py", ".pyc", ".so", ".pyd")
HOOKS = frozenset({"sitecustomize", "usercustomize"})
REASON = "planted_module"


def import_folders(extra: list[Path]) -> list[Path]:
    """The folders a worker imports from: sys.path's (with '' as the working directory), the
    working directory, and `extra` (the problem's and the solution's folders)."""
    found: list[Path] = []
    entries: list[str | Path] = [*sys.path, os.getcwd(), *extra]
    for entry in entries:
        folder = Path(entry or os.getcwd()).resolve()
        if folder.is_dir() and folder not in found:
            found.append(folder)
    return found


def module_of(path: Path) -> str | None:
    """The module name an entry of an import folder provides ('x.pth' for a start-up hook), or
    None when Python would import nothing from it."""
    if path.suffix == ".pth":
        return path.name
    if path.suffix in MODULE_SUFFIXES:
        return path.name.split(".", 1)[0]  # x.cpython-311-x86_64-linux-gnu.so provides x
    if (path / "__init__.py").is_file():
        return path.name
    return None


def listing(folder: Path) -> dict[str, str]:
    """Entry name -> module name, for the importable entries of `folder`."""
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    return {name: module for name in names if (module := module_of(folder / name))}


class ImportPath:
    """The import folders' entries before a job; `remove_planted` after it."""

    def __init__(self, extra: list[Path]) -> None:
        self.before = {folder: listing(folder) for folder in import_folders(extra)}

    def planted(self) -> list[Path]:
        """New entries that shadow a module known before, or are start-up hooks."""
        known = {m for entries in self.before.values() for m in entries.values()}
        known |= set(sys.stdlib_module_names) | set(sys.builtin_module_names)
        found = []
        for folder, before in self.before.items():
            for name, module in listing(folder).items():
                if name not in before and (module in known or module in HOOKS or ".pth" in name):
                    found.append(folder / name)
        return found

    def remove_planted(self) -> list[Path]:
        """Remove what `planted` finds; return it."""
        found = self.planted()
        for path in found:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        return found


def rejected(judged: Judged, planted: list[Path]) -> Judged:
    """`judged`, rejected for the modules it planted, its measurements dropped."""
    shown = ", ".join(str(p) for p in planted[:3]) + (" ..." if len(planted) > 3 else "")
    detail = (
        f"wrote {shown} where Python imports from, shadowing a module (or adding a start-up "
        f"hook) for every later process; removed [rule: {REASON}]"
    )
    return replace(judged, status=status.REJECTED, detail=detail, reason=REASON, benchmarks=())
