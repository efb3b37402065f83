"""Adds an empty __init__.py to every folder below the generated-modules folder (used by the
CMake build and by scripts/gen-python-stubs.sh, whose outputs must be identical)."""
import os
import sys

root = sys.argv[1]
for folder, _, files in os.walk(root):
    if "__init__.py" not in files:
        with open(os.path.join(folder, "__init__.py"), "w", encoding="utf-8") as f:
            f.write("# Generated from proto/ by scripts/gen-python-stubs.sh; do not edit.\n")
