#!/usr/bin/python3
"""The HTML report in a real browser (headless Chromium).

1. A report of ../shared/models/ppocrv4_det.onnx at O3 with --verify (`graft optimize --local
   --report-html`) renders: the page marks itself rendered, its three charts (passes, op types,
   memory over the schedule) are in the DOM with drawn marks, and Chromium logs no console message,
   no refused or failed resource and no script error. A screenshot is written to
   $GRAFT_REPORT_PAGES/ppocrv4_det.png for a person to look at. (Skipped when the model is absent.)
2. `graft report` renders the same run's saved JSON to the same kind of page.
3. A model whose node, input and output names hold markup and script renders them as text: the
   names are in the page's text, no element they spell exists, their script never ran.
4. graftd's page (serve_reports): a result it holds, fetched from /reports/<sha256>.html on its
   metrics listener, renders the same way from the OptimizeReport JSON it keeps; so does the
   Python client's Result.report_html() of the same model.
5. The checks can fail: a copy of the page whose script does not match its Content-Security-Policy
   hash is reported (the browser refuses the script) and is not marked rendered.

Environment: GRAFT_CLI (the graft binary), GRAFTD (graftd; its part is skipped without it), GRAFT_REPORT_PAGES (output folder), GRAFT_SHARED_MODELS
(default ../shared/models beside the source tree). Exit 77 (skipped) when Chromium is missing.
"""
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import onnx
from onnx import TensorProto, helper

SOURCE = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("GRAFT_CLI", str(SOURCE / "build/client/graft"))
GRAFTD = os.environ.get("GRAFTD")
OUT = pathlib.Path(os.environ.get("GRAFT_REPORT_PAGES", SOURCE / "build/report-pages"))
SHARED = pathlib.Path(os.environ.get("GRAFT_SHARED_MODELS", SOURCE.parent / "shared/models"))
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def chromium(page, profile, *args):
    """Runs headless Chromium on `page`; returns (stdout, the log lines that report a problem)."""
    cmd = [BROWSER, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-extensions", "--disable-background-networking", "--hide-scrollbars",
           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args,
           page.as_uri()]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    problems = [line for line in run.stderr.splitlines()
                if re.search(r"CONSOLE|Refused to|Failed to load|Uncaught|ERR_", line)]
    return run.stdout, problems


def rendered(dom):
    return 'data-graft-report="rendered"' in dom


def graft(*args):
    run = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        print(run.stderr)
    return run.returncode


