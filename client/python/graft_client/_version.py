"""The package's version: Graft's (project(graft VERSION ...) in the top CMakeLists.txt; the
python_client test test_packaging.py checks they agree). The build backend reads it from here."""

__version__ = "0.1.0"
