#!/usr/bin/python3
"""Puts the sha256 of common/report_template.html's script into the page's Content-Security-Policy
(script-src 'sha256-...'), so that browsers run that script and nothing else: no inline handler,
no injected element. Run it after editing the script; with --check, exits 1 if it is stale
(a test runs that)."""
import base64
import hashlib
import pathlib
import re
import sys

path = pathlib.Path(__file__).resolve().parent.parent / "common" / "report_template.html"
page = path.read_text(encoding="utf-8")
scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.S)
if len(scripts) != 1:
    sys.exit(f"{path}: expected one <script> element without attributes, found {len(scripts)}")
digest = base64.b64encode(hashlib.sha256(scripts[0].encode("utf-8")).digest()).decode()
updated, n = re.subn(r"'sha256-[^']*'", f"'sha256-{digest}'", page)
if n != 1:
    sys.exit(f"{path}: expected one 'sha256-...' source in the Content-Security-Policy, found {n}")
if "--check" in sys.argv[1:]:
    if updated != page:
        sys.exit(f"{path}: the script's hash in the Content-Security-Policy is stale: "
                 "run scripts/report-template-hash.py")
    sys.exit(0)
if updated != page:
    path.write_text(updated, encoding="utf-8")
    print(f"{path}: script-src 'sha256-{digest}'")