def hostile_model(path):
    """Conv -> Relu -> Identity, its names markup and script that would mark the page if they ran."""
    evil_in = '<img src=x onerror="document.documentElement.dataset.pwned=1">'
    evil_out = '</script><script>document.documentElement.dataset.pwned=2</script>'
    evil_node = '<svg onload="document.documentElement.dataset.pwned=3"><b>bold</b>'
    w = helper.make_tensor("w&<i>weight</i>", TensorProto.FLOAT, [4, 3, 3, 3], [0.01] * 108)
    nodes = [
        helper.make_node("Conv", [evil_in, "w&<i>weight</i>"], ["conv<u>out</u>"],
                         name="conv</title>", pads=[1, 1, 1, 1]),
        # The node at the estimated peak: its name is in the memory section.
        helper.make_node("Relu", ["conv<u>out</u>"], ["relu\u2028out"], name=evil_node),
        helper.make_node("Identity", ["relu\u2028out"], [evil_out], name='"quoted" & \'single\''),
    ]
    graph = helper.make_graph(
        nodes, "g<script>alert(1)</script>",
        [helper.make_tensor_value_info(evil_in, TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(evil_out, TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return [evil_in, evil_out, evil_node]


def main():
    if BROWSER is None:
        print("skipped: Chromium is not installed (scripts/install-deps.sh --test installs it)")
        return 77
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        profile = tmp / "chromium-profile"
        charts = ("passes", "ops", "memory")

        # 1. A real model at O3, verified.
        det = SHARED / "ppocrv4_det.onnx"
        if det.exists():
            page, report = OUT / "ppocrv4_det.html", tmp / "det.json"
            check(graft("optimize", "--local", "--level", "O3", "--verify", str(det), "-o",
                        str(tmp / "det.onnx"), "--report", str(report), "--report-html", str(page),
                        "-q") == 0, "graft optimize --report-html of ppocrv4_det at O3")
            dom, problems = chromium(page, profile, "--dump-dom")
            check(rendered(dom), "the ppocrv4_det page marks itself rendered")
            check(not problems, "Chromium logs no console message, refused or failed resource: "
                  + "; ".join(problems[:5]))
            for chart in charts:
                m = re.search(r'<svg[^>]*data-chart="%s".*?</svg>' % chart, dom, flags=re.S)
                marks = len(re.findall(r"<(?:rect|polyline)\b", m.group(0))) if m else 0
                check(marks > 0, f"the {chart} chart is drawn ({marks} marks)")
            check("verified" in dom, "the verification verdict is shown")
            shot = OUT / "ppocrv4_det.png"
            shot.unlink(missing_ok=True)
            chromium(page, profile, "--window-size=1300,3800", f"--screenshot={shot}")
            check(shot.exists() and shot.stat().st_size > 50_000,
                  f"a screenshot is written to {shot}")

            # 2. The saved JSON renders the same way.
            again = tmp / "again.html"
            check(graft("report", str(report), "-o", str(again)) == 0, "graft report REPORT.json")
            dom2, problems2 = chromium(again, profile, "--dump-dom")
            check(rendered(dom2) and not problems2 and all(f'data-chart="{c}"' in dom2 for c in charts),
                  "graft report's page renders with its charts")
        else:
            print(f"skipped: {det} is absent (the real-model page)")

        # 3. Names holding markup are text.
        model = tmp / "hostile.onnx"
        names = hostile_model(model)
        page = OUT / "hostile_names.html"
        check(graft("optimize", "--local", "--level", "O2", "--verify", "--explain", "fuse_blocks",
                    str(model), "-o", str(tmp / "h.onnx"), "--report-html", str(page), "-q") == 0,
              "graft optimize --report-html of the model with hostile names")
        raw = page.read_text(encoding="utf-8")
        check("</script><script>" not in raw.split('id="graft-report"', 1)[1].split("</script>", 1)[0]
              + "x", "the embedded JSON holds no </script>")
        dom, problems = chromium(page, profile, "--dump-dom")
        check(rendered(dom), "the hostile-names page marks itself rendered")
        check("data-pwned" not in dom, "no script from a name ran")
        check(not problems, "no console message, refused or failed resource: " + "; ".join(problems[:5]))
        check(not re.search(r"<img\b|<b>bold|<svg onload|<script>document", dom),
              "no element spelled by a name exists")
        for name in names:
            escaped = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            check(escaped in dom, f"the name {name!r} is shown as text")
        chromium(page, profile, "--window-size=1300,2400", f"--screenshot={OUT / 'hostile_names.png'}")

        # 3b. An OptimizeReport JSON (as graftd and the Python client write it; the report fuzz
        # target's seed) with hostile names and a saturated peak estimate.
        seed = SOURCE / "fuzz" / "corpus" / "report" / "optimize_report_proto.json"
        page = OUT / "optimize_report_proto.html"
        check(graft("report", str(seed), "-o", str(page)) == 0, "graft report of an OptimizeReport JSON")
        dom, problems = chromium(page, profile, "--dump-dom")
        check(rendered(dom) and not problems, "the OptimizeReport page renders: " + "; ".join(problems[:5]))
        check("at least 16 EiB" in dom, "a saturated peak reads 'at least 16 EiB'")
        check("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in dom and not re.search(r"<img\b", dom),
              "its hostile peak node and largest tensor are text")

        # 4. graftd's page of a result it holds.
        if GRAFTD:
            ports = []
            for _ in range(2):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", 0))
                    ports.append(sock.getsockname()[1])
            server = subprocess.Popen(
                [GRAFTD, "--listen", f"127.0.0.1:{ports[0]}", "--metrics-listen",
                 f"127.0.0.1:{ports[1]}", "--serve-reports", "true", "--spool-dir",
                 str(tmp / "spool")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                example = SOURCE / "models" / "ppocr_mobile_v2_cls.onnx"
                report = tmp / "remote.json"
                for _ in range(100):
                    if graft("health", "--server", f"127.0.0.1:{ports[0]}") == 0:
                        break
                    time.sleep(0.1)
                check(graft("optimize", "--server", f"127.0.0.1:{ports[0]}", "--verify",
                            str(example), "-o", str(tmp / "remote.onnx"), "--report", str(report),
                            "-q") == 0, "graft optimize against graftd --serve-reports true")
                sha = json.loads(report.read_text())["output_sha256"]
                url = f"http://127.0.0.1:{ports[1]}/reports/{sha}.html"
                served = OUT / "graftd_report.html"
                served.write_bytes(urllib.request.urlopen(url, timeout=30).read())
                dom, problems = chromium(served, profile, "--dump-dom")
                check(rendered(dom) and not problems, "graftd's page renders without a console "
                      "message: " + "; ".join(problems[:5]))
                for chart in charts:
                    check(re.search(r'data-chart="%s".*?<(rect|polyline)' % chart, dom, flags=re.S)
                          is not None, f"graftd's page draws the {chart} chart")
                check("verified" in dom and sha in dom, "graftd's page shows the verdict and the sha256")
                chromium(served, profile, "--window-size=1300,3000",
                         f"--screenshot={OUT / 'graftd_report.png'}")

                # The Python client's page (proto field names, enums as names) of the same run.
                sys.path.insert(0, str(SOURCE / "client" / "python"))
                import graft_client
                with graft_client.Client(f"127.0.0.1:{ports[0]}") as client:
                    result = client.optimize(example.read_bytes(), verify=True)
                    python_page = OUT / "python_report.html"
                    python_page.write_text(result.report_html(), encoding="utf-8")
                dom, problems = chromium(python_page, profile, "--dump-dom")
                check(rendered(dom) and not problems and 'data-chart="passes"' in dom
                      and "verified" in dom and "179" in dom,
                      "the Python client's page renders its passes, verdict and node count: "
                      + "; ".join(problems[:5]))
            finally:
                server.terminate()
                server.wait(timeout=60)
        else:
            print("skipped: GRAFTD not set (graftd's page)")

        # 5. The detector works: a page whose script does not match its policy's hash.
        broken = tmp / "broken.html"
        broken.write_text(raw.replace('"use strict";', '"use strict"; ', 1), encoding="utf-8")
        dom, problems = chromium(broken, profile, "--dump-dom")
        check(not rendered(dom) and any("Content Security Policy" in p for p in problems),
              "a script outside the policy is refused and reported (the checks can fail)")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print(f"pages and screenshots in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
