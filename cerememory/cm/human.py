"""Human (non-JSON) output, modelled on the reference's: lists as short lines, confirmations as
one line, `doctor` as a checklist, `stats` and `top` laid out as there. Colour only on a
terminal, never with NO_COLOR (or --no-color); a command without its own layout gets a short
`key: value` summary, never a dump of its data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .human_pages import PAGES
from .human_style import RULE, icon, paint


def _tick(ok: bool = True) -> str:
    return paint(icon("success"), "green") if ok else paint(icon("failure"), "red")


def _where(b: dict[str, Any]) -> str:
    return f"{b.get('category', 'general')}/{b.get('scope', 'global')}"


def _score(value: Any) -> str:
    return f"{float(value or 0):.1f}"


# ---------------------------------------------------------------- rules


def _init(d: dict[str, Any]) -> str:
    lines = [paint(f"✓ Created ~/.cass-memory/{f}", "green") for f in d.get("created") or []]
    lines += [paint(f"• ~/.cass-memory/{f} already exists", "blue") for f in d.get("existed") or []]
    if d.get("backups"):
        lines += ["", paint("Backups created:", "yellow"), *(f"  • {b['backup']}" for b in d["backups"])]
    if d.get("overwritten"):
        lines += ["", paint(f"Overwritten: {', '.join(d['overwritten'])}", "yellow")]
    starter = d.get("starter")
    if starter:
        lines.append(f"{_tick()} Applied starter \"{starter.get('name')}\" ({starter.get('added', 0)} added, "
                     f"{starter.get('skipped', 0)} skipped)")
    storage = d.get("storage") or {}
    if storage:
        lines.append(paint(f"Storage: {storage.get('mode')} ({storage.get('dataDir')})", "dim"))
    return "\n".join(lines)


def _validation(v: dict[str, Any] | None) -> list[str]:
    if not v:
        return []
    marks = {"error": "x", "warning": "!", "suggestion": "?"}
    return [f"  {marks.get(w.get('severity', ''), '!')} {w['message']}" for w in v.get("warnings") or []] \
        or ["  No issues found"]


def _add(d: dict[str, Any]) -> str:
    if "bullet" in d:
        return "\n".join([f"{_tick()} Added bullet {d['bullet']['id']}", *_validation(d.get("validation"))])
    lines = [f"{_tick(not d.get('failed'))} Added {len(d.get('added') or [])} of {d['summary']['total']} rules"]
    for item in d.get("added") or []:
        lines.append(f"  + [{item['id']}] {item['content'][:70]}")
    for item in d.get("skipped") or []:
        lines.append(paint(f"  - skipped: {str(item.get('content'))[:60]} ({item.get('reason')})", "yellow"))
    for item in d.get("failed") or []:
        lines.append(paint(f"  ✗ {str(item.get('content'))[:60]}: {item.get('error')}", "red"))
    return "\n".join(lines)


def _list(d: dict[str, Any]) -> str:
    bullets = d.get("bullets") or []
    if not bullets:
        return "No rules in the playbook yet. Add one: cm playbook add \"<rule>\""
    lines = [paint(f"PLAYBOOK RULES ({len(bullets)}):", "bold"), RULE]
    for b in bullets:
        score = b.get("effectiveScore")
        tail = f" • score {_score(score)}" if score is not None else ""
        lines += [f"[{paint(b['id'], 'cyan')}] {_where(b)} • {b.get('kind')} • {b.get('maturity')}{tail}",
                  f"  {b['content']}"]
    return "\n".join([*lines, "", "Use 'cm playbook get <id>' for full details."])


def _get(d: dict[str, Any]) -> str:
    b = d["bullet"]
    return "\n".join([
        paint(f"BULLET: {b['id']}", "bold"), RULE, "", "Content:", f"  {b['content']}", "", "Details",
        f"  Category: {b.get('category')}", f"  Kind    : {b.get('kind')}", f"  Maturity: {b.get('maturity')}",
        f"  Scope   : {b.get('scope')}", f"  State   : {b.get('state')}",
        f"  Created : {b.get('createdAt')} ({b.get('ageDays')} days ago)", f"  Updated : {b.get('updatedAt')}",
        "", "Scores:", f"  Effective: {float(b.get('effectiveScore') or 0):.2f} (decay)",
        f"  Helpful  : {b.get('helpfulCount', 0)} (decayed {float(b.get('decayedHelpful') or 0):.2f})",
        f"  Harmful  : {b.get('harmfulCount', 0)} (decayed {float(b.get('decayedHarmful') or 0):.2f})",
        "", f"Source sessions ({len(b.get('sourceSessions') or [])})",
        *(f"  - {s}" for s in b.get("sourceSessions") or [])])


def _plan(p: dict[str, Any]) -> str:
    return "\n".join([paint("DRY RUN - No changes will be made", "yellow"), RULE, "",
                      f"Action: {str(p.get('action')).upper()}", f"Bullet ID: {p.get('bulletId')}",
                      f"File: {p.get('path')}", f"Preview: \"{p.get('preview')}\"", f"Category: {p.get('category')}",
                      "", paint(f"Would: {p.get('wouldChange')}", "yellow"), "",
                      paint(f"To apply: {p.get('applyCommand')}", "dim")])


def _remove(d: dict[str, Any]) -> str:
    if "plan" in d:
        return _plan(d["plan"])
    return f"{_tick()} {'Deleted' if d.get('action') == 'deleted' else 'Deprecated'} bullet {d['id']}"


def _undo(d: dict[str, Any]) -> str:
    if "plan" in d:
        return _plan(d["plan"])
    before, after = d.get("before") or {}, d.get("after") or {}
    if d["action"] == "hard-delete":
        body = [paint("HARD DELETE", "red"), "─" * 40, f"Bullet {d['bulletId']} has been permanently deleted.",
                f"File: {d.get('path')}", paint("This action cannot be undone.", "yellow")]
    elif d["action"] == "undo-feedback":
        last = before.get("lastFeedback") or {}
        body = [paint("UNDO FEEDBACK", "blue"), "─" * 40, f"Bullet: {d['bulletId']}", "",
                f"Removed: {last.get('type')} feedback from {str(last.get('timestamp') or 'unknown')[:10]}",
                f"Counts: {before.get('helpfulCount')}+ / {before.get('harmfulCount')}- → "
                f"{after.get('helpfulCount')}+ / {after.get('harmfulCount')}-"]
    else:
        body = [paint("UN-DEPRECATE", "green"), "─" * 40, f"Bullet: {d['bulletId']}", "",
                f"State: {before.get('state') or 'retired'} → {after.get('state')}",
                f"Maturity: {before.get('maturity') or 'deprecated'} → {after.get('maturity')}"]
        if before.get("deprecationReason"):
            body.append(f"Original reason: {before['deprecationReason']}")
    return "\n".join([*body, "", f"{_tick()} {d['message']}"])


def _mark(d: dict[str, Any]) -> str:
    return "\n".join([f"{_tick()} Marked bullet {d['bulletId']} as {d['type']}", f"  New State: {d['newState']}",
                      f"  Effective Score: {float(d['effectiveScore']):.2f}"])


def _forget(d: dict[str, Any]) -> str:
    line = f"{_tick()} Forgot bullet {d['bulletId']} (blocked and deprecated)"
    return line + (f"\n  Anti-pattern added: {d['antiPatternId']}" if d.get("antiPatternId") else "")


def _top(d: dict[str, Any]) -> str:
    rows = d.get("bullets") or []
    lines = [paint("TOP", "bold"), RULE, f"Showing {len(rows)} bullets", ""]
    emoji = {"proven": "✅", "established": "🔵", "candidate": "🟡"}
    for r in rows:
        lines += [f"{r['rank']}. [{paint(r['id'], 'cyan')}] • score {_score(r['score'])} • "
                  f"{emoji.get(str(r.get('maturity')), '⚪')} {r.get('maturity')} • {_where(r)}",
                  f"  {r['content']}",
                  f"  Feedback: {r['feedback']['helpful']}× helpful, {r['feedback']['harmful']}× harmful • "
                  f"Last used: {r['lastUsed']}", ""]
    return "\n".join([*lines, "Use 'cm playbook get <id>' to inspect, or 'cm why <id>' for provenance."])


def _stale(d: dict[str, Any]) -> str:
    lines = [paint("STALE", "bold"), RULE,
             f"Threshold: {d.get('threshold')}+ days • Found: {d.get('count')}/{d.get('totalActive')}", ""]
    for b in d.get("bullets") or []:
        last = (b.get("lastFeedback") or {}).get("timestamp")
        lines += [f"{b['daysSinceLastFeedback']}d [{b['id']}] {_where(b)} • {b.get('maturity')} • score "
                  f"{_score(b.get('score'))}", f"  {b['content']}",
                  f"  Last feedback: {last or '(none yet)'}", f"  {b.get('recommendation')}", ""]
    return "\n".join(lines).rstrip()


def _stats(d: dict[str, Any]) -> str:
    dist = d.get("scoreDistribution") or {}
    lines = ["", paint("📊 Playbook Health Dashboard", "bold"), f"Total Bullets: {d.get('total', 0)}"]
    for title, key in (("By Scope", "byScope"), ("By State", "byState"), ("By Kind", "byKind")):
        lines += ["", f"{title}:", *(f"  {k}: {v}" for k, v in (d.get(key) or {}).items())]
    lines += ["", "Score Distribution:", f"  🌟 Excellent (>=10): {dist.get('excellent', 0)}",
              f"  ✅ Good (5-<10):     {dist.get('good', 0)}", f"  ⚪ Neutral (0-5):  {dist.get('neutral', 0)}",
              f"  ⚠️ At Risk (<0):   {dist.get('atRisk', 0)}", "", "🏆 Top Performers (effective score):"]
    lines += [f"  {n}. [{b['id']}] {b['content'][:60]}... ({_score(b.get('score'))})"
              for n, b in enumerate(d.get("topPerformers") or [], 1)]
    lines += ["", "👍 Most Helpful (feedback count):"]
    lines += [f"  {n}. [{b['id']}] {b['content'][:60]}... ({b.get('helpfulCount', 0)})"
              for n, b in enumerate(d.get("mostHelpful") or [], 1)]
    lines += ["", f"⚠️ At Risk: {d.get('atRiskCount', 0)}", f"🕐 Stale (90d+): {d.get('staleCount', 0)}"]
    merges = d.get("mergeCandidates") or []
    if merges:
        lines += ["", f"🔀 Merge candidates: {len(merges)}"]
    return "\n".join(lines)


# ---------------------------------------------------------------- health, privacy, traumas


def _doctor(d: dict[str, Any]) -> str:
    marks = {"pass": paint("✓", "green"), "warn": paint("!", "yellow"), "fail": paint("✗", "red")}
    lines = [paint("cm doctor", "bold"), RULE]
    category = None
    for c in d.get("checks") or []:
        if c["category"] != category:
            category = c["category"]
            lines += ["", paint(category, "bold")]
        lines.append(f"  {marks.get(c['status'], '?')} {c['item']}: {c['message']}")
    lines += ["", f"Overall: {d.get('overallStatus')}"]
    actions = d.get("recommendedActions") or []
    if actions:
        lines += ["", "Recommended actions:"]
        lines += [f"  [{a['urgency']}] {a['label']}" + (f": {a['command']}" if a.get("command") else "")
                  for a in actions]
    for r in d.get("fixResults") or []:
        lines.append(f"  {_tick(r['success'])} fix {r['id']}: {r['message']}")
    return "\n".join(lines)


def _privacy(d: dict[str, Any]) -> str:
    cross = d.get("crossAgent") or {}
    allow = ", ".join(cross.get("agents") or []) or "(all agents)"
    if "cass" not in d:  # a change
        state = "ENABLED" if cross.get("enabled") else "DISABLED"
        return f"{_tick()} Cross-agent enrichment: {state}\n  Allowlist: {allow}"
    lines = ["", paint("Privacy Status", "bold"), "═" * 50,
             f"Cross-agent enrichment: {'ENABLED' if cross.get('enabled') else 'DISABLED'}",
             f"Consent given: {'yes' if cross.get('consentGiven') else 'no'}",
             f"Consent date: {cross.get('consentDate') or 'none'}", f"Allowlist: {allow}",
             f"Audit log: {'off' if cross.get('auditLog') is False else 'on'}"]
    if cross.get("deniedAgents"):
        lines.append(f"Never: {', '.join(cross['deniedAgents'])}")
    counts = (d.get("cass") or {}).get("sessionCountsByAgent")
    lines += ["", f"Sessions in the raw journal (last {(d.get('cass') or {}).get('timelineDays')} days):"]
    lines += [f"  - {agent}: {n} session(s)" for agent, n in sorted((counts or {}).items(), key=lambda i: -i[1])] \
        or ["  (none)"]
    if d.get("rule"):
        lines += ["", f"Rule: {d['rule']}"]
    return "\n".join(lines)


def _traumas(d: dict[str, Any]) -> str:
    if "entry" in d:
        return f"{_tick()} Added trauma {d['entry']['id']}\nThe safety guard will now block this pattern."
    if "traumas" in d:
        rows = d["traumas"]
        if not rows:
            return "No active traumas found. (Safe... for now.)"
        return "\n".join([paint(f"ACTIVE TRAUMAS ({len(rows)}):", "bold"), RULE,
                          *(f"[{t['id']}] {t.get('severity')} • {t['pattern']}" for t in rows)])
    if "updated" in d:
        return f"{_tick()} Healed {d['updated']} trauma entr{'y' if d['updated'] == 1 else 'ies'}"
    if "removed" in d:
        return f"{_tick()} Removed {d['removed']} trauma entr{'y' if d['removed'] == 1 else 'ies'}"
    if "imported" in d:
        return f"{_tick()} Imported {d['imported']} trauma patterns"
    return summary(d)


def _outcome(d: dict[str, Any]) -> str:
    if "applied" in d and "type" in d:
        return f"{_tick()} Recorded outcome: {d['type']} feedback (weight {d['weight']}) on {d['applied']} rule(s)" + \
            (f"; not found: {', '.join(d['missing'])}" if d.get("missing") else "")
    if "feedbackRecorded" in d:
        return "Outcome recorded; no signal strong enough to give feedback"
    return f"{_tick()} Applied {d.get('applied', 0)} feedback events from {d.get('totalOutcomes', 0)} outcomes"


def _usage(d: dict[str, Any]) -> str:
    return "\n".join(["LLM usage", f"  Today: ${d['today']:.4f} (limit ${d['dailyLimit']})",
                      f"  Month: ${d['month']:.4f} (limit ${d['monthlyLimit']})", f"  Total: ${d['total']:.4f}"])


def _similar(d: dict[str, Any]) -> str:
    rows = d.get("results") or []
    at_least = f"similarity ≥ {float(d.get('threshold') or 0):.2f}"
    if not rows:
        return (f"No similar rules at {at_least} ({d.get('mode')} similarity); "
                "a lower --threshold finds looser matches.")
    return "\n".join([f"Similar rules ({d.get('mode')}, {at_least}):",
                      *(f"  {float(r.get('similarity') or 0):.2f} [{r['id']}] {r['content']}" for r in rows)])


def summary(data: Any) -> str:
    """A command without its own layout: its scalars as `key: value`, its lists counted."""
    if not isinstance(data, dict):
        return str(data)
    lines = []
    for key, value in data.items():
        if isinstance(value, list):
            lines.append(f"{key}: {len(value)}")
            lines += [f"  - {_line(v)}" for v in value[:10]]
        elif isinstance(value, dict):
            inner = ", ".join(f"{k}={_line(v)}" for k, v in list(value.items())[:6] if not isinstance(v, dict | list))
            lines.append(f"{key}: {inner}" if inner else f"{key}: …")
        elif value is not None:
            lines.append(f"{key}: {value}")
    return "\n".join(lines)


def _line(value: Any) -> str:
    if isinstance(value, dict):
        for key in ("content", "message", "description", "label", "id", "name", "path"):
            if key in value:
                return str(value[key])[:100]
        return ", ".join(f"{k}={v}" for k, v in list(value.items())[:4])[:100]
    return str(value)[:100]


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "init": _init, "playbook:add": _add, "playbook:list": _list, "playbook:get": _get, "playbook:remove": _remove,
    "undo": _undo, "mark": _mark, "forget": _forget, "top": _top, "stale": _stale, "stats": _stats,
    "doctor": _doctor, "outcome": _outcome, "outcome-apply": _outcome, "usage": _usage, "similar": _similar,
}


def render(command: str, data: Any) -> str:
    page = PAGES.get(command.split(":")[0])
    text = page(command, data) if page is not None and isinstance(data, dict) else None
    if text is not None:
        return text
    if command.startswith("privacy:"):
        return _privacy(data)
    if command.startswith("trauma"):
        return _traumas(data)
    renderer = RENDERERS.get(command)
    return renderer(data) if renderer is not None and isinstance(data, dict) else summary(data)
