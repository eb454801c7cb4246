"""Human layouts of `why`, `project --output`, `starters`, `history`, `validate`, `audit` and
`onboard`, line for line as the reference prints them (tests/cm_reference/human/ pins its
text); `history`, which the reference lacks, is laid out as its context's HISTORY section."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from ..wording import count
from .human_style import RULE, WIDTH, emoji, icon, icon_prefix, key_values, paint, truncate, wrap
from .onboard_text import guided_text

CM = "cm"
_AGENT_EMOJI = (("pi_agent", "🟠"), ("claude", "🟣"), ("cursor", "🔵"), ("codex", "🟢"), ("aider", "🟡"))


def _agent(agent: str) -> str:
    mark = next((e for key, e in _AGENT_EMOJI if key in agent.lower()), "")
    return f"{emoji(mark)} {agent}" if emoji(mark) else agent


def _rule_line() -> str:
    return paint(RULE, "dim")


def _section(title: str) -> list[str]:
    return [paint(title, "bold"), _rule_line()]


# ---------------------------------------------------------------- why


def _feedback_detail(event: dict[str, Any]) -> str:
    reason, context = event.get("reason"), event.get("context")
    if event.get("type") == "harmful":
        if reason and context:
            return f"{reason}: {truncate(context, 80)}"
        return reason or (truncate(context, 80) if context else "")
    return truncate(context, 80) if context else ""


def why(d: dict[str, Any], *, verbose: bool = False) -> str:
    b, status = d["bullet"], d["currentStatus"]
    wrap_width = WIDTH - 4
    score = float(b.get("score") or 0)
    shade = "green" if score >= 5 else "bold" if score >= 0 else "red"
    out = [paint("WHY", "bold"), _rule_line(),
           paint(f"[{b['id']}]", "bold") + f" {b['category']} • {b['maturity']} • score {paint(f'{score:.1f}', shade)}",
           "", *_section("Summary"),
           *key_values([("Created", f"{str(b.get('createdAt'))[:10]} ({b.get('daysAgo')} days ago)"),
                        ("Feedback", f"{status['helpfulCount']} helpful / {status['harmfulCount']} harmful • "
                                     f"{status['effectiveness']}")]),
           "", *_section("Rule"), *(f"  {line}" for line in wrap(b["content"], wrap_width)), "",
           *_section("Reasoning")]
    reasoning = d.get("reasoning")
    if reasoning:
        out += [paint(f"  {line}", "gray") for line in wrap(reasoning if verbose else truncate(reasoning, 400),
                                                             wrap_width)]
    else:
        out.append(paint("  (No original reasoning recorded)", "dim"))
    sources = d.get("sourceSessions") or []
    out += ["", *_section(f"Sources ({len(sources)})")]
    if not sources:
        out.append(paint("  (No source sessions recorded)", "dim"))
    for n, s in enumerate(sources, 1):
        short = "/".join(str(s["path"]).replace("\\", "/").split("/")[-2:])
        out.append(f"  {n}. {paint(short, 'blue')}" + (paint(f" • {s['date']}", "dim") if s.get("date") else ""))
        if s.get("snippet"):
            out += [paint(f"     {line}", "dim") for line in wrap(f'"{truncate(s["snippet"], 140)}"', wrap_width - 2)]
    out.append("")
    if d.get("evidence"):
        out += _section("Evidence")
        for e in d["evidence"]:
            out += [paint(f"  {line}", "green") for line in wrap(f"• {truncate(e, 180)}", wrap_width)]
        out.append("")
    if d.get("diaryEntries"):
        out += _section("Related diary entries")
        for entry in d["diaryEntries"]:
            out += [paint(f"  {line}", "dim")
                    for line in wrap(f"{entry['date']}: {truncate(entry['content'], 200)}", wrap_width)]
        out.append("")
    history = d.get("feedbackHistory") or []
    if history:
        shown = 10 if verbose else 5
        out += _section(f"Feedback history ({status['helpfulCount']} helpful, {status['harmfulCount']} harmful)")
        for f in history[:shown]:
            badge = paint(icon("success"), "green") if f.get("type") == "helpful" else paint(icon("failure"), "red")
            session = f" • {PurePath(f['sessionPath']).name}" if f.get("sessionPath") else ""
            detail = _feedback_detail(f)
            out.append(f"  {str(f.get('timestamp'))[:10]} {badge} {f.get('type')}{session}"
                       + (f" • {detail}" if detail else ""))
        if len(history) > shown:
            out.append(paint(f"  … ({len(history) - shown} more)", "dim"))
        out.append("")
    out.append(paint(f"{_tip()}Next: '{CM} playbook get {b['id']}' or "
                     f"'{CM} mark {b['id']} --helpful|--harmful --reason \"...\"'", "gray"))
    return "\n".join(out)


def _tip() -> str:
    return f"{icon('tip')} "


# ---------------------------------------------------------------- project, starters, validate, history


def project(d: dict[str, Any]) -> str:
    return paint(f"{icon('success')} Exported to {d['outputPath']}", "green")


def starters(d: dict[str, Any]) -> str:
    rows = d.get("starters") or []
    if not rows:
        return paint("No starters found. Add custom starters under ~/.cass-memory/starters/.", "yellow")
    out: list[str] = []
    for source, title, shade in (("builtin", "Built-in starters:", "cyan"), ("custom", "Custom starters:", "green")):
        group = [s for s in rows if s.get("source") == source]
        if group:
            out += [paint(f"\n{title}\n", "bold")]
            out += [f"• {paint(s['name'], shade)} - {s['description']} ({s['bulletCount']} rules)"
                    + (f" [{s['path']}]" if source == "custom" and s.get("path") else "") for s in group]
    return "\n".join([*out, "", paint(f"Seed a playbook with: {CM} init --starter=<name>", "gray")])


def validate(d: dict[str, Any]) -> str:
    verdict = d["verdict"]
    shade = "green" if verdict == "ACCEPT" else "red" if verdict == "REJECT" else "yellow"
    out = [paint("\nValidation Result", "bold"), f"Rule: {d['proposedRule']}",
           f"Verdict: {paint(verdict, shade)} (confidence {float(d['confidence']):.2f})", f"Reason: {d['reason']}"]
    if d.get("refinedRule"):
        out += [paint("\nRefined Rule:", "bold"), d["refinedRule"]]
    if d.get("evidence"):
        out.append(paint("\nEvidence (cass):", "bold"))
        out += [f"- {e['session']}: {str(e.get('snippet') or '')[:140]}... ({e.get('outcome')})"
                for e in d["evidence"][:5]]
    return "\n".join(out)


def history(d: dict[str, Any]) -> str:
    hits = d.get("historySnippets") or []
    if not hits:
        out = [*_section("HISTORY (0)"), paint("(No relevant history found)", "gray"),
               paint(f"  {_tip()}Use Claude Code, Cursor, Codex, or PI to build session history.", "gray")]
    else:
        out = _section(f"HISTORY ({len(hits)})")
        for n, h in enumerate(hits, 1):
            origin = h.get("origin") or {}
            host = f" [{origin['host']}]" if origin.get("kind") == "remote" and origin.get("host") else ""
            out.append(paint(f"{n}. {_agent(h.get('agent') or 'unknown')}{host}", "bold")
                       + paint(f" • {h.get('source_path')}", "dim"))
            snippet = " ".join(str(h.get("snippet") or "").split())
            out += [paint(f"  {line}", "gray") for line in wrap(f'"{snippet}"', WIDTH - 4)]
            out.append("")
    if d.get("historyNotice"):
        out.append(paint(d["historyNotice"], "dim"))
    return "\n".join(out).rstrip("\n")


# ---------------------------------------------------------------- audit


def audit(d: dict[str, Any], *, days: int = 7) -> str:
    if "candidates" in d:
        out = [paint(f"\n{icon_prefix('warning')}Project Hot Stove: Scanning for past catastrophes...", "red")]
        candidates = d["candidates"]
        if not candidates:
            return "\n".join([*out, paint("No potential traumas found (or maybe you hid them well).", "green")])
        out.append(paint(f"Found {len(candidates)} candidate traumas:", "yellow"))
        for c in candidates:
            context = str(c.get("context") or "")
            preview = context[:200] + "..." if len(context) > 200 else context
            out += [paint("\n[TRAUMA CANDIDATE]", "red"), f"  Pattern: {paint(str(c.get('description')), 'bold')}",
                    f"  Session: {c.get('sessionPath')}", f"  Evidence: {c.get('evidence')}",
                    f"  Context:  \"{preview.replace(chr(10), ' ')}\""]
        return "\n".join([*out, paint(f"\nTo convert a candidate into a scar, use: {CM} trauma add \"<pattern>\" "
                                      "--severity CRITICAL --message \"...\"", "bold"),
                          paint(f"Tip: bulk import with: {CM} trauma import <file>", "gray")])
    stats = d.get("stats") or {}
    if not stats.get("sessionsScanned") and not d.get("errors"):
        return paint(f"No sessions found in the last {days} days.", "yellow")
    out = [paint(f"AUDIT RESULTS (last {days} days)", "bold"),
           f"Sessions scanned: {stats['sessionsScanned']}", f"Violations found: {stats.get('violationsFound', 0)}", ""]
    shades = {"high": "red", "medium": "yellow"}
    for v in d.get("violations") or []:
        shade = shades.get(str(v.get("severity")), "blue")
        out += [paint(f"[{str(v.get('severity')).upper()}] Rule {v.get('bulletId')}", shade),
                f"  {v.get('bulletContent')}", paint(f"  Session: {v.get('sessionPath')}", "gray"),
                paint(f"  Evidence: {v.get('evidence')}", "gray"), ""]
    return "\n".join(out)


# ---------------------------------------------------------------- onboard


def _gaps(d: dict[str, Any]) -> str:
    g = d["gapAnalysis"]
    out = [paint("PLAYBOOK GAP ANALYSIS", "bold"), _rule_line(), paint(f"Total rules: {g['totalRules']}", "dim"), ""]
    by = g["byCategory"]
    if g["gaps"]["critical"]:
        out += [paint("CRITICAL (0 rules):", "red"), *(paint(f"  {icon('failure')} {c}", "red")
                                                       for c in g["gaps"]["critical"]), ""]
    if g["gaps"]["underrepresented"]:
        out += [paint("UNDERREPRESENTED (1-2 rules):", "yellow"),
                *(paint(f"  {icon_prefix('warning')}{c} ({by[c]['count']} rules)", "yellow")
                  for c in g["gaps"]["underrepresented"]), ""]
    if g.get("wellCovered"):
        out += [paint("WELL-COVERED (11+ rules):", "green"),
                *(paint(f"  {icon('success')} {c} ({by[c]['count']} rules)", "green") for c in g["wellCovered"]), ""]
    shades = {"critical": "red", "underrepresented": "yellow", "adequate": "blue"}
    out.append(paint("CATEGORY BREAKDOWN:", "bold"))
    for category, row in by.items():
        bar = "█" * min(20, row["count"]) + "░" * max(0, 20 - row["count"])
        out.append(f"  {category.ljust(15)} {paint(bar, shades.get(row['status'], 'green'))} {row['count']}")
    return "\n".join([*out, "", paint(g["suggestions"], "yellow"),
                      paint(f"\nTo sample sessions that fill gaps: {CM} onboard sample --fill-gaps", "dim")])


def _status(d: dict[str, Any]) -> str:
    status, progress, gaps = d["status"], d["progress"], d["gapAnalysis"]["gaps"]
    out = [paint("ONBOARDING STATUS", "bold"), _rule_line(),
           *key_values([("cass available", "yes" if status["cassAvailable"] else "no"),
                        ("Playbook rules", str(status["playbookRules"])),
                        ("Needs onboarding", "yes" if status["needsOnboarding"] else "no")])]
    if progress.get("hasStarted"):
        out += ["", *_section("PROGRESS"),
                *key_values([("Sessions analyzed", str(progress["sessionsProcessed"])),
                             ("Rules extracted", str(progress["rulesExtracted"])),
                             ("Started", _ago(progress.get("startedAt"))),
                             ("Last activity", _ago(progress.get("lastActivity")))])]
    if gaps["critical"] or gaps["underrepresented"]:
        out += ["", *_section("GAPS")]
        if gaps["critical"]:
            out.append(paint(f"  Critical: {', '.join(gaps['critical'])}", "red"))
        if gaps["underrepresented"]:
            out.append(paint(f"  Low: {', '.join(gaps['underrepresented'])}", "yellow"))
    return "\n".join([*out, "", paint(status["recommendation"], "yellow")])


def _ago(iso: str | None) -> str:
    """The reference's relative dates: today, yesterday, N days/weeks/months/years ago."""
    from .scoring import now_ms, parse_ms

    when = parse_ms(iso) if iso else None
    if when is None:
        return "never"
    days = int((now_ms() - when) // 86_400_000)
    if days < 2:
        return "today" if days <= 0 else "yesterday"
    for limit, size, unit in ((7, 1, "day"), (30, 7, "week"), (365, 30, "month"), (10**9, 365, "year")):
        if days < limit:
            n = days if size == 1 else round(days / size)
            return f"{count(n, unit)} ago"
    return "never"


def _sample(d: dict[str, Any]) -> str:
    fill = "gapAnalysis" in d
    out = [paint("SAMPLED SESSIONS FOR GAP-FILLING" if fill else "SAMPLED SESSIONS FOR ANALYSIS", "bold")]
    if fill:
        gaps = d["gapAnalysis"]["gaps"]
        priority = (gaps["critical"] + gaps["underrepresented"])[:3]
        out.append(paint(f"(prioritized for: {', '.join(priority)})" if priority
                         else "(no gaps to fill - using diverse sampling)", "dim"))
    if d.get("filtered"):
        out.append(paint(f"({d['filtered']} already-processed sessions filtered out)", "dim"))
    out.append("")
    sessions = d.get("sessions") or []
    if not sessions:
        out.append(paint("No unprocessed sessions found.", "yellow"))
        done = d["progress"]["sessionsProcessed"]
        if done:
            out += [paint(f"You've analyzed {done} sessions so far.", "dim"),
                    paint("Use --include-processed to see all sessions, or --reset to start over.", "dim")]
        return "\n".join(out)
    for s in sessions:
        out += [paint(f"{_agent_prefix(s.get('agent') or 'unknown')}[{s.get('agent')}] "
                      f"{PurePath(str(s.get('workspace') or '')).name}", "cyan"), paint(f"  {s['path']}", "dim")]
        if fill and s.get("gapScore"):
            matched = ", ".join(s.get("matchedCategories") or [])
            out.append(paint(f"  Gap score: {s['gapScore']} ({matched})", "magenta"))
        out += [paint(f"  \"{str(s.get('snippet') or '')[:80]}...\"", "gray"), ""]
    return "\n".join([*out, paint(f"\nTo read a session: {CM} onboard read <path>", "dim")])


def _agent_prefix(agent: str) -> str:
    labelled = _agent(agent)
    return labelled[: -len(agent)] if labelled != agent else ""


def _read(d: dict[str, Any]) -> str:
    if "metadata" in d:  # --template
        meta, context = d["metadata"], d["context"]
        gaps = context.get("playbookGaps") or {}
        out = [paint("SESSION ANALYSIS TEMPLATE", "bold"), paint("─" * 60, "dim"), "", paint("METADATA", "bold"),
               f"  Path: {meta['path']}", f"  Workspace: {meta.get('workspaceName')}",
               f"  Messages: ~{meta.get('messageCount')}"]
        if meta.get("topicHints"):
            out.append(f"  Topics: {', '.join(meta['topicHints'])}")
        out += ["", paint("CONTEXT", "bold")]
        if gaps.get("critical"):
            out.append(paint(f"  Critical gaps: {', '.join(gaps['critical'])}", "red"))
        if gaps.get("underrepresented"):
            out.append(paint(f"  Low coverage: {', '.join(gaps['underrepresented'])}", "yellow"))
        if context.get("relatedRules"):
            out.append(paint("  Related rules:", "cyan"))
            out += [paint(f"    • \"{r['content'][:60]}...\" ({round(r['similarity'] * 100)}%)", "dim")
                    for r in context["relatedRules"][:3]]
        return "\n".join([*out, "", paint("SUGGESTED FOCUS", "bold"), paint(f"  {context['suggestedFocus']}", "yellow"),
                          "", paint("SESSION CONTENT", "bold"), paint("─" * 60, "dim"), d["sessionContent"],
                          paint("─" * 60, "dim"), "", paint("EXTRACTION INSTRUCTIONS", "bold"),
                          paint("After analyzing, add rules using:", "dim"),
                          paint(f"  {CM} playbook add \"Your rule\" --category \"category\"", "cyan"),
                          paint(f"Or batch add via: {CM} playbook add --file rules.json", "dim")])
    return "\n".join([paint(f"SESSION: {d['sessionPath']}", "bold"), paint("─" * 60, "dim"), d["sessionContent"],
                      paint("─" * 60, "dim"), "", paint("Now analyze this session and extract rules using:", "yellow"),
                      paint(f"  {CM} playbook add \"Your rule\" --category \"category\"", "cyan"), "",
                      paint(f"For extraction guidance: {CM} onboard prompt", "dim"),
                      paint(f"For rich context: {CM} onboard read <path> --template", "dim")])


def _guided(d: dict[str, Any]) -> str:
    lines = []
    for line in guided_text(d["status"], icon("success"), icon("failure")).split("\n"):
        plain = line.replace("**", "")
        if line.startswith("#"):
            plain = paint(plain, "blue" if line.startswith("# ") else "cyan" if line.startswith("## ") else "bold")
        lines.append(plain)
    return "\n".join(lines)


ONBOARD: dict[str, Callable[[dict[str, Any]], str]] = {
    "gaps": _gaps, "status": _status, "sample": _sample, "read": _read, "guided": _guided,
    "prompt": lambda d: str(d["extractionPrompt"]),
    "mark-done": lambda d: "\n".join([paint(f"{icon('success')} Marked as processed: {d['sessionPath']}", "green"),
                                      paint("  (0 rules extracted - session skipped)", "dim")]),
    "reset": lambda d: paint(f"{icon('success')} Onboarding progress reset", "green"),
}


def onboard(command: str, d: dict[str, Any]) -> str | None:
    action = command.partition(":")[2]
    page = ONBOARD.get("read" if action.startswith("read") else action)
    return page(d) if page is not None else None


def _project(d: dict[str, Any]) -> str | None:
    return project(d) if "outputPath" in d else None  # the content itself is the command's own text


PAGES: dict[str, Callable[[str, dict[str, Any]], str | None]] = {
    "why": lambda _, d: why(d), "project": lambda _, d: _project(d), "starters": lambda _, d: starters(d),
    "validate": lambda _, d: validate(d), "history": lambda _, d: history(d), "audit": lambda _, d: audit(d),
    "onboard": onboard,
}
