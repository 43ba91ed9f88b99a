"""Counts and reasons from one pytest run's JUnit XML (--junitxml)."""
import xml.etree.ElementTree as ET

MESSAGE_CHARS = 600  # of each failure kept in the results; the log has all of it


def outcome(case):
    """'failed', 'error', 'skipped' or 'passed'; a test that failed and then
    errored in teardown counts as failed."""
    for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
        if case.find(tag) is not None:
            return name
    return "passed"


def summarise(xml_path):
    """{'passed', 'failed', 'errors', 'skipped', 'skip_reasons': {reason: how
    many tests}, 'failures': [{test, message}]} from the report at xml_path."""
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "skip_reasons": {}, "failures": []}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        test = "::".join(part for part in (case.get("classname"), case.get("name")) if part)
        result = outcome(case)
        counts["errors" if result == "error" else result] += 1
        if result == "skipped":
            reason = case.find("skipped").get("message", "")
            counts["skip_reasons"][reason] = counts["skip_reasons"].get(reason, 0) + 1
        elif result in ("failed", "error"):
            node = case.find("failure") if result == "failed" else case.find("error")
            text = (node.get("message") or "") + "\n" + (node.text or "")
            counts["failures"].append({"test": test, "message": text.strip()[-MESSAGE_CHARS:]})
    return counts
