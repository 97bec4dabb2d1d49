// The runs table: every run of the results directory, live, a page at a time; filter, sort,
// group by any configuration key, pick runs to compare.

import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import {
  html, LiveBadge, metricName, num, quality, runHref, seconds, StateBadge, useJSON, useStream, when,
} from "./lib.js";

// The fixed columns; `key` is what /api/runs sorts by (runner/dashboard/paging.py's COLUMNS).
const COLUMNS = [
  { key: "state", label: "state" },
  { key: "run_id", label: "run" },
  { key: "benchmark", label: "benchmark" },
  { key: "division", label: "division" },
  { key: "workers", label: "workers" },
  { key: "backend", label: "where" },
  { key: "value", label: "quality / target" },
  { key: "time_to_target_s", label: "time to target" },
  { key: "throughput", label: "samples/s" },
  { key: "created_at", label: "started" },
];

// The configuration keys a page can show, filter and group by (the server's row.keys: every
// --set key, workers, link, division, policy, and a plugin where the manifest names one).
// Shown by default beside the fixed columns: the ones the issue readers looked for first (a
// plugin's only where some run used one).
const DEFAULT_KEYS = ["strategy", "link", "policy", "plugin"];

// A page's rows leave out the keys every row of the page shares (sent once, in `shared`;
// runner/dashboard/shared.py): they are put back here, so every key still shows as a column.
function withShared(row, shared) {
  return row.keys_shared ? { ...row, keys: { ...shared, ...row.keys } } : row;
}

// Rows asked for at a time: the first page, and each more as the table's end scrolls into view.
const PAGE_ROWS = 100;

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

// The table's rows come a page at a time from /api/runs, filtered, sorted and grouped on the
// server over every run (runner/dashboard/paging.py), so 10,000 runs are never sent whole.
// The stream says when the table changed; the page then asks again for the rows it shows.
function runsQuery({ text, state, benchmark, sort, group, limit }) {
  const params = new URLSearchParams({ sort: sort.key, order: sort.descending ? "desc" : "asc", limit: String(limit) });
  for (const [name, value] of [["q", text], ["state", state], ["benchmark", benchmark], ["group", group]]) {
    if (value) params.set(name, value);
  }
  return `/api/runs?${params}`;
}

// Calls `more` when the element comes into view (the table's end, scrolled to).
function useWhenSeen(more) {
  const sentinel = useRef(null);
  const latest = useRef(more);
  latest.current = more;
  useEffect(() => {
    if (!sentinel.current) return undefined;
    const observer = new IntersectionObserver((entries) => entries.some((e) => e.isIntersecting) && latest.current());
    observer.observe(sentinel.current);
    return () => observer.disconnect();
  });
  return sentinel;
}

