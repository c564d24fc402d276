"""The demo's report: `report.html`, one self-contained page (inline SVG plots, inline CSS, no scripts, nothing
fetched), and the comparison table the terminal prints.

Plots, each on the run's simulated clock (seconds from the start):
- `kv`: KV-cache usage per pool for every arm, the fullest instance (solid) and the pool's mean (dotted), the
  0.75 trigger, OOMs (red x) and failovers (orange triangles); on `predictive`, the band of the forecasts the
  pipeline published, drawn at the time each one was about (issued + horizon), so the band can be read against
  what then happened;
- `traffic`: the offered request rate and the long-context share of what was routed;
- `p99`: urgent P99 latency per 30 s, every arm on one log axis;
- `actions`: every arm's actions and control-loop decisions on one timeline, listed below it with their reasons.
"""

from __future__ import annotations

import html
import io
from datetime import UTC, datetime

import numpy as np

from infercast.simulator.demo.run import DemoResult, describe_event

ARM_COLOURS = {
    "none": "#888888",
    "basic": "#9467bd",
    "reactive": "#1f77b4",
    "scheduled": "#ff7f0e",
    "last-value": "#8c564b",
    "predictive": "#2ca02c",
    "perfect-forecast": "#d62728",
    "causal": "#17becf",
    "hindsight": "#e377c2",
}
POOL_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MAX_LISTED_EVENTS = 60  # per arm, in the report's list (the rest are counted)


def fmt_cell(v, nd: int = 0) -> str:
    """A table cell (the demo's and bench/twin.py's): thousands separators, `nd` decimals, "-" for nothing."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        return f"{v:,.{nd}f}"
    return str(v)


def fmt_recovery(s: dict) -> str:
    """Recovery seconds, marked "(never)" when the run ended before the fleet recovered."""
    return fmt_cell(s["recovery_seconds"]) + ("" if s["recovered"] else " (never)")


def table_rows(arms: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """The comparison table (the terminal's, the report's and the README's) of `summary.json`'s "arms"."""
    head = ["arm", "OOM", "urgent P99 ms (pre-surge)", "urgent goodput req/s", "goodput req/s",
            "served / rejected / failed", "recovery s", "memory eff.", "alert lead s", "actions"]  # fmt: skip
    rows = []
    for name, s in arms.items():
        rows.append(
            [
                name + (" (live)" if s.get("alert_source") == "alertmanager" else ""),
                fmt_cell(s["oom_events"]),
                f"{fmt_cell(s['p99_latency_ms'])} ({fmt_cell(s['p99_latency_ms_pre'])})",
                fmt_cell(s.get("urgent_goodput_rps"), 1),
                fmt_cell(s["goodput_rps"], 1),
                f"{fmt_cell(s['served'])} / {fmt_cell(s['rejected'])} / {fmt_cell(s['failed'])}",
                fmt_recovery(s),
                fmt_cell(s["memory_efficiency"], 2),
                fmt_cell(s["alert_lead_seconds"]) if s["alert_lead_seconds"] is not None else "never paged",
                fmt_cell(s["actions"]),
            ]
        )
    return head, rows


def live_note(summary: dict) -> str | None:
    """One paragraph on the arms run through real servers (None when every arm ran in memory)."""
    live = summary.get("live")
    if not live:
        return None
    page = live["page"]
    said = (
        f"{', '.join(live['arms'])} ran live through Prometheus {live['prometheus']} and Alertmanager "
        f"{live['alertmanager']} at {live['speed']:g}x ({fmt_cell(live['wall_seconds'])} s of wall time); its alert "
        "lead is read from the notification Alertmanager delivered"
    )
    if page.get("alertname"):
        said += (
            f": {page['alertname']} reached the demo's webhook ({page['receiver']}) at "
            f"{fmt_cell(page['delivered_sim_seconds'])} simulated s (fired at {fmt_cell(page['fired_sim_seconds'])}"
            f" s; the same forecasts evaluated in memory: {fmt_cell(live.get('page_computed_seconds'))} s)"
        )
    else:
        said += f": none arrived ({page['none_because']})"
    if live["behind_seconds"] > 15:
        said += f"; the twin fell behind the wall clock by up to {fmt_cell(live['behind_seconds'])} simulated s"
    return said + ". The other arms ran in memory, their pages computed from their own series."


def attribution(arms: dict[str, dict]) -> str:
    """One line: which part of the gain over `reactive` (urgent goodput, req/s) the calendar (`scheduled` -
    `reactive`), the decision (`causal` - `reactive`: the best plan acting at or after the onset, no foresight) and
    the forecast (`predictive` - `last-value`: the same loop, the same calendar, a naive forecast) each bring."""

    def diff(a: str, b: str) -> str:
        x, y = (arms.get(n, {}).get("urgent_goodput_rps") for n in (a, b))
        if x is not None and y is not None:
            return f"{x - y:+.1f} req/s"
        return "not measured (" + " and ".join(n for n, v in ((a, x), (b, y)) if v is None) + " not run)"

    return (
        f"Urgent goodput over reactive: the calendar brings {diff('scheduled', 'reactive')} (scheduled - reactive), "
        f"the decision {diff('causal', 'reactive')} (causal - reactive: the best plan acting at or after the onset), "
        f"the forecast {diff('predictive', 'last-value')} (predictive - last-value)."
    )


def text_table(result: DemoResult) -> str:
    head, rows = table_rows(result.summary()["arms"])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))  # noqa: E731
    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, rows)])


# --- plots --------------------------------------------------------------------------------------------------------
def _pyplot():
    """matplotlib's pyplot on the file-only backend, its own log quiet: its INFO line ("generated new fontManager")
    was a stray line in the demo's output between the arms' lines."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _svg(fig) -> str:
    plt = _pyplot()

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]  # drop the XML prologue: the SVG is inlined in HTML


