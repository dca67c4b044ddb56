"""The gate's verdict for CI systems and spreadsheets: JUnit XML and a CSV of the gate's cases, both
from a compare (or report) result (llmreplay.compare_format), both written atomically
(llmreplay.output_paths: a symbolic link, directory or device in the way is refused, never replaced).

JUnit: one <testsuite> per kind (fidelity, latency, slo, errors, sides) inside one <testsuites> named by
the headline; one <testcase> per gate case; a failed case carries its reason as the failure message, an
inconclusive (or not judged) cell is skipped with why.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from llmreplay.compare_format import CASE_COLUMNS, FAILED, FORMAT, FORMAT_VERSION, SKIPPED, gate_cases
from llmreplay.output_paths import write_atomic

# XML 1.0 has no spelling for most control characters: a message carrying one would make the file unreadable.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
# A spreadsheet runs a cell starting with one of these as a formula: text cells get a leading quote.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def junit_xml(result: dict) -> bytes:
    """The result's gate cases as JUnit XML (UTF-8, with its declaration)."""
    return junit_of(result.get("mode", "compare"), result.get("verdict") or {}, gate_cases(result))


def junit_of(mode: str, verdict: dict, cases: list) -> bytes:
    """Gate cases (llmreplay.compare_format.GateCase) of a `mode` (compare, report, capacity) as JUnit XML;
    `verdict`: its headline and exit_code."""
    root = ET.Element(
        "testsuites",
        name=_xml_text(verdict.get("headline", f"llmreplay {mode}")),
        tests=str(len(cases)),
        failures=str(sum(c.outcome == FAILED for c in cases)),
        errors="0",
        skipped=str(sum(c.outcome == SKIPPED for c in cases)),
        time="0",
    )
    for index, kind in enumerate(dict.fromkeys(c.kind for c in cases)):
        members = [c for c in cases if c.kind == kind]
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"llmreplay {mode}: {kind}",
            tests=str(len(members)),
            failures=str(sum(c.outcome == FAILED for c in members)),
            errors="0",
            skipped=str(sum(c.outcome == SKIPPED for c in members)),
            time="0",
        )
        if index == 0:  # what the whole file judged, once
            properties = ET.SubElement(suite, "properties")
            for name, value in (
                ("format", FORMAT),
                ("format_version", FORMAT_VERSION),
                ("exit_code", str(verdict.get("exit_code", ""))),
                ("headline", verdict.get("headline", "")),
            ):
                ET.SubElement(properties, "property", name=name, value=_xml_text(value))
        for case in members:
            element = ET.SubElement(
                suite, "testcase", classname=f"llmreplay.{mode}.{kind}", name=_xml_text(case.name), time="0"
            )
            message = _xml_text(case.message)
            if case.outcome == FAILED:
                failure = ET.SubElement(element, "failure", message=message, type=case.verdict)
                failure.text = message
            elif case.outcome == SKIPPED:
                ET.SubElement(element, "skipped", message=message)
            else:
                ET.SubElement(element, "system-out").text = message
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def verdict_csv(result: dict) -> str:
    """The result's gate cases, one row each (columns: llmreplay.compare_format.CASE_COLUMNS)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CASE_COLUMNS)
    for case in gate_cases(result):
        writer.writerow(["" if v is None else safe_cell(v) if isinstance(v, str) else v for v in case.row()])
    return out.getvalue()


def write_junit(path: str | Path, result: dict, flag: str = "--junit") -> Path:
    return write_atomic(path, junit_xml(result), force=True, flag=flag)


def write_verdict_csv(path: str | Path, result: dict, flag: str = "--csv") -> Path:
    return write_atomic(path, verdict_csv(result), force=True, flag=flag)


def safe_cell(text: str) -> str:
    """A text cell a spreadsheet shows as text: a leading quote before a formula's first character."""
    return "'" + text if text.startswith(FORMULA_START) else text


def _xml_text(value: object) -> str:
    return _NOT_XML.sub("\ufffd", str(value))
