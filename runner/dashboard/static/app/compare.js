// Two or more runs side by side: curves overlaid (live), headline figures, and the
// configurations key by key with the keys that differ highlighted.

import { useMemo, useState } from "preact/hooks";
import { cellPhasesOption, Chart, PALETTE } from "./charts.js";
import { CurveCharts, emptyCurves, extend } from "./run.js";
import {
  byValue, GroupBy, groupedNames, html, LiveBadge, metricName, num, percent, Problems, quality, runHref,
  seconds, shortNames, StateBadge, useJSON, useStream,
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

const GONE = "gone";

// The runs in the order and with the names and colours the page shows them: as asked, each
// its own colour and short name; or grouped by a configuration key (the runs table's
// row.keys), group by group in the order of their values, a group's runs in its colour and
// named by its value first. `spans`: [value, how many runs] for the table's group header.
function grouped(runIds, page, group) {
  const keysOf = Object.fromEntries(((page && page.runs) || []).map((r) => [r.run_id, r.keys || {}]));
  const keys = [...new Set(Object.values(keysOf).flatMap((k) => Object.keys(k)))].sort();
  // The runs the comparison holds (one of other runs, still shown while the next loads, has
  // none of these).
  const asked = page ? runIds.filter((id) => id in keysOf) : runIds;
  if (!group) return { ids: asked, names: shortNames(asked), colors: asked.map(() => undefined), keys, spans: [] };
  const valueOf = (id) => keysOf[id][group] ?? "–";
  const ids = [...asked].sort((a, b) => byValue(valueOf(a), valueOf(b)));
  const values = ids.map(valueOf);
  const distinct = [...new Set(values)];
  const spans = distinct.map((v) => [v, values.filter((x) => x === v).length]);
  return {
    ids, names: groupedNames(ids, values), keys, spans,
    colors: values.map((v) => PALETTE[distinct.indexOf(v) % PALETTE.length]),
  };
} // a run's state here once its directory is removed

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
  const [group, setGroup] = useState("");
  const view = useMemo(() => grouped(runIds, page, group), [runIds, page, group]);
  const runs = useMemo(() => view.ids.map((id, i) => ({
    name: view.names[i], full: id, color: view.colors[i], curves: curves[id] || emptyCurves(),
  })), [view, curves]);
  const phases = useMemo(() => page && cellPhasesOption(
    view.ids.map((id, i) => ({ label: view.names[i], phase_ms: page.phase_ms[page.runs.findIndex((r) => r.run_id === id)] || {} })),
    "Step phases (ms per step, whole run)",
  ), [page, view]);
  if (error) return html`<p class="alert">${error}</p>`;
  if (!page) return html`<p class="muted">loading…</p>`;
  const first = page.runs[0] || {};
  const rows = page.config.filter((c) => c.differs || !onlyDiffs);
  const differing = page.config.filter((c) => c.differs).length;
  // The table's columns in the charts' order (grouped: group by group).
  const at = view.ids.map((id) => page.runs.findIndex((r) => r.run_id === id));
  const pick = (values) => at.map((i) => values[i]);
  const shownRuns = pick(page.runs);
  return html`<section>
    <div class="toolbar"><a href="#/">← runs</a><h1>Comparing ${runIds.length} runs</h1><${LiveBadge} status=${status} />
      <${GroupBy} keys=${view.keys} group=${group} setGroup=${setGroup} none="one per run" /></div>
    ${page.conflicts.length ? html`<div class="alert"><b>Not comparable in the closed division</b> (the report refuses these without --allow-mixed):
      <ul>${page.conflicts.map((c) => html`<li>${c}</li>`)}</ul></div>` : ""}
    ${Object.keys(page.environment).length ? html`<div class="notice"><b>Environments differ:</b>
      <ul>${Object.entries(page.environment).map(([k, v]) => html`<li>${k}: ${v.join(" vs ")}</li>`)}</ul></div>` : ""}
    <${Problems} problems=${page.problems} />
    <${CurveCharts} runs=${runs} target=${first.target} metric=${first.metric}>
      <${Chart} name="phases" option=${phases} />
    <//>
    <table class="compare">
      <thead>
        ${group ? html`<tr class="group"><th>${group}</th>${view.spans.map(([value, n]) => html`<th colspan=${n} data-group=${value}>${value}</th>`)}</tr>` : ""}
        <tr><th></th>${shownRuns.map((r, i) => html`<th class="mono" title=${r.run_id}><a href=${runHref(r.run_id)}>${view.names[i]}</a></th>`)}</tr>
      </thead>
      <tbody>
        <tr><th>state</th>${shownRuns.map((r) => html`<td><${StateBadge} state=${r.state} /></td>`)}</tr>
        <tr><th>${metricName(first.metric)} / target</th>${shownRuns.map((r) => html`<td class="num">${quality(r)}</td>`)}</tr>
        <tr><th>time to target</th>${shownRuns.map((r) => {
          const met = ((curves[r.run_id] || {}).headline || {}).time_to_target_s; // live, or a run cancelled after it
          return html`<td class="num">${r.reached ? seconds(r.time_to_target_s) : typeof met === "number" ? `${seconds(met)} (met; ${(r.state || "").toLowerCase()})` : "–"}</td>`;
        })}</tr>
        ${page.summary.map((s) => html`<tr><th>${s.label}</th>${pick(s.values).map((v) => html`<td class="num">${figure(v, s.unit)}</td>`)}</tr>`)}
        <tr class="section"><th colspan=${page.runs.length + 1}>
          configuration: ${differing} of ${page.config.length} keys differ
          <label class="inline"><input type="checkbox" checked=${onlyDiffs} onChange=${() => setOnlyDiffs(!onlyDiffs)} /> only the differences</label>
        </th></tr>
        ${rows.map((c) => html`<tr class=${c.differs ? "differs" : ""} data-key=${c.key}><th>${c.key}</th>${pick(c.values).map((v) => html`<td class="mono">${show(v)}</td>`)}</tr>`)}
      </tbody>
    </table>
  </section>`;
}