def _mark_surge(ax, result: DemoResult) -> None:
    if result.surge_start_seconds is not None:
        ax.axvline(result.surge_start_seconds, color="#444", lw=0.8, ls="--")
    if result.avalanche_seconds is not None:
        ax.axvline(result.avalanche_seconds, color="#d62728", lw=0.8, ls=":")


def plot_kv(result: DemoResult) -> str:
    plt = _pyplot()
    arms = list(result.arms.values())
    fig, axes = plt.subplots(len(arms), 1, figsize=(12, 2.4 * len(arms)), sharex=True, squeeze=False)
    for ax, run in zip(axes[:, 0], arms, strict=True):
        ts = run.timeseries
        pools = [p for p in dict.fromkeys(ts["pool"]) if ts[ts.pool == p]["kv_usage_max"].fillna(0).max() > 0]
        for i, pool in enumerate(pools):
            c = POOL_COLOURS[i % len(POOL_COLOURS)]
            g = ts[ts.pool == pool]
            ax.plot(g["t"], g["kv_usage_max"], color=c, lw=1.1, label=f"{pool} fullest")
            ax.plot(g["t"], g["kv_usage"], color=c, lw=0.8, ls=":", label=f"{pool} mean")
            fc = run.forecasts
            if not fc.empty:
                f = (
                    fc[(fc["pool"] == pool) & (fc["aggregate"] == "max")]
                    .groupby("t")[["yhat_lower", "yhat_upper"]]
                    .max()
                )
                if len(f):
                    # light fill, with its upper edge drawn: the upper band is what the page compares with the trigger
                    at = f.index.to_numpy() + result.horizon_seconds
                    issued = f"{pool} band, issued {result.horizon_seconds / 60:g} min before"
                    ax.fill_between(at, f["yhat_lower"], f["yhat_upper"], color=c, alpha=0.12, lw=0, label=issued)
                    ax.plot(at, f["yhat_upper"], color=c, lw=0.7, ls="--", label=f"{pool} upper band")
        ax.axhline(result.trigger, color="#d62728", lw=0.8)
        for e in run.events:
            if e["event"] == "oom":
                ax.plot(e["t"], 1.02, "x", color="#d62728", ms=5, clip_on=False)
            elif e["event"] == "degradation":
                ax.plot(e["t"], 0.02, "^", color="#ff7f0e", ms=5)
        _mark_surge(ax, result)
        ax.set_ylim(0, 1.05)
        ax.set_xlim(0, float(ts["t"].max()))  # bands issued near the end are about times after it
        ax.set_ylabel("KV usage")
        ax.set_title(f"{run.name}: {run.summary['oom_events']} OOM", loc="left", fontsize=10)
        # beside the plot, never over the curves and bands
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0), frameon=False, borderaxespad=0)
    axes[-1, 0].set_xlabel("seconds (dashed: surge starts; dotted red: the unprotected fleet crosses the trigger)")
    fig.tight_layout()
    return _svg(fig)