export function RunsPage() {
  const [text, setText] = useState("");
  const [state, setState] = useState("");
  const [benchmark, setBenchmark] = useState("");
  const [sort, setSort] = useState({ key: "created_at", descending: true });
  const [selected, setSelected] = useState([]);
  const [shownKeys, setShownKeys] = useState(DEFAULT_KEYS);
  const [group, setGroup] = useState("");
  const [limit, setLimit] = useState(PAGE_ROWS);
  const [version, setVersion] = useState(0);
  const status = useStream("/api/stream?table=1", { table: (t) => setVersion(t.version) });
  const [page, error] = useJSON(runsQuery({ text, state, benchmark, sort, group, limit }), version);
  const last = useRef(null);
  if (page) last.current = page; // the rows shown stay while the next answer loads
  const shown = page || last.current;
  // A new filter, sort or grouping starts again at the first page.
  const restart = (set) => (value) => { set(value); setLimit(PAGE_ROWS); };
  const rows = useMemo(() => (shown ? shown.rows.map((r) => withShared(r, shown.shared)) : []), [shown]);
  const allKeys = shown ? shown.keys : [];
  const extra = shownKeys.filter((k) => allKeys.includes(k)).map(keyColumn);
  const columns = [...COLUMNS, ...extra];
  // Grouped by a key's value: the server sends the rows group by group, and every group's count.
  const groups = useMemo(() => {
    if (!group) return [["", rows]];
    const by = new Map();
    for (const r of rows) {
      const value = (r.keys || {})[group] ?? "–";
      if (!by.has(value)) by.set(value, []);
      by.get(value).push(r);
    }
    return [...by.entries()];
  }, [rows, group]);
  const more = shown && rows.length < shown.matched;
  // One page more at a time: not again before the answer for this limit has come.
  const sentinel = useWhenSeen(() => more && rows.length >= limit && setLimit(limit + PAGE_ROWS));
  const toggle = (id) => setSelected((s) => (s.includes(id) ? s.filter((x) => x !== id) : [...s, id]));
  const header = (c) => html`<th class="sortable" onClick=${() => restart(setSort)({ key: c.key,
    descending: sort.key === c.key ? !sort.descending : c.key === "created_at" })}>
    ${c.label}${sort.key === c.key ? (sort.descending ? " ▼" : " ▲") : ""}${c.config ? html` <button class="link remove" title=${`hide ${c.config}`}
      onClick=${(e) => { e.stopPropagation(); setShownKeys(shownKeys.filter((k) => k !== c.config)); }}>×</button>` : ""}</th>`;
  const row = (r) => html`<${Row} key=${r.run_id} row=${r} selected=${selected.includes(r.run_id)} toggle=${toggle} extra=${extra} />`;
  const count = (n) => `${n} ${n === 1 ? "run" : "runs"}`;

  return html`<section>
    <div class="toolbar">
      <h1>Runs</h1><${LiveBadge} status=${status} />
      <input type="search" placeholder="filter: words, or key=value (policy=batch, link=25mbit)…"
        value=${text} onInput=${(e) => restart(setText)(e.target.value)} aria-label="filter runs" />
      <select value=${state} onChange=${(e) => restart(setState)(e.target.value)} aria-label="state">
        <option value="">every state</option>${(shown ? shown.states : []).map((s) => html`<option value=${s}>${s}</option>`)}
      </select>
      <select value=${benchmark} onChange=${(e) => restart(setBenchmark)(e.target.value)} aria-label="benchmark">
        <option value="">every benchmark</option>${(shown ? shown.benchmarks : []).map((b) => html`<option value=${b}>${b}</option>`)}
      </select>
      <select value="" onChange=${(e) => e.target.value && setShownKeys([...shownKeys, e.target.value])} aria-label="add a column">
        <option value="">add a column…</option>${allKeys.filter((k) => !shownKeys.includes(k)).map((k) => html`<option value=${k}>${k}</option>`)}
      </select>
      <select value=${group} onChange=${(e) => restart(setGroup)(e.target.value)} aria-label="group by">
        <option value="">no grouping</option>${allKeys.map((k) => html`<option value=${k}>group by ${k}</option>`)}
      </select>
      <a class=${`button ${selected.length >= 2 ? "" : "disabled"}`} id="compare"
        href=${selected.length >= 2 ? `#/compare/${selected.map(encodeURIComponent).join(",")}` : undefined}>
        compare ${selected.length || ""} selected</a>
    </div>
    ${error ? html`<p class="alert">${error}</p>` : ""}
    ${!shown ? (error ? "" : html`<p class="muted">loading…</p>`)
      : shown.total === 0 ? html`<p class="muted">No runs in this results directory yet. Start one with <code>runner submit cnn-digits</code>; it appears here as it starts.</p>`
      : html`<table class="runs"><thead><tr><th></th>${columns.map(header)}</tr></thead>
        ${groups.map(([value, members]) => html`<tbody data-group=${group ? value : undefined}>
          ${group ? html`<tr class="group"><th colspan=${columns.length + 1}>${group} = ${value} <span class="muted">(${count(shown.groups[value] ?? members.length)})</span></th></tr>` : ""}
          ${members.map(row)}</tbody>`)}
      </table>
      <p class="muted" id="shown">${rows.length} shown of ${shown.matched} matching (${count(shown.total)} in all)
        ${more ? html` <button class="link" ref=${sentinel} onClick=${() => setLimit(limit + PAGE_ROWS)}>show more</button>` : ""}</p>`}
  </section>`;
}
