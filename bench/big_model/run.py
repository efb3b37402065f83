#!/usr/bin/python3
"""Multi-GB models through graftd and the CLI: wall time over the floor, and graftd's peak memory.

Usage: /usr/bin/python3 bench/big_model/run.py [--gib 4] [--model DIR/llm.onnx] [--work DIR]
           [--graft build/client/graft] [--graftd build/server/graftd] [--reps 2] [--out FILE]

Without --model, bench/models/make_llm.py writes an LLM-shaped model of --gib GiB of external
weights into WORK/model (kept between runs: made once). Then, `--reps` times, in this order so
that drift hits every row alike:

  floor      read the model and its weights file and write them to a new folder (4 MiB blocks):
             what any tool that returns the model beside its weights must at least do
  miss       `graft optimize MODEL -o OUT --server` against a graftd just started (empty cache):
             the CLI hashes the files, looks the result up (a miss), uploads everything; graftd
             spools the weights to disk, runs O2 reading them by reference, answers with the graph;
             the CLI copies the weights the result keeps beside the output
  hit        the same command again: found by Lookup, nothing uploaded, weights copied
  local      `graft optimize MODEL -o OUT --local`
  floor      again (each row's ratio is to the mean of all floor runs)
  (copy      the same bytes copied in the kernel, copy_file_range: for reference, the fastest a
             copy can be; the CLI copies the weights a result keeps this way)

graftd's peak resident memory (VmHWM) is read from /proc after each of its runs; the CLI's from
wait4. Before every timed run, dirty pages are written back (sync, not timed), and one untimed
floor run first puts the model in the page cache, so every row reads it from memory alike. Outputs are deleted after each run (the disk must hold about three copies of the model).
Prints a Markdown table; --out writes it to a file too.
"""

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 4 << 20


def model_files(model):
    """The model file and the external-data files beside it (as make_llm writes them)."""
    folder = model.parent
    files = [model]
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p != model and not p.name.endswith(".onnx"):
            files.append(p)
    return files


def settle():
    """Writes back dirty pages (not timed), so no run pays for the one before it."""
    os.sync()


def timed_copy(model, out, copy_file):
    """Copies every file of the model under `out` with copy_file(read_fd, write_fd): seconds."""
    settle()
    start = time.monotonic()
    for src in model_files(model):
        dst = out / src.relative_to(model.parent)
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(src, "rb", buffering=0) as r, open(dst, "wb", buffering=0) as w:
            copy_file(r.fileno(), w.fileno())
    return time.monotonic() - start


def read_write(r, w):
    """Through user memory, 4 MiB at a time: the floor."""
    while True:
        block = os.read(r, BLOCK)
        if not block:
            return
        view = memoryview(block)
        while view:
            view = view[os.write(w, view):]


def in_kernel(r, w):
    """copy_file_range: never through user memory, the fastest a copy can be (for reference)."""
    while os.copy_file_range(r, w, 1 << 30) > 0:
        pass


def floor(model, out):
    return timed_copy(model, out, read_write)


def kernel_copy(model, out):
    return timed_copy(model, out, in_kernel)


def run_child(argv):
    """Runs argv; (seconds, peak RSS bytes, stderr). Fails loudly on a non-zero exit."""
    settle()
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"{' '.join(map(str, argv))} exited with {code}:\n{err}")
    return seconds, usage.ru_maxrss * 1024, err


class Graftd:
    def __init__(self, binary, spool, log):
        self.log = log
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--spool-dir", str(spool)],
            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
        self.address = None
        for _ in range(400):
            m = re.search(r"serving grpc=([0-9.]+:[0-9]+)", Path(log).read_text(errors="replace"))
            if m:
                self.address = m.group(1)
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if not self.address:
            sys.exit("graftd did not start:\n" + Path(log).read_text(errors="replace"))

    def peak_rss(self):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def gib(n):
    return f"{n / (1 << 30):.2f} GiB"


def mib(n):
    return f"{n / (1 << 20):.0f} MiB"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--model", type=Path, help="an existing model (its weights beside it)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/graft-big-model"))
    ap.add_argument("--graft", type=Path, default=ROOT / "build/client/graft")
    ap.add_argument("--graftd", type=Path, default=ROOT / "build/server/graftd")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    model = args.model
    if model is None:
        model = args.work / "model" / "llm.onnx"
        if not model.exists():
            print(f"writing a {args.gib} GiB model to {model.parent} ...", file=sys.stderr)
            subprocess.run([sys.executable, str(ROOT / "bench/models/make_llm.py"),
                            str(model.parent), "--gib", str(args.gib)], check=True)
    total = sum(p.stat().st_size for p in model_files(model))
    out = args.work / "out"
    spool = args.work / "spool"

    rows = {"floor": [], "copy": [], "miss": [], "hit": [], "local": []}
    cli_rss = {"miss": [], "hit": [], "local": []}
    graftd_rss = []
    sent = {}

    def fresh_out():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        return out / "llm.onnx"

    def cli(kind, extra):
        target = fresh_out()
        seconds, rss, err = run_child([str(args.graft), "optimize", str(model), "-o", str(target)]
                                      + extra)
        rows[kind].append(seconds)
        cli_rss[kind].append(rss)
        m = re.search(r"sent ([0-9.]+ [KMG]?i?B)", err)
        if m:
            sent[kind] = m.group(1)
        if kind == "hit" and "found by lookup" not in err:
            sys.exit("the second request was not a cache hit:\n" + err)

    # Warm: the model's bytes in the page cache for every run alike (the first would pay alone).
    floor(model, out)
    for rep in range(args.reps):
        rows["floor"].append(floor(model, out))
        shutil.rmtree(out, ignore_errors=True)
        rows["copy"].append(kernel_copy(model, out))
        server = Graftd(args.graftd, spool, args.work / "graftd.log")
        try:
            cli("miss", ["--server", server.address])
            cli("hit", ["--server", server.address])
            graftd_rss.append(server.peak_rss())
        finally:
            server.stop()
        cli("local", ["--local"])
        rows["floor"].append(floor(model, out))
        print(f"rep {rep + 1}/{args.reps} done", file=sys.stderr)
    shutil.rmtree(out, ignore_errors=True)

    base = statistics.mean(rows["floor"])
    lines = [
        f"Model: {model} — {gib(total)} (model file and external weights), "
        f"{args.reps} repetitions; floor = read + write of those bytes, mean "
        f"{base:.2f} s ({total / base / (1 << 20):.0f} MiB/s).",
        "",
        "| run | seconds (median) | over the floor | CLI peak RSS | sent |",
        "|---|---|---|---|---|",
    ]
    for kind in ("floor", "copy", "miss", "hit", "local"):
        med = statistics.median(rows[kind])
        rss = mib(max(cli_rss[kind])) if kind in cli_rss else "-"
        lines.append(f"| {kind} | {med:.2f} | {med / base:.2f}x | {rss} | {sent.get(kind, '-')} |")
    lines += ["", f"graftd peak RSS (VmHWM, worst of {len(graftd_rss)} runs): "
              f"{mib(max(graftd_rss))} = {max(graftd_rss) / total:.3f} of the model's bytes"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
