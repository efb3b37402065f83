#!/usr/bin/env python3
"""Checks Graft's include rules against the layer picture in docs/architecture.md.

The picture (the fenced block after the "<!-- layers -->" marker) names each layer as a
[bracketed] source folder or file, highest first; the folders on one line are peers. A source
file may include files of its own entry and of any entry on a lower line, never of a higher line
or of a peer: so server/ and client/ never include each other, core/ never includes proto/,
common/, server/ or client/, and a lower core layer never includes a higher one. Every project
source under the pictured folders must belong to an entry (the longest matching one). Generated
headers are their generator's: graft/v1/ and grpc/ come from proto/.

Usage: check-layers.py [--root SOURCE_DIR] (default: this checkout).
Exit 0 when the sources follow the picture; 1 with every offending include listed; 2 when the
picture cannot be read.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Sources outside the product's layers, free to include any of them.
TOOLS = ("tests/", "bench/", "fuzz/")
GENERATED = {"graft/v1/": "proto/", "grpc/": "proto/"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


DOC = "docs/architecture.md"


def read_layers(text):
    """[[entry, ...], ...] highest first, from the fenced block after the marker."""
    marker = text.find("<!-- layers -->")
    if marker < 0:
        raise ValueError(f"{DOC}: no '<!-- layers -->' marker")
    start = text.find("```", marker)
    end = text.find("```", start + 3)
    if start < 0 or end < 0:
        raise ValueError(f"{DOC}: no fenced block after the layers marker")
    layers = []
    for line in text[start + 3:end].splitlines():
        entries = re.findall(r"\[([A-Za-z0-9_./]+)\]", line)
        if entries:
            layers.append(entries)
    if len(layers) < 2:
        raise ValueError(f"{DOC}: the layers block names fewer than two layers")
    seen = [e for layer in layers for e in layer]
    dup = {e for e in seen if seen.count(e) > 1}
    if dup:
        raise ValueError(f"{DOC}: layer entries named twice: {sorted(dup)}")
    return layers


def entry_of(path, entries):
    """The longest entry that `path` lies in ("core/ir" holds core/ir/x.h, "server/" server/a.cc,
    "core/build_info.h" itself), or None."""
    best = None
    for e in entries:
        folder = e if e.endswith("/") or "." in e.rsplit("/", 1)[-1] else e + "/"
        if path == e or path.startswith(folder):
            if best is None or len(e) > len(best):
                best = e
    return best


def main(argv):
    root = pathlib.Path(argv[2]) if len(argv) == 3 and argv[1] == "--root" else ROOT
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--root"):
        print("usage: check-layers.py [--root SOURCE_DIR]", file=sys.stderr)
        return 2
    try:
        layers = read_layers((root / DOC).read_text())
    except (OSError, ValueError) as e:
        print(f"check-layers: {e}", file=sys.stderr)
        return 2
    level = {e: i for i, layer in enumerate(layers) for e in layer}  # 0 is the highest
    entries = list(level)
    roots = sorted({e.split("/")[0] for e in entries})
    problems = []
    files = 0
    for top in roots:
        for src in sorted((root / top).rglob("*")):
            if src.suffix not in (".cc", ".h") or not src.is_file():
                continue
            rel = src.relative_to(root).as_posix()
            if rel.startswith(TOOLS) or "/python/" in rel:
                continue
            files += 1
            own = entry_of(rel, entries)
            if own is None:
                problems.append(f"{rel}: in no layer of the picture (add its folder to it)")
                continue
            for inc in INCLUDE.findall(src.read_text(errors="replace")):
                target = inc
                for prefix, owner in GENERATED.items():
                    if inc.startswith(prefix):
                        target = owner + inc
                dep = entry_of(target, entries)
                if dep is None:
                    if inc.split("/")[0] in roots or inc.startswith(TOOLS):
                        problems.append(f"{rel}: includes \"{inc}\", which is in no layer")
                    continue
                if dep == own:
                    continue
                if level[dep] == level[own]:
                    problems.append(f"{rel}: includes \"{inc}\" of its peer {dep} ({own} and "
                                    f"{dep} must not depend on each other)")
                elif level[dep] < level[own]:
                    problems.append(f"{rel}: includes \"{inc}\" of the higher layer {dep} "
                                    f"({own} is below it)")
    if problems:
        print("check-layers: includes against docs/architecture.md's layers:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print(f"check-layers: {files} sources in {len(layers)} layers follow the picture")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
