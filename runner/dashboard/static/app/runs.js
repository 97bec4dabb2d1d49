// The runs table: every run of the results directory, live; filter, sort, pick runs to compare.

import { useMemo, useRef, useState } from "preact/hooks";
import {
  html, LiveBadge, metricName, num, quality, runHref, seconds, StateBadge, useStream, when,
} from "./lib.js";

const COLUMNS = [
  { key: "state", label: "state", value: (r) => r.state },
  { key: "run_id", label: "run", value: (r) => r.run_id },
  { key: "benchmark", label: "benchmark", value: (r) => r.benchmark || "" },
  { key: "division", label: "division", value: (r) => r.division || "" },
  { key: "workers", label: "workers", value: (r) => r.workers ?? -1 },
  { key: "backend", label: "where", value: (r) => r.stack || r.backend || "" },
  { key: "value", label: "quality / target", value: (r) => r.value ?? -Infinity },
  { key: "time_to_target_s", label: "time to target", value: (r) => r.time_to_target_s ?? Infinity },
  { key: "throughput", label: "samples/s", value: (r) => r.throughput ?? -1 },
  { key: "created_at", label: "started", value: (r) => r.created_at || "" },
];

// The configuration keys a page can show, filter and group by (the server's row.keys: every
// --set key, workers, link, division, policy, and a plugin where the manifest names one).
// Shown by default beside the fixed columns: the ones the issue readers looked for first (a
// plugin's only where some run used one).
const DEFAULT_KEYS = ["strategy", "link", "policy", "plugin"];

// The table's first message leaves out of each row the keys every run shares (sent once, in
// `keys`; runner/dashboard/shared.py): they are put back here, so every key still filters,
// groups and shows as a column. A row sent alone later carries all of its own.
function withShared(row, shared) {
  return row.keys_shared ? { ...row, keys: { ...shared, ...row.keys } } : row;
}

// A filter: words (each must appear somewhere in the run's row or configuration), and
// key=value terms (that key's value contains the value: `policy=batch`, `link=25mbit`).
export function matches(row, text) {
  if (!text) return true;
  const keys = row.keys || {};
  const haystack = [row.run_id, row.benchmark, row.division, row.state, row.backend, row.stack,
    row.strategy, row.metric, row.reason, ...Object.values(keys)].join(" ").toLowerCase();
  return text.toLowerCase().split(/\s+/).filter(Boolean).every((term) => {
    const at = term.indexOf("=");
    if (at <= 0) return haystack.includes(term);
    const key = term.slice(0, at);
    const value = Object.entries(keys).find(([k]) => k.toLowerCase() === key);
    return value !== undefined && value[1].toLowerCase().includes(term.slice(at + 1));
  });
}

function keyColumn(key) {
  return { key: `keys.${key}`, label: key, config: key, value: (r) => (r.keys || {})[key] ?? "" };
}

// A key's cell; a plugin's names the hash of its source on hover (two builds of one version).
function KeyCell({ column, row }) {
  const hashes = column.config === "plugin" ? (row.plugins || []).map((p) => `${p.label}: sha256 ${p.source_sha256.slice(0, 12)}`) : [];
  return html`<td class="key" data-key=${column.config} title=${hashes.join("\n") || undefined}>${column.value(row) || "–"}</td>`;
}

function Row({ row, selected, toggle, extra }) {
  const late = row.reached === false && row.state === "SUCCEEDED";
  return html`<tr class=${`run-row ${row.state === "DAMAGED" ? "damaged" : ""}`} data-run=${row.run_id}>
    <td><input type="checkbox" checked=${selected} onChange=${() => toggle(row.run_id)}
      aria-label=${`select ${row.run_id}`} /></td>
    <td><${StateBadge} state=${row.state} /></td>
    <td class="mono"><a href=${runHref(row.run_id)}>${row.run_id}</a>
      ${row.damaged.map((p) => html`<div class="why">${p.file}: ${p.problem}</div>`)}
      ${row.reason && row.state !== "SUCCEEDED" ? html`<div class="why">${row.reason}</div>` : ""}
      ${row.notes.map((n) => html`<div class="note">${n}</div>`)}
    </td>
    <td>${row.benchmark || "–"}</td>
    <td>${row.division || "–"}</td>
    <td class="num">${row.workers ?? "–"}</td>
    <td>${row.stack ? `stack ${row.stack}` : row.backend || "–"}</td>
    <td class="num" title=${metricName(row.metric)}>${quality(row)}${row.state === "RUNNING" && row.epoch ? html` <span class="muted">(epoch ${row.epoch})</span>` : ""}</td>
    <td class="num">${row.reached ? seconds(row.time_to_target_s)
      : typeof row.target_met_s === "number" ? html`<span class="muted" title="the target was met, but the run did not succeed: no result">${seconds(row.target_met_s)} (${(row.state || "").toLowerCase()})</span>`
      : html`<span class=${late ? "miss" : "muted"}>${late ? "not reached" : "–"}</span>`}</td>
    <td class="num">${num(row.throughput, 0)}</td>
    <td>${when(row.created_at)}</td>
    ${extra.map((c) => html`<${KeyCell} column=${c} row=${row} />`)}
  </tr>`;
}

