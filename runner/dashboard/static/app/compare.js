// Two or more runs side by side: curves overlaid (live), headline figures, and the
// configurations key by key with the keys that differ highlighted.

import { useMemo, useState } from "preact/hooks";
import { cellPhasesOption, Chart } from "./charts.js";
import { CurveCharts, emptyCurves, extend } from "./run.js";
import {
  html, LiveBadge, metricName, num, percent, Problems, quality, runHref, seconds, shortNames, StateBadge,
  useJSON, useStream,
} from "./lib.js";

function show(value) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : num(value, 4);
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

function figure(value, unit) {
  if (typeof value !== "number") return "–";
  if (unit === "s") return seconds(value);
  if (unit === "share") return percent(value);
  if (unit === "samples/s") return `${num(value, 0)} samples/s`;
  if (unit === "ms") return `${num(value, 2)} ms`;
  return show(value);
}

const GONE = "gone"; // a run's state here once its directory is removed

export function ComparePage({ runIds }) {
  const [curves, setCurves] = useState({});
  const [states, setStates] = useState({});
  const query = runIds.map((id) => `run=${encodeURIComponent(id)}`).join("&");
  const status = useStream(`/api/stream?${query}`, {
    detail: (d) => setStates((old) => (old[d.run_id] === d.state ? old : { ...old, [d.run_id]: d.state })),
    curves: (c) => setCurves((old) => ({ ...old, [c.run_id]: { ...emptyCurves(), ...c } })),
    points: (p) => setCurves((old) => ({ ...old, [p.run_id]: extend(old[p.run_id] || emptyCurves(), p) })),
    gone: ({ run_id }) => setStates((old) => ({ ...old, [run_id]: GONE })),
  });
  // The comparison's figures change when a run's state does (a run finishing writes its
  // summary); a run removed, or a stream refused (a run gone while the dashboard restarted),
  // asks again, and the server says which run is no longer there.
  const refused = status === "closed" ? "closed" : "";
  const [page, error] = useJSON(`/api/compare?${query}`, JSON.stringify(states) + refused);
  const [onlyDiffs, setOnlyDiffs] = useState(true);
  const names = useMemo(() => shortNames(runIds), [runIds]);
  const runs = useMemo(() => runIds.map((id, i) => ({ name: names[i], full: id, curves: curves[id] || emptyCurves() })), [runIds, names, curves]);
  const phases = useMemo(() => page && cellPhasesOption(
    page.runs.map((r, i) => ({ label: shortNames(page.runs.map((x) => x.run_id))[i], phase_ms: page.phase_ms[i] })),
    "Step phases (ms per step, whole run)",
  ), [page]);
  if (error) return html`<p class="alert">${error}</p>`;
  if (!page) return html`<p class="muted">loading…</p>`;
  const first = page.runs[0] || {};
  const rows = page.config.filter((c) => c.differs || !onlyDiffs);
  const differing = page.config.filter((c) => c.differs).length;
  return html`<section>
    <div class="toolbar"><a href="#/">← runs</a><h1>Comparing ${runIds.length} runs</h1><${LiveBadge} status=${status} /></div>
    ${page.conflicts.length ? html`<div class="alert"><b>Not comparable in the closed division</b> (the report refuses these without --allow-mixed):
      <ul>${page.conflicts.map((c) => html`<li>${c}</li>`)}</ul></div>` : ""}
    ${Object.keys(page.environment).length ? html`<div class="notice"><b>Environments differ:</b>
      <ul>${Object.entries(page.environment).map(([k, v]) => html`<li>${k}: ${v.join(" vs ")}</li>`)}</ul></div>` : ""}
    <${Problems} problems=${page.problems} />
    <${CurveCharts} runs=${runs} target=${first.target} metric=${first.metric}>
      <${Chart} name="phases" option=${phases} />
    <//>
    <table class="compare">
      <thead><tr><th></th>${page.runs.map((r) => html`<th class="mono"><a href=${runHref(r.run_id)}>${r.run_id}</a></th>`)}</tr></thead>
      <tbody>
        <tr><th>state</th>${page.runs.map((r) => html`<td><${StateBadge} state=${r.state} /></td>`)}</tr>
        <tr><th>${metricName(first.metric)} / target</th>${page.runs.map((r) => html`<td class="num">${quality(r)}</td>`)}</tr>
        <tr><th>time to target</th>${page.runs.map((r) => {
          const met = ((curves[r.run_id] || {}).headline || {}).time_to_target_s; // live, or a run cancelled after it
          return html`<td class="num">${r.reached ? seconds(r.time_to_target_s) : typeof met === "number" ? `${seconds(met)} (met; ${(r.state || "").toLowerCase()})` : "–"}</td>`;
        })}</tr>
        ${page.summary.map((s) => html`<tr><th>${s.label}</th>${s.values.map((v) => html`<td class="num">${figure(v, s.unit)}</td>`)}</tr>`)}
        <tr class="section"><th colspan=${page.runs.length + 1}>
          configuration: ${differing} of ${page.config.length} keys differ
          <label class="inline"><input type="checkbox" checked=${onlyDiffs} onChange=${() => setOnlyDiffs(!onlyDiffs)} /> only the differences</label>
        </th></tr>
        ${rows.map((c) => html`<tr class=${c.differs ? "differs" : ""} data-key=${c.key}><th>${c.key}</th>${c.values.map((v) => html`<td class="mono">${show(v)}</td>`)}</tr>`)}
      </tbody>
    </table>
  </section>`;
}
