"""The cost is said the same way in the terminal and the HTML report (issue 30 item 5): "unknown"
when a case was unpriced or its agent reported no usage, never "$0.0000" for that."""

from __future__ import annotations

from test_terminal_summary import passed, record, usage

from pytest_groundeval.reporting import html as html_report
from pytest_groundeval.reporting.terminal import usage_line


def _strip_cost(page: str) -> str:
    start = page.index('data-strip="cost">') + len('data-strip="cost">')
    return page[start:page.index("</b>", start)]


def test_an_unknown_cost_is_unknown_in_the_html_report_as_in_the_terminal():
    rec = record([passed(0), passed(1)], usage=usage(cases_unreported=2))
    assert "cost unknown: 2 cases without reported usage" in usage_line(rec)
    page = html_report.render(rec.model_dump(mode="json"))
    assert _strip_cost(page) == "unknown: 2 cases without reported usage"
    assert "unknown: 2 cases without reported usage ($0.0000 for the 0 priced)" in page
    assert "$0.0000</b>" not in page


def test_a_known_cost_is_its_dollars_in_both():
    rec = record([passed(0)], usage=usage(cost_usd=0.0123, cases_priced=1, input_tokens=10))
    assert usage_line(rec).endswith("cost $0.0123")
    assert _strip_cost(html_report.render(rec.model_dump(mode="json"))) == "$0.0123"
    unpriced = record([passed(0)], usage=usage(cases_unpriced=1, input_tokens=10))
    assert _strip_cost(html_report.render(unpriced.model_dump(mode="json"))) == "unknown: 1 case unpriced"
