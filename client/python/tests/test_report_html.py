"""Result.report_html(): the report embedded in common/report_template.html as script-safe
JSON, whatever names the model carries."""

import json
import os
import re
from pathlib import Path

import pytest

import graft_client
from graft_client import graft_pb2
from graft_client.report import (FORMAT, PLACEHOLDER, embedded_report, load_template,
                                 report_html, report_to_dict, script_safe_json)
from models import conv_bn_bytes

SOURCE_DIR = Path(os.environ.get("GRAFT_SOURCE_DIR", Path(__file__).resolve().parents[3]))
TEMPLATE = SOURCE_DIR / "common" / "report_template.html"
HOSTILE = "</script><script>alert(1)</script>"
SCRIPT_OPEN = '<script id="graft-report" type="application/json">'


def hostile_report():
    r = graft_pb2.OptimizeReport(input_sha256="a" * 64, nodes_before=5, nodes_after=3,
                                 graft_version="0.1.0", target="onnx")
    p = r.passes.add(name="fuse_blocks", runs=1, rewrites=2)
    p.rule_rewrites[HOSTILE] = 1
    p.explanations.add(rule="layer_norm", node=HOSTILE, op="Div", graph="<!--",
                       reason="a & b \u2028 c \u2029 d <ok> \u00e9\u4e2d \U0001f600 \x00\x1b")
    r.fixed_inputs.append(f"'{HOSTILE}': [batch] -> [1]")
    r.verification.status = graft_pb2.Verification.VERIFIED
    r.verification.worst_output = "]]></script "
    r.verification.max_abs_diff = float("inf")
    return r


def test_shipped_template_keeps_the_contract():
    """One placeholder, inside the JSON script element (the page's script reads it there)."""
    for text in (TEMPLATE.read_text(encoding="utf-8"), load_template()):
        assert text.count(PLACEHOLDER) == 1
        assert text.count(SCRIPT_OPEN) == 1
        start = text.index(SCRIPT_OPEN) + len(SCRIPT_OPEN)
        assert text[start:text.index("</script>", start)].strip() == PLACEHOLDER
    assert load_template() == TEMPLATE.read_text(encoding="utf-8")


def test_hostile_names_cannot_leave_the_script_element():
    report = hostile_report()
    page = report_html(report)
    assert "</script><script>" not in page
    assert "<script>alert" not in page
    # Exactly the template's script elements, and the JSON's end is the template's </script>.
    template = load_template()
    assert page.count("<script") == template.count("<script")
    assert page.count("</script") == template.count("</script")
    assert PLACEHOLDER not in page
    before, after = template.split(PLACEHOLDER)
    assert page.startswith(before) and page.endswith(after)
    # The JSON round-trips: the report as report_to_dict gives it.
    embedded = embedded_report(page)
    assert embedded == {"format": FORMAT, "report": report_to_dict(report)}
    assert embedded["report"]["passes"][0]["explanations"][0]["node"] == HOSTILE
    assert embedded["report"]["verification"]["max_abs_diff"] == "Infinity"
    # Parsed independently of embedded_report: the element's text is the JSON.
    text = re.search(r'<script id="graft-report" type="application/json">(.*?)</script>', page,
                     re.S).group(1)
    assert json.loads(text) == embedded
    assert text.isascii() and not set(text) & set("<>&\u2028\u2029")


def test_script_safe_json_escapes_the_five_characters():
    value = {"s": "<>&\u2028\u2029", "<key>": ["&amp;", "</SCRIPT>"]}
    text = script_safe_json(value)
    for raw in "<>&\u2028\u2029":
        assert raw not in text
    for escaped in ("\\u003c", "\\u003e", "\\u0026", "\\u2028", "\\u2029"):
        assert escaped in text
    assert json.loads(text) == value
    with pytest.raises(ValueError):
        script_safe_json({"x": float("nan")})


def test_a_template_without_exactly_one_placeholder_is_refused():
    report = graft_pb2.OptimizeReport()
    with pytest.raises(ValueError, match="exactly once"):
        report_html(report, template="<html></html>")
    with pytest.raises(ValueError, match="exactly once"):
        report_html(report, template=f"{PLACEHOLDER}{PLACEHOLDER}")
    assert report_html({"a": 1}, template=f"<x>{PLACEHOLDER}</x>") == (
        '<x>{"format":"graft.v1.OptimizeReport","report":{"a":1}}</x>')


def test_result_report_html_of_a_real_run(client):
    with client.optimize(conv_bn_bytes(8101), level="O2", verify=True) as result:
        page = result.report_html()
    embedded = embedded_report(page)
    assert embedded["format"] == FORMAT
    assert embedded["report"] == result.report_dict() == json.loads(result.report_json())
    assert embedded["report"]["output_sha256"] == result.report.output_sha256
    assert graft_client.report_html(result.report) == page