export function RunsPage() {
  const [rows, setRows] = useState(null);
  const [text, setText] = useState("");
  const [state, setState] = useState("");
  const [benchmark, setBenchmark] = useState("");
  const [sort, setSort] = useState({ key: "created_at", descending: true });
  const [selected, setSelected] = useState([]);
  const [shownKeys, setShownKeys] = useState(DEFAULT_KEYS);
  const [group, setGroup] = useState("");
  const shared = useRef({});
  const status = useStream("/api/stream?table=1", {
    keys: (keys) => { shared.current = keys; },
    runs: (all) => setRows(Object.fromEntries(all.map((r) => [r.run_id, withShared(r, shared.current)]))),
    run: (row) => setRows((old) => ({ ...old, [row.run_id]: row })),
    gone: ({ run_id }) => setRows((old) => {
      const { [run_id]: _, ...rest } = old;
      return rest;
    }),
  });
  const all = useMemo(() => Object.values(rows || {}), [rows]);
  const allKeys = useMemo(() => [...new Set(all.flatMap((r) => Object.keys(r.keys || {})))].sort(), [all]);
  const extra = shownKeys.filter((k) => allKeys.includes(k)).map(keyColumn);
  const columns = [...COLUMNS, ...extra];
  const shown = useMemo(() => {
    const column = columns.find((c) => c.key === sort.key) || COLUMNS[COLUMNS.length - 1];
    const filtered = all.filter((r) => matches(r, text) && (!state || r.state === state)
      && (!benchmark || r.benchmark === benchmark));
    const ordered = filtered.sort((a, b) => {
      const x = column.value(a), y = column.value(b);
      return x < y ? -1 : x > y ? 1 : 0;
    });
    return sort.descending ? ordered.reverse() : ordered;
  }, [all, text, state, benchmark, sort, shownKeys]);
  // Grouped by a key's value: groups in order of the value, rows in the table's order.
  const groups = useMemo(() => {
    if (!group) return [["", shown]];
    const by = new Map();
    for (const r of shown) {
      const value = (r.keys || {})[group] ?? "–";
      if (!by.has(value)) by.set(value, []);
      by.get(value).push(r);
    }
    return [...by.entries()].sort(([a], [b]) => a.localeCompare(b, "en", { numeric: true }));
  }, [shown, group]);
  const toggle = (id) => setSelected((s) => (s.includes(id) ? s.filter((x) => x !== id) : [...s, id]));
  const states = [...new Set(all.map((r) => r.state))].sort();
  const benchmarks = [...new Set(all.map((r) => r.benchmark).filter(Boolean))].sort();
  const header = (c) => html`<th class="sortable" onClick=${() => setSort({ key: c.key,
    descending: sort.key === c.key ? !sort.descending : c.key === "created_at" })}>
    ${c.label}${sort.key === c.key ? (sort.descending ? " ▼" : " ▲") : ""}${c.config ? html` <button class="link remove" title=${`hide ${c.config}`}
      onClick=${(e) => { e.stopPropagation(); setShownKeys(shownKeys.filter((k) => k !== c.config)); }}>×</button>` : ""}</th>`;
  const picked = selected.filter((id) => rows && rows[id]);
  const row = (r) => html`<${Row} key=${r.run_id} row=${r} selected=${selected.includes(r.run_id)} toggle=${toggle} extra=${extra} />`;

  return html`<section>
    <div class="toolbar">
      <h1>Runs</h1><${LiveBadge} status=${status} />
      <input type="search" placeholder="filter: words, or key=value (policy=batch, link=25mbit)…"
        value=${text} onInput=${(e) => setText(e.target.value)} aria-label="filter runs" />
      <select value=${state} onChange=${(e) => setState(e.target.value)} aria-label="state">
        <option value="">every state</option>${states.map((s) => html`<option value=${s}>${s}</option>`)}
      </select>
      <select value=${benchmark} onChange=${(e) => setBenchmark(e.target.value)} aria-label="benchmark">
        <option value="">every benchmark</option>${benchmarks.map((b) => html`<option value=${b}>${b}</option>`)}
      </select>
      <select value="" onChange=${(e) => e.target.value && setShownKeys([...shownKeys, e.target.value])} aria-label="add a column">
        <option value="">add a column…</option>${allKeys.filter((k) => !shownKeys.includes(k)).map((k) => html`<option value=${k}>${k}</option>`)}
      </select>
      <select value=${group} onChange=${(e) => setGroup(e.target.value)} aria-label="group by">
        <option value="">no grouping</option>${allKeys.map((k) => html`<option value=${k}>group by ${k}</option>`)}
      </select>
      <a class=${`button ${picked.length >= 2 ? "" : "disabled"}`} id="compare"
        href=${picked.length >= 2 ? `#/compare/${picked.map(encodeURIComponent).join(",")}` : undefined}>
        compare ${picked.length || ""} selected</a>
    </div>
    ${rows === null ? html`<p class="muted">loading…</p>`
      : all.length === 0 ? html`<p class="muted">No runs in this results directory yet. Start one with <code>runner submit cnn-digits</code>; it appears here as it starts.</p>`
      : html`<table class="runs"><thead><tr><th></th>${columns.map(header)}</tr></thead>
        ${groups.map(([value, members]) => html`<tbody data-group=${group ? value : undefined}>
          ${group ? html`<tr class="group"><th colspan=${columns.length + 1}>${group} = ${value} <span class="muted">(${members.length} ${members.length === 1 ? "run" : "runs"})</span></th></tr>` : ""}
          ${members.map(row)}</tbody>`)}
      </table>
      <p class="muted">${shown.length} of ${all.length} runs</p>`}
  </section>`;
}
