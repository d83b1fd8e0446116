"""Fail unless the wheel holds every source and data file under django_jobs/ (lua, templates,
static, py.typed)."""

import sys
import zipfile
from pathlib import Path

wheel = Path(sys.argv[1])
root = Path(__file__).resolve().parent.parent
names = set(zipfile.ZipFile(wheel).namelist())
expected = {
    path.relative_to(root).as_posix()
    for path in (root / "django_jobs").rglob("*")
    if path.is_file() and "__pycache__" not in path.parts
}
missing = sorted(expected - names)
if missing:
    sys.exit(f"{wheel.name} lacks {len(missing)} files: {', '.join(missing)}")
print(f"{wheel.name}: all {len(expected)} files of django_jobs/ are in the wheel")
