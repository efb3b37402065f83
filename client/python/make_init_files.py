"""Adds an empty __init__.py to every folder below the generated-modules folder (build step)."""
import os
import sys

root = sys.argv[1]
for folder, _, files in os.walk(root):
    if "__init__.py" not in files:
        with open(os.path.join(folder, "__init__.py"), "w", encoding="utf-8") as f:
            f.write("# Generated at build time from proto/; not checked in.\n")
