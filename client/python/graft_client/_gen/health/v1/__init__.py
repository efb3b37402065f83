# Generated from proto/ by scripts/gen-python-stubs.sh; do not edit.
