"""The optimization report as a self-contained HTML page (Result.report_html()).

The page is common/report_template.html (shipped in the package as report_template.html), whose
one @GRAFT_REPORT_JSON@, inside <script id="graft-report" type="application/json">, is replaced
by {"format": "graft.v1.OptimizeReport", "report": <the report in proto3's JSON mapping, proto
field names, defaults included>}. Names in the report come from the model, so the JSON is made
safe for a script element: every <, >, &, U+2028 and U+2029 is written as a \\uXXXX escape
(and everything else outside ASCII too), so no string can end the element or start markup.
"""

import json

from google.protobuf import json_format

PLACEHOLDER = "@GRAFT_REPORT_JSON@"
FORMAT = "graft.v1.OptimizeReport"
TEMPLATE = "report_template.html"
_SCRIPT_OPEN = '<script id="graft-report" type="application/json">'
_UNSAFE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
           0x2028: "\\u2028", 0x2029: "\\u2029"}


def report_to_dict(report):
    """An OptimizeReport message as a dict of JSON types (proto field names, defaults
    included): what Result.report_dict() returns."""
    return json_format.MessageToDict(report, preserving_proto_field_name=True,
                                     including_default_value_fields=True)


def script_safe_json(value):
    """`value` as JSON text that may stand inside an HTML script element: ASCII only, with <, >,
    &, U+2028 and U+2029 escaped (JSON.parse reads them back unchanged)."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.translate(_UNSAFE)


def load_template():
    """The page template shipped with the package (str)."""
    from importlib import resources
    return resources.files(__package__).joinpath(TEMPLATE).read_text(encoding="utf-8")


def report_html(report, template=None):
    """The report page: `report` is an OptimizeReport message, or the dict report_to_dict made
    of one; `template` the template's text (default: the package's)."""
    if not isinstance(report, dict):
        report = report_to_dict(report)
    if template is None:
        template = load_template()
    if template.count(PLACEHOLDER) != 1:
        raise ValueError(f"the report template must contain {PLACEHOLDER} exactly once, not "
                         f"{template.count(PLACEHOLDER)} times")
    return template.replace(PLACEHOLDER, script_safe_json({"format": FORMAT, "report": report}))


def embedded_report(page):
    """The document report_html() embedded in `page` (its graft-report script element), parsed:
    {"format": ..., "report": {...}}."""
    start = page.find(_SCRIPT_OPEN)
    if start < 0:
        raise ValueError("the page has no graft-report script element")
    start += len(_SCRIPT_OPEN)
    end = page.find("</script", start)
    if end < 0:
        raise ValueError("the graft-report script element is not closed")
    return json.loads(page[start:end])


__all__ = ["FORMAT", "PLACEHOLDER", "embedded_report", "load_template", "report_html",
           "report_to_dict", "script_safe_json"]
