"""Server-rendered SVG: the fidelity curve of a record, the fidelity histograms, an activation
path and the association graph around a record.

Only numbers and text this module formats go into the markup, and text is escaped anyway;
the pages embed the result inline (no script, no style attribute: the CSP forbids both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

from markupsafe import Markup, escape

WIDTH, HEIGHT, PAD = 640, 220, 36


def _x(t: float, t0: float, t1: float) -> float:
    return PAD + (WIDTH - 2 * PAD) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)


def _y(f: float) -> float:
    return HEIGHT - PAD - (HEIGHT - 2 * PAD) * max(0.0, min(1.0, f))


def _polyline(points: Sequence[tuple[float, float]], t0: float, t1: float, css: str) -> str:
    coords = " ".join(f"{_x(t, t0, t1):.1f},{_y(f):.1f}" for t, f in points)
    return f'<polyline class="{css}" points="{coords}"/>'


def fidelity_curve(past: Sequence[tuple[float, float]], ahead: Sequence[tuple[float, float]], *,
                   now: float, threshold: float, forgotten_at: datetime | None) -> Markup:
    """Fidelity since the last reinforcement (`past`, solid) and forecast (`ahead`, dashed) as
    (unix time, fidelity) points, with the store's threshold and the date it will be crossed."""
    points = [*past, *ahead]
    t0, t1 = points[0][0], points[-1][0]
    parts = [f'<svg class="curve" id="fidelity-curve" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="fidelity curve" xmlns="http://www.w3.org/2000/svg">',
             f'<line class="axis" x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}"/>',
             f'<line class="axis" x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}"/>']
    for f in (0.0, 0.5, 1.0):
        parts.append(f'<text class="label" x="4" y="{_y(f) + 4:.1f}">{f:.1f}</text>')
    parts.append(f'<line class="threshold" x1="{PAD}" y1="{_y(threshold):.1f}" x2="{WIDTH - PAD}" '
                 f'y2="{_y(threshold):.1f}"><title>forgotten below {threshold:.2f}</title></line>')
    if past:
        parts.append(_polyline(past, t0, t1, "past"))
    if ahead:
        parts.append(_polyline(ahead, t0, t1, "forecast"))
    x_now = _x(now, t0, t1)
    parts.append(f'<line class="now" x1="{x_now:.1f}" y1="{PAD}" x2="{x_now:.1f}" y2="{HEIGHT - PAD}"/>')
    parts.append(f'<text class="label" x="{x_now + 3:.1f}" y="{PAD - 6}">now</text>')
    for t in (t0, t1):
        day = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")
        anchor = "start" if t == t0 else "end"
        x = float(PAD if t == t0 else WIDTH - PAD)
        parts.append(f'<text class="label" x="{x}" y="{HEIGHT - 12}" text-anchor="{anchor}">{escape(day)}</text>')
    if forgotten_at is not None and t0 <= forgotten_at.timestamp() <= t1:
        x = _x(forgotten_at.timestamp(), t0, t1)
        parts.append(f'<circle class="crossing" cx="{x:.1f}" cy="{_y(threshold):.1f}" r="4">'
                     f'<title>forgotten {escape(forgotten_at.date().isoformat())}</title></circle>')
    parts.append("</svg>")
    return Markup("".join(parts))


def histogram(counts: Sequence[int], *, label: str) -> Markup:
    """Records per fidelity tenth, [0, 0.1) first, as small bars."""
    width, height, bar = 200, 48, 20
    top = max(counts) if counts and max(counts) > 0 else 1
    parts = [f'<svg class="histogram" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">']
    for i, count in enumerate(counts):
        h = (height - 8) * count / top
        parts.append(f'<rect x="{i * bar}" y="{height - 8 - h:.1f}" width="{bar - 2}" height="{h:.1f}">'
                     f'<title>{i / 10:.1f}-{(i + 1) / 10:.1f}: {count}</title></rect>')
    parts.append(f'<line class="axis" x1="0" y1="{height - 7}" x2="{width}" y2="{height - 7}"/></svg>')
    return Markup("".join(parts))


def activation_path(path: Sequence[object]) -> Markup:
    """The records spreading activation went through to reach a hit (the path ends at the hit),
    as a chain of linked nodes."""
    nodes = [str(node) for node in path]
    step, radius, height = 96, 7, 40
    width = step * (len(nodes) - 1) + 2 * PAD
    parts = [f'<svg class="trace" viewBox="0 0 {width} {height}" role="img" aria-label="activation path" '
             f'xmlns="http://www.w3.org/2000/svg">']
    for i in range(len(nodes) - 1):
        parts.append(f'<line class="edge" x1="{PAD + i * step + radius}" y1="14" x2="{PAD + (i + 1) * step - radius}" '
                     f'y2="14"/>')
    for i, node in enumerate(nodes):
        x, css = PAD + i * step, "hit" if i == len(nodes) - 1 else "node"
        parts.append(f'<a href="/ui/record/{escape(node)}"><circle class="{css}" cx="{x}" cy="14" r="{radius}">'
                     f'<title>{escape(node)}</title></circle>'
                     f'<text class="label" x="{x}" y="36" text-anchor="middle">…{escape(node[-6:])}</text></a>')
    parts.append("</svg>")
    return Markup("".join(parts))


def neighbourhood(center: str, nodes: Sequence[tuple[str, str]], edges: Sequence[tuple[str, str, str]]) -> Markup:
    """The association graph around `center`: its direct neighbours on an inner ring, the ones
    beyond on an outer ring, each node a link to its record. `nodes` are (id, label), `edges`
    (source, target, type)."""
    size, rings = 360, (0.0, 95.0, 160.0)
    linked: dict[str, set[str]] = {}
    for source, target, _ in edges:
        linked.setdefault(source, set()).add(target)
        linked.setdefault(target, set()).add(source)
    depth = {center: 0}
    frontier = [center]
    while frontier:  # breadth first, both directions: how far each node is from the centre
        reached = []
        for node in frontier:
            for other in sorted(linked.get(node, ())):
                if other not in depth:
                    depth[other] = depth[node] + 1
                    reached.append(other)
        frontier = reached
    placed: dict[str, tuple[float, float]] = {}
    for level in (0, 1, 2):
        ring = [node for node, _ in nodes if min(depth.get(node, 2), 2) == level]
        for k, node in enumerate(ring):
            angle = 2 * math.pi * k / max(len(ring), 1) + level * 0.35
            placed[node] = (size / 2 + rings[level] * math.cos(angle), size / 2 + rings[level] * math.sin(angle))
    parts = [f'<svg class="graph" id="neighbourhood" viewBox="0 0 {size} {size}" role="img" '
             f'aria-label="associations around this record" xmlns="http://www.w3.org/2000/svg">']
    for source, target, kind in edges:
        if source in placed and target in placed:
            (x1, y1), (x2, y2) = placed[source], placed[target]
            parts.append(f'<line class="edge" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}">'
                         f'<title>{escape(kind)}</title></line>')
    for node, label in nodes:
        if node not in placed:
            continue
        x, y = placed[node]
        css = "hit" if node == center else "node"
        parts.append(f'<a href="/ui/record/{escape(node)}"><circle class="{css}" cx="{x:.1f}" cy="{y:.1f}" r="8">'
                     f'<title>{escape(label)}</title></circle>'
                     f'<text class="label" x="{x:.1f}" y="{y + 20:.1f}" text-anchor="middle">'
                     f'{escape(label[:18])}</text></a>')
    parts.append("</svg>")
    return Markup("".join(parts))
