// Shared pieces of the dashboard's pages: templates, fetching, the live stream, formatting.
// Everything from the server is shown as text (htm and Preact never parse it as HTML).

import { h } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import htm from "htm";

export const html = htm.bind(h);

export const FINISHED = ["SUCCEEDED", "FAILED", "CANCELLED"];

export async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
  return body;
}

// One JSON document, fetched again whenever `key` changes; [value, error].
export function useJSON(url, key) {
  const [state, setState] = useState([null, null]);
  useEffect(() => {
    let live = true;
    getJSON(url).then(
      (value) => live && setState([value, null]),
      (error) => live && setState([null, error.message]),
    );
    return () => { live = false; };
  }, [url, key]);
  return state;
}

// How long a stream the server refused (an HTTP error) waits before it asks again.
const REOPEN_MS = 5000;

// A server-sent event stream (/api/stream?...): `handlers` maps message names to functions of
// the parsed payload. The server starts every (re)connection with a snapshot, so nothing here
// keeps a cursor; `status` says whether the stream is up, for the page to show: "closed" when
// the server refused it (a 404: a run it names is gone, say, after a restart of the
// dashboard), for the page to ask why; it is opened again a while later.
export function useStream(url, handlers) {
  const latest = useRef(handlers);
  latest.current = handlers;
  const [status, setStatus] = useState("connecting");
  const [attempt, setAttempt] = useState(0);
  useEffect(() => {
    if (!url) return undefined;
    const source = new EventSource(url);
    let reopen = null;
    const names = ["table", "gone", "detail", "curves", "points", "log", "problem"];
    for (const name of names) {
      source.addEventListener(name, (message) => {
        const handler = latest.current[name];
        if (handler) handler(JSON.parse(message.data));
      });
    }
    source.onopen = () => setStatus("live");
    source.onerror = () => {
      // A dropped connection the browser retries by itself; an HTTP error it never retries.
      if (source.readyState !== EventSource.CLOSED) return setStatus("reconnecting");
      setStatus("closed");
      reopen = setTimeout(() => setAttempt((n) => n + 1), REOPEN_MS);
    };
    return () => {
      clearTimeout(reopen);
      source.close();
    };
  }, [url, attempt]);
  return status;
}

export function LiveBadge({ status }) {
  const text = { live: "live", connecting: "connecting…", reconnecting: "reconnecting…",
    closed: "not live" }[status];
  return html`<span class="live live-${status}" title="updates arrive as the files change">${text}</span>`;
}

export function StateBadge({ state }) {
  return html`<span class=${`state state-${(state || "UNKNOWN").toLowerCase()}`}>${state || "UNKNOWN"}</span>`;
}

export function num(value, digits = 2) {
  if (value === null || value === undefined || typeof value !== "number") return "–";
  return value.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}

export function seconds(value) {
  if (typeof value !== "number") return "–";
  if (value < 120) return `${num(value, 2)} s`;
  const m = Math.floor(value / 60);
  return m < 120 ? `${m} min ${Math.round(value % 60)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function percent(value) {
  return typeof value === "number" ? `${num(100 * value, 1)} %` : "–";
}

export function when(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString("en-GB", {
    year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
  });
}

export function bytes(size) {
  if (typeof size !== "number") return "";
  if (size < 1024) return `${size} B`;
  if (size < 1 << 20) return `${num(size / 1024, 1)} KiB`;
  return `${num(size / (1 << 20), 1)} MiB`;
}

export function metricName(metric) {
  return { top1_accuracy: "top-1 accuracy", bleu: "BLEU", perplexity: "perplexity" }[metric] || metric || "quality";
}

// The quality figure against its target: "0.9556 (target 0.95)".
export function quality(row) {
  if (typeof row.value !== "number") return "–";
  const digits = row.metric === "perplexity" || row.metric === "bleu" ? 2 : 4;
  return row.target == null ? num(row.value, digits) : `${num(row.value, digits)} / ${row.target}`;
}

export function runHref(runId) {
  return `#/run/${encodeURIComponent(runId)}`;
}

export function fileHref(runId, path, download = false) {
  const parts = path.split("/").map(encodeURIComponent).join("/");
  return `/api/runs/${encodeURIComponent(runId)}/files/${parts}${download ? "?download=1" : ""}`;
}

export function Problems({ problems }) {
  if (!problems || !problems.length) return null;
  return html`<ul class="problems">
    ${problems.map((p) => html`<li>${p.run_id ? html`<b>${p.run_id}</b> ` : ""}<code>${p.file || ""}</code> ${p.problem}</li>`)}
  </ul>`;
}

// A key/value table of a flat or nested object; `mark(key)` may return a class for a row.
export function KeyValues({ data, mark }) {
  if (!data || typeof data !== "object") return html`<p class="muted">none</p>`;
  const rows = Object.entries(data).sort(([a], [b]) => a.localeCompare(b));
  return html`<table class="kv"><tbody>
    ${rows.map(([key, value]) => html`<tr class=${mark ? mark(key) : ""}>
      <th>${key}</th><td>${typeof value === "object" && value !== null ? JSON.stringify(value) : String(value)}</td>
    </tr>`)}
  </tbody></table>`;
}

// Short names for run ids shown together: the words (between dashes) in which they differ,
// at most `chars` long and never two alike; the page shows the whole id on hover.
export function shortNames(ids, chars = 22) {
  const words = ids.map((id) => String(id).split("-"));
  const longest = Math.max(0, ...words.map((w) => w.length));
  const varying = [...Array(longest).keys()].filter((i) => new Set(words.map((w) => w[i])).size > 1);
  const names = words.map((w) => varying.map((i) => w[i]).filter((x) => x !== undefined).join("-") || w.join("-"));
  const cut = names.map((n) => (n.length <= chars ? n : `${n.slice(0, chars - 1)}…`));
  return new Set(cut).size === cut.length ? cut : cut.map((n, i) => `${i + 1}: ${n}`);
}

// Which configuration key a page groups its runs by: "" for the report's own series (what
// the runs vary in), else any key a run has (as `runner report --group-by KEY`).
export function GroupBy({ keys, group, setGroup, none }) {
  return html`<label class="group-by">series <select value=${group} onChange=${(e) => setGroup(e.target.value)} aria-label="group by">
    <option value="">${none}</option>${keys.map((k) => html`<option value=${k}>group by ${k}</option>`)}
  </select></label>`;
}

// Names for runs shown grouped by a key: the group's value, then as much of the run's short
// name (shortNames) as fits in `chars`; never two alike (the run's number where they would be).
export function groupedNames(ids, values, chars = 26) {
  const runs = shortNames(ids);
  const cut = (text, n) => (text.length <= n ? text : `${text.slice(0, n - 1)}…`);
  const names = ids.map((_, i) => {
    const value = cut(String(values[i]), 12);
    return `${value}: ${cut(runs[i], chars - value.length - 2)}`;
  });
  return new Set(names).size === names.length ? names : names.map((_, i) => `${cut(String(values[i]), 12)}: #${i + 1}`);
}

// Text that sorts as people read it: "2" before "10".
export function byValue(a, b) {
  return String(a).localeCompare(String(b), "en", { numeric: true });
}