def plot_traffic(result: DemoResult) -> str:
    plt = _pyplot()
    run = result.arms.get("none") or next(iter(result.arms.values()))
    ts = run.timeseries
    by_t = ts.groupby("t")
    offered = by_t["offered_rps"].first()
    long_rps = (ts["rps"] * ts["long_share"].fillna(0)).groupby(ts["t"]).sum()
    routed = by_t["rps"].sum()
    share = (long_rps / routed.replace(0, np.nan)).rolling(6, min_periods=1).mean()
    fig, ax = plt.subplots(figsize=(11, 2.6))
    ax.plot(offered.index, offered.rolling(6, min_periods=1).mean(), color="#1f77b4", lw=1.1)
    o = overload(result)
    if o is not None and o["capacity_rps"] > 0:  # the overload the first screen states, drawn
        ax.axhline(o["capacity_rps"], color="#2ca02c", lw=0.9, ls="--")
        ax.annotate(f"the most any arm served: {fmt_cell(o['capacity_rps'])} req/s", (0.01, o["capacity_rps"]),
                    xycoords=("axes fraction", "data"), xytext=(0, 3), textcoords="offset points", fontsize=8,
                    color="#2ca02c")  # fmt: skip
    ax.set_yscale("symlog", linthresh=100)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("offered req/s", color="#1f77b4")
    ax2 = ax.twinx()
    ax2.plot(share.index, share, color="#ff7f0e", lw=1.0)
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("long-context share (routed)", color="#ff7f0e")
    _mark_surge(ax, result)
    ax.set_xlabel("seconds (30 s moving average)")
    fig.tight_layout()
    return _svg(fig)


def plot_p99(result: DemoResult) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(11, 3.0))
    for name, run in result.arms.items():
        p = run.p99
        ax.plot(p["t"], p["p99_ms"] / 1000.0, color=ARM_COLOURS.get(name), lw=1.2, label=name)
    ax.set_yscale("log")
    ax.set_ylabel("urgent P99 (s)")
    _mark_surge(ax, result)
    ax.legend(fontsize=8, ncol=len(result.arms), loc="upper left", frameon=False)
    ax.set_xlabel("seconds (window end)")
    fig.tight_layout()
    return _svg(fig)


def _timeline_events(run) -> list[dict]:
    """Actions and decisions; an action the control loop applied is shown once, as its decision (with a reason)."""
    decided = {(e["t"], e["action"]) for e in run.events if e["event"] == "decision"}
    return [
        e
        for e in run.events
        if (e["event"] == "decision" or (e["event"] == "action" and (e["t"], e["action"]) not in decided))
        and describe_event(e)
    ]


