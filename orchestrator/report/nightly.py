"""What a CI and a person read after a night: JUnit XML (one test case per device x config) and markdown."""

from __future__ import annotations

from orchestrator.analysis.nightly import NightSummary

__all__ = ["junit_xml", "markdown"]


def junit_xml(summary: NightSummary) -> str:
    """One test case per device x config: failure on alarm, error when the night has no comparison
    (a session without enough trials, or a night that did not finish)."""
    import xml.etree.ElementTree as ET

    cases = []
    for row in summary.tonight.to_dict("records"):
        case = ET.Element("testcase", classname=f"nightly.{row['config']}", name=str(row["device"]), time="0")
        detail = (f"{row['candidate_build']} vs {row['reference_build']} on {row['device']} ({row['chip_class']}): "
                  f"ratio {row['ratio']:.4f} [{row['ci_low']:.4f}, {row['ci_high']:.4f}], "
                  f"n {row['n_candidate']}/{row['n_reference']}; {row['reason']}")
        if row["status"] == "alarm":
            ET.SubElement(case, "failure", message=f"tok/s regression: {row['reason']}", type="alarm").text = detail
        elif row["status"] == "no data":
            ET.SubElement(case, "error", message=str(row["reason"]), type="no_data").text = detail
        ET.SubElement(case, "system-out").text = f"{row['status']}: {detail}"
        cases.append(case)
    for config, device, why in summary.missing:
        case = ET.Element("testcase", classname=f"nightly.{config}", name=device, time="0")
        kind = "unfinished" if summary.unfinished is not None else "no_data"
        ET.SubElement(case, "error", message=why.splitlines()[0] if why else kind, type=kind).text = why
        cases.append(case)
    failures = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    suite = ET.Element("testsuite", name=f"orch nightly {summary.night}", tests=str(len(cases)),
                       failures=str(failures), errors=str(errors), skipped="0", time="0")
    suite.extend(cases)
    root = ET.Element("testsuites", tests=str(len(cases)), failures=str(failures), errors=str(errors))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"




def markdown(summary: NightSummary) -> str:
    if summary.unfinished is not None:
        return (f"# Nightly {summary.night}: DID NOT FINISH\n\n{summary.unfinished}\n\n"
                + "".join(f"- {c} / {d}: no verdict\n" for c, d, _ in summary.missing))
    lines = [f"# Nightly {summary.night}: {'ALARM' if summary.alarmed else 'no alarm'}", ""]
    lines += ["| config | device | chip | candidate vs reference | ratio [CI] | one-sided p | streak | status |",
              "|---|---|---|---|---|---|---|---|"]
    for r in summary.tonight.to_dict("records"):
        lines.append(
            f"| {r['config']} | {r['device']} | {r['chip_class']} | {r['candidate_build']} vs {r['reference_build']} "
            f"| {r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | {r['p_one_sided_slower']:.2g} "
            f"| {r['streak']} | **{r['status']}**{f' since {since}' if (since := r.get('since')) else ''} |"
        )
    for config, device, why in summary.missing:
        lines.append(f"| {config} | {device} | | | | | | **no data**: {why} |")
    lines.append("")
    for r in summary.tonight[summary.tonight["status"] != "ok"].to_dict("records"):
        lines.append(f"- {r['config']} / {r['device']}: {r['status']}: {r['reason']}")
    lines += ["", "## Change points (the slower signal, whole history)", ""]
    if len(summary.changes):
        lines += ["| config | device | signal | from night | shift |", "|---|---|---|---|---|"]
        lines += [f"| {r['config']} | {r['device']} | {r['signal']} | {r['night']} | {r['shift']:+.1%} |"
                  for r in summary.changes.to_dict("records")]
    else:
        lines.append("none detected")
    return "\n".join(lines) + "\n"