def plot_actions(result: DemoResult) -> str:
    plt = _pyplot()
    names = list(result.arms)
    fig, ax = plt.subplots(figsize=(11, 0.5 + 0.45 * len(names)))
    kinds: dict[str, int] = {}
    markers = "osD^v<>ph*"
    for y, name in enumerate(names):
        for e in _timeline_events(result.arms[name]):
            kind = e.get("action", "action")
            k = kinds.setdefault(str(kind), len(kinds))
            face = "none" if e["event"] == "decision" and e.get("outcome") != "applied" else None
            ax.plot(e["t"], y, markers[k % len(markers)], color=POOL_COLOURS[k % len(POOL_COLOURS)], ms=6,
                    mfc=face)  # fmt: skip
        for e in result.arms[name].events:
            if e["event"] == "oom":
                ax.plot(e["t"], y + 0.25, "x", color="#d62728", ms=4)
    for kind, k in kinds.items():
        ax.plot([], [], markers[k % len(markers)], color=POOL_COLOURS[k % len(POOL_COLOURS)], label=kind)
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.6, len(names) - 0.3)
    _mark_surge(ax, result)
    ax.set_xlim(0, max(float(r.timeseries["t"].max()) for r in result.arms.values()))
    ax.legend(fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False)
    ax.set_xlabel("seconds (filled: applied; hollow: refused, rolled back or advisory; red x: OOM)")
    fig.tight_layout()
    return _svg(fig)


# --- the page -----------------------------------------------------------------------------------------------------
CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1150px;margin:24px auto;color:#222;
padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{padding:4px 9px;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child{text-align:left}th{background:#f6f6f6}.muted{color:#666}.plot svg{width:100%;height:auto}
.events td,.events th{text-align:left;font-size:12px}
.lead{font-size:15px;background:#f3f8f1;padding:8px 12px;border-left:4px solid #2ca02c}
"""


def _headline(result: DemoResult) -> str:
    arms = result.arms
    parts = []
    for name in ("none", "reactive", "scheduled", "predictive", "perfect-forecast", "causal", "hindsight"):
        if name in arms:
            s = arms[name].summary
            parts.append(
                f"<b>{name}</b>: {s['oom_events']} OOM, urgent P99 {fmt_cell(s['p99_latency_ms'])} ms, "
                f"goodput {fmt_cell(s['goodput_rps'], 1)} req/s"
            )
    lead = arms.get("predictive")
    lead_s = lead.summary.get("alert_lead_seconds") if lead else None
    page = (
        f" infercast's predictive page fired {fmt_cell(lead_s)} s before the unprotected fleet crossed "
        f"{result.trigger:.2f}."
        if lead_s is not None
        else ""
    )
    return "; ".join(parts) + "." + page


def _served_per_second(run, window: int = 6) -> float:
    """The most the arm's fleet served per second (every pool, `window` samples' moving average: 30 s)."""
    ts = run.timeseries
    if "served_rps" not in ts or ts.empty:
        return float("nan")
    served = ts.groupby("t")["served_rps"].sum().sort_index()
    return float(served.rolling(window, min_periods=1).mean().max())


def overload(result: DemoResult) -> dict | None:
    """How far the scenario's traffic is beyond the fleet: the peak offered rate (30 s average), the most any arm
    served (the fleet's capacity as the runs measured it) and each arm's share of the offered requests rejected.
    None without the figures (no arm, or no `offered_rps` series)."""
    if not result.arms:
        return None
    ref = result.arms.get("none") or next(iter(result.arms.values()))
    ts = ref.timeseries
    if "offered_rps" not in ts or ts.empty:
        return None
    offered = ts.groupby("t")["offered_rps"].first().sort_index()
    peak = float(offered.rolling(6, min_periods=1).mean().max())
    capacity = max(_served_per_second(r) for r in result.arms.values())
    rejected = {
        name: r.summary["rejected"] / r.summary["offered"]
        for name, r in result.arms.items()
        if r.summary.get("offered") and r.summary.get("rejected") is not None
    }
    return {"peak_offered_rps": peak, "capacity_rps": capacity, "ratio": peak / capacity if capacity > 0 else None,
            "rejected_share": rejected}  # fmt: skip


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _overload_html(result: DemoResult) -> str:
    o = overload(result)
    if o is None or o["ratio"] is None:
        return ""
    shares = sorted(o["rejected_share"].values())
    rejected = (
        f"{_pct(shares[0])}" if len(shares) == 1 or _pct(shares[0]) == _pct(shares[-1])
        else f"{_pct(shares[0])} to {_pct(shares[-1])}"
    )  # fmt: skip
    if o["ratio"] < 1.2:
        return (
            f"<p><b>Load.</b> The scenario offers up to {fmt_cell(o['peak_offered_rps'])} req/s (30 s average); the "
            f"fleet served up to {fmt_cell(o['capacity_rps'])} req/s under the best arm: it is not overloaded, and the "
            f"arms reject {rejected} of the requests offered.</p>"
        )
    return (
        f"<p><b>How overloaded the sale is.</b> It offers up to {fmt_cell(o['peak_offered_rps'])} req/s (30 s "
        f"average); the most any arm's fleet served was {fmt_cell(o['capacity_rps'])} req/s: the sale is "
        f"<b>{o['ratio']:.0f}x the fleet's capacity</b>. So every arm rejects most of what is offered ({rejected} "
        "of the requests over the run), and no control can change that: the arms differ in what the fleet serves "
        "well (urgent goodput, P99, OOMs, recovery), not in serving the sale.</p>"
    )


def _calendar_html(result: DemoResult) -> str:
    """What the calendar knew (the fleet file's events) and what the forecasts added to it: `scheduled` (the
    calendar alone) beside `predictive` (the calendar and the forecasts), and where the predictive page came from."""
    arms = result.arms
    if not result.events:
        return (
            "<p><b>What the calendar knew.</b> Nothing: the fleet file announces no event, so whatever the forecasts "
            "did, they did from the series alone.</p>"
        )
    said = []
    for e in result.events:
        rate = f" at {fmt_cell(e['expected_rps'])} req/s" if e.get("expected_rps") else ""
        said.append(
            f"<code>{html.escape(e['name'])}</code> from {fmt_cell(e['start'])} s to {fmt_cell(e['end'])} s{rate}"
        )
    text = f"<p><b>What the calendar knew.</b> The fleet file announces {'; '.join(said)} (<code>events:</code>)."
    sched, pred = arms.get("scheduled"), arms.get("predictive")
    if sched is not None:
        s = sched.summary
        text += (
            f" <code>scheduled</code> acts on that alone (a pre-scale sized from the announced peak, no forecast): "
            f"{fmt_cell(s['oom_events'])} OOM, urgent goodput {fmt_cell(s.get('urgent_goodput_rps'), 1)} req/s, "
            f"urgent P99 {fmt_cell(s['p99_latency_ms'])} ms."
        )
    if pred is not None:
        p = pred.summary
        text += "</p><p><b>What the forecast added.</b> "
        if sched is not None:
            s = sched.summary
            d_good = (p.get("urgent_goodput_rps") or 0) - (s.get("urgent_goodput_rps") or 0)
            text += (
                f"<code>predictive</code> (the calendar and the forecasts): {fmt_cell(p['oom_events'])} OOM, urgent "
                f"goodput {fmt_cell(p.get('urgent_goodput_rps'), 1)} req/s ({d_good:+.1f} on <code>scheduled</code>), "
                f"urgent P99 {fmt_cell(p['p99_latency_ms'])} ms."
            )
        else:
            text += (
                "<code>scheduled</code> did not run here (<code>--arms</code>), so what the calendar alone does is "
                "not shown beside it."
            )
        text += " " + _page_source(result, pred)
    return text + "</p>"


def _page_source(result: DemoResult, pred) -> str:
    """Where the predictive page's lead comes from: an announced event's ceiling, or the series.

    From `event_onset_seconds` into an announced event the KV upper band is the ceiling (predictors/calendar.py), and
    a forecast looks `horizon_seconds` ahead: the band reaches the ceiling as soon as the horizon reaches the
    event's onset, `horizon` before it.  A page from then to a couple of minutes after the onset (the rule's
    persistence, a tick or two) is the calendar's doing."""
    if pred.page_seconds is None:
        return "Its forecast page never fired."
    t = pred.page_seconds
    lead = pred.summary.get("alert_lead_seconds")
    lead_s = (
        f", {fmt_cell(lead)} s before the unprotected fleet crossed {result.trigger:.2f}" if lead is not None else ""
    )
    page = f"Its page ({html.escape(pred.page_alert)}) fired at {fmt_cell(t)} s{lead_s}"
    for e in result.events:
        onset = e["start"] + result.event_onset_seconds
        if onset - result.horizon_seconds <= t <= onset + 120.0:
            when = f"{fmt_cell(e['start'] - t)} s before" if t < e["start"] else f"{fmt_cell(t - e['start'])} s after"
            return (
                f"{page}: {when} <code>{html.escape(e['name'])}</code>'s announced start. From "
                f"{fmt_cell(result.event_onset_seconds)} s into an announced event the KV forecast's upper band is "
                f"the ceiling by design (<code>predictor.event_onset_seconds</code>), and the forecasts look "
                f"{fmt_cell(result.horizon_seconds)} s ahead, so the band reached the ceiling as soon as the horizon "
                f"reached {fmt_cell(onset)} s. <b>That lead is the calendar's</b>, not the forecast models' "
                "(docs/control.md's <code>flash-sale-unannounced</code> runs the same sale with no event)."
            )
    return f"{page}, outside the announced events' reach: that lead comes from the series the forecasts read."


def _pool_note(result: DemoResult) -> str:
    """A note when the arms' fleets have different pools (the fixes split pools by context length, add standbys)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, run in result.arms.items():
        pools = tuple(dict.fromkeys(run.timeseries["pool"])) if "pool" in run.timeseries else ()
        groups.setdefault(pools, []).append(name)
    if len(groups) <= 1:
        return ""
    parts = [
        f"{', '.join(f'<code>{html.escape(a)}</code>' for a in names)}: {', '.join(html.escape(p) for p in pools)}"
        for pools, names in groups.items()
    ]
    return (
        "<p class=muted><b>The pool names change between arms</b>: the seeds' fixes that <code>reactive</code> and the "
        "arms built on it set up split the fleet file's pools by context length "
        "(<code>protections.context_pools</code>) and keep a cold standby, so a colour is a pool of that arm's own "
        f"fleet. Pools per arm: {'; '.join(parts)}.</p>"
    )


def render_html(result: DemoResult, meta: dict) -> str:
    head, rows = table_rows(result.summary()["arms"])
    table = "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
    table += "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows) + "</table>"
    pages = "".join(
        f"<li><b>{html.escape(n)}</b>: {html.escape(r.page_alert)} at "
        f"{fmt_cell(r.page_seconds)} s</li>" if r.page_seconds is not None else
        f"<li><b>{html.escape(n)}</b>: {html.escape(r.page_alert)} never fired</li>"
        for n, r in result.arms.items()
    )  # fmt: skip
    events = []
    for name, run in result.arms.items():
        ev = _timeline_events(run)
        for e in ev[:MAX_LISTED_EVENTS]:
            events.append(f"<tr><td>{e['t']:.0f}</td><td>{html.escape(name)}</td>"
                          f"<td>{html.escape(describe_event(e) or '')}</td></tr>")  # fmt: skip
        if len(ev) > MAX_LISTED_EVENTS:
            events.append(f"<tr><td></td><td>{name}</td><td class=muted>... {len(ev) - MAX_LISTED_EVENTS} more "
                          "(summary.json's directory has them all in ARM/events.json)</td></tr>")  # fmt: skip
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>infercast demo: {html.escape(result.scenario)}</title>
<style>{CSS}</style></head><body>
<h1>infercast demo: the {html.escape(result.scenario)} avalanche, under every control</h1>
<p class="muted">Scenario <code>{html.escape(result.scenario)}</code>, seed {result.seed}, the same arrivals for every
arm; {html.escape(meta.get("command", ""))}; {when}; {html.escape(meta.get("version", ""))}.</p>
<p class="lead">{_headline(result)}</p>
{_overload_html(result)}
{_calendar_html(result)}
<h2>Comparison</h2>
{table}
<p class="lead">{html.escape(attribution(result.summary()["arms"]))}</p>
<p class="muted">Urgent P99 is measured from the surge start to the end of the load test; the figure in brackets is
before the surge. Goodput counts requests served within their SLO. Alert lead: seconds between the arm's page and the
moment the unprotected fleet (<code>none</code>) first had an instance over {result.trigger:.2f}
({fmt_cell(result.avalanche_seconds)} s); negative is after it.</p>
<ul>{pages}</ul>
{f"<p>{html.escape(note)}</p>" if (note := live_note(result.summary())) else ""}
<h2>KV-cache usage per pool</h2>
{_pool_note(result)}
<div class="plot" id="plot-kv">{plot_kv(result)}</div>
<h2>Traffic</h2>
<div class="plot" id="plot-traffic">{plot_traffic(result)}</div>
<h2>Urgent P99 latency</h2>
<div class="plot" id="plot-p99">{plot_p99(result)}</div>
<h2>What the controls did</h2>
<div class="plot" id="plot-actions">{plot_actions(result)}</div>
<table class="events"><tr><th>t (s)</th><th>arm</th><th>what and why</th></tr>{"".join(events)}</table>
<h2>How to read this</h2>
<p><b>none</b>: the fleet as the incident found it. <b>basic</b>: the gateway's token bucket alone. <b>reactive</b>: the
seeds' own fixes with no foresight (per-request memory admission, a quota lane for the flash-sale customer, pools split
by context length, a cold v3.5 standby, a failover headroom check, priority tiers, an HPA on current metrics).
<b>predictive</b>: reactive plus infercast's pipeline (exporter, store, LSTM and traffic forecasts, the actuator's
control loop with guardrails). <b>scheduled</b> and <b>last-value</b>: the same control loop told only the calendar,
or forecasting that tomorrow is today (with the calendar). <b>perfect-forecast</b>: the same control loop fed the true
future, an estimate of what better forecasts alone could add (not an upper bound: the policy is the same).
<b>causal</b>, where shown: the best plan found that acts at or after the surge's onset, what a controller that sees
the surge when it starts could reach{_plan_of(result, "causal")}. <b>hindsight</b>, where shown: the best plan of
standby floors and admission found knowing the run's whole future (best found, not a proven
bound){_hindsight_plan(result)}.
Details: docs/demo.md and docs/control.md.</p>
</body></html>
"""


def _hindsight_plan(result: DemoResult) -> str:
    return _plan_of(result, "hindsight")


def _plan_of(result: DemoResult, arm: str) -> str:
    run = result.arms.get(arm)
    if run is None:
        return ""
    plan, source = run.summary.get("plan_text"), run.summary.get("search")
    return html.escape(f" (here: {plan}; {source})") if plan else ""


def markdown_table(arms: dict[str, dict]) -> str:
    head, rows = table_rows(arms)
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| `" + r[0] + "` | " + " | ".join(r[1:]) + " |" for r in rows]
    return "\n".join(lines)


__all__ = ["attribution", "fmt_cell", "fmt_recovery", "markdown_table", "render_html", "table_rows", "text_table"]
