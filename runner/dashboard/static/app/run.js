// A run's page: state and why, live curves, each rank's log, config, manifest, summary, files.

import { useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import { Chart, epochPhasesOption, linesOption, PALETTE } from "./charts.js";
import {
  bytes, fileHref, FINISHED, html, KeyValues, LiveBadge, metricName, num, percent, Problems,
  quality, seconds, StateBadge, useJSON, useStream, when,
} from "./lib.js";

const SERIES = ["train_loss", "eval_accuracy", "eval_loss", "throughput", "phases", "global_batch", "b_noise", "workers", "decisions", "clock"];
const LOG_LIMIT = 1 << 20; // characters of a log kept on the page; older text is dropped

export function emptyCurves() {
  return {
    train_loss: [], eval_accuracy: [], eval_loss: [], throughput: [], phases: [],
    global_batch: [], b_noise: [], workers: [], decisions: [], clock: [], progress: null, headline: null,
  };
}

// Appends a `points` message to curves already shown.
export function extend(curves, points) {
  const next = { ...curves };
  for (const key of SERIES) if (points[key] && points[key].length) next[key] = [...curves[key], ...points[key]];
  if (points.progress) next.progress = points.progress;
  if (points.headline) next.headline = points.headline;
  return next;
}

const X_AXES = { time: "seconds since run_start", epoch: "epoch", step: "optimizer step" };

// The x of a point at t seconds on the axis chosen: t itself, or the epoch or step the run's
// clock ([t, epoch, step] anchors from its events) puts there, linearly between anchors.
// Without a clock (a run whose events have no epochs yet) no point has an epoch or a step:
// null, and the series is empty on that axis rather than drawn at its seconds.
export function xMapper(clock, axis) {
  if (axis === "time") return (t) => t;
  if (!clock.length) return () => null;
  const column = axis === "epoch" ? 1 : 2;
  return (t) => {
    if (t <= clock[0][0]) return clock[0][column];
    let hi = clock.findIndex((c) => c[0] >= t);
    if (hi < 0) return clock[clock.length - 1][column]; // after the last anchor: its value
    const [a, b] = [clock[hi - 1], clock[hi]];
    const span = b[0] - a[0];
    return span > 0 ? a[column] + ((t - a[0]) / span) * (b[column] - a[column]) : b[column];
  };
}

// TensorBoard's smoothing: an exponential moving average of weight `weight`, debiased so
// that the first points are not pulled towards zero. 0 leaves the series as it is.
export function smooth(data, weight) {
  if (!weight) return data;
  let last = 0;
  return data.map(([x, v], i) => {
    last = weight * last + (1 - weight) * v;
    return [x, last / (1 - weight ** (i + 1))];
  });
}

function decisionText(d) {
  const change = d.old !== null || d.new !== null ? ` ${d.old ?? "?"} → ${d.new ?? "?"}` : "";
  return `${d.knob || "?"}${change}: ${d.reason || "no reason recorded"}${d.step !== null ? ` (step ${d.step}${d.policy ? `, ${d.policy}` : ""})` : ""}`;
}

// One marker per moment: decisions taken together (a batch and its LR) share their line.
function decisionMarks(decisions, x) {
  const byTime = new Map();
  for (const d of decisions) byTime.set(d.t, [...(byTime.get(d.t) || []), decisionText(d)]);
  return [...byTime.entries()].map(([t, texts]) => ({ x: x(t), text: texts.join("\n") }));
}

function ChartControls({ view, setView, decisions }) {
  return html`<div class="chart-controls">
    ${decisions ? html`<span class="decisions-key" data-decisions=${decisions}>dotted lines: ${decisions} decision${decisions === 1 ? "" : "s"} (hover one for its reason)</span>` : ""}
    <label>x axis <select data-control="x" value=${view.x} onChange=${(e) => setView({ ...view, x: e.target.value })}>
      ${Object.keys(X_AXES).map((k) => html`<option value=${k}>${k}</option>`)}</select></label>
    <label>smoothing <input type="range" data-control="smoothing" min="0" max="0.95" step="0.05" value=${view.smoothing}
      onInput=${(e) => setView({ ...view, smoothing: Number(e.target.value) })} /> ${view.smoothing.toFixed(2)}</label>
  </div>`;
}

export function CurveCharts({ runs, target, metric, children }) {
  // runs: [{name, full, color?, curves}] — one line per run (several on the comparison page).
  const [view, setView] = useState({ x: "time", smoothing: 0 });
  const options = useMemo(() => {
    const one = runs.length === 1;
    const xs = new Map(runs.map((r) => [r, xMapper(r.curves.clock, view.x)]));
    // A series on the axis chosen, smoothed unless it is a knob (a knob changes at once).
    const on = (r, key, knob = false) => {
      const x = xs.get(r);
      const data = r.curves[key].map(([t, v]) => [x(t), v]).filter(([at]) => at !== null);
      return knob ? data : smooth(data, view.smoothing);
    };
    // One run: lines named by what they show; several: by run.
    // Several runs: one without the series (a fixed run has no workers series) has no entry.
    // A run may carry its colour (a comparison grouped by a key: its group's).
    const color = (r) => (one ? undefined : r.color || PALETTE[runs.indexOf(r) % PALETTE.length]);
    const lines = (key, label, knob = false) => runs.filter((r) => one || r.curves[key].length)
      .map((r) => ({ name: one ? label : r.name, full: r.full, color: color(r), data: on(r, key, knob) }));
    const marks = one ? decisionMarks(runs[0].curves.decisions, xs.get(runs[0])).filter((m) => m.x !== null) : [];
    const common = { xName: X_AXES[view.x], marks };
    return {
      loss: linesOption({
        ...common, title: "Loss", yName: "loss", log: true,
        lines: one ? [{ name: "training", data: on(runs[0], "train_loss") }, { name: "evaluation", data: on(runs[0], "eval_loss") }]
          : lines("train_loss"),
      }),
      quality: linesOption({ ...common, title: `Quality: ${metricName(metric)}`, yName: metricName(metric), lines: lines("eval_accuracy", "evaluation"), target }),
      throughput: linesOption({
        ...common, title: "Throughput per epoch (training set / epoch wall time)", yName: "samples/s",
        lines: lines("throughput", "samples/s"),
      }),
      phases: one ? epochPhasesOption(runs[0].curves.phases) : null,
      // An adaptive run's knobs and monitors (none for a run without policies or monitors).
      adaptive: runs.some((r) => r.curves.global_batch.length || r.curves.b_noise.length) ? adaptiveOption(runs, on, common) : null,
      workers: runs.some((r) => r.curves.workers.length) ? linesOption({
        ...common, title: "Workers", yName: "workers", lines: lines("workers", "workers", true), steps: "all",
      }) : null,
    };
  }, [runs, target, metric, view]);
  const decided = runs.length === 1 ? new Set(runs[0].curves.decisions.map((d) => d.t)).size : 0;
  return html`<${ChartControls} view=${view} setView=${setView} decisions=${decided} />
  <div class="charts">
    <${Chart} name="loss" option=${options.loss} />
    <${Chart} name="quality" option=${options.quality} />
    <${Chart} name="throughput" option=${options.throughput} />
    ${options.phases ? html`<${Chart} name="phases" option=${options.phases} />` : ""}
    ${options.adaptive ? html`<${Chart} name="adaptive" option=${options.adaptive} />` : ""}
    ${options.workers ? html`<${Chart} name="workers" option=${options.workers} />` : ""}
    ${children}
  </div>`;
}

// The global batch (drawn as steps: it changes at once) beside the noise scale it follows.
// Runs without a series (a fixed run has no B_noise) have no legend entry.
function adaptiveOption(runs, on, common) {
  const one = runs.length === 1;
  const batch = runs.filter((r) => r.curves.global_batch.length)
    .map((r) => ({ name: one ? "global batch" : `${r.name} batch`, full: r.full, data: on(r, "global_batch", true) }));
  const noise = runs.filter((r) => r.curves.b_noise.length)
    .map((r) => ({ name: one ? "B_noise" : `${r.name} B_noise`, full: r.full, data: on(r, "b_noise") }));
  return linesOption({
    ...common, title: "Global batch and gradient noise scale B_noise", yName: "samples", log: true,
    lines: [...batch, ...noise], steps: batch.map((l) => l.name),
  });
}

function plural(count, word) {
  return `${count ?? "?"} ${word}${count === 1 ? "" : "s"}`;
}

function facts(run) {
  const policy = (run.config || {}).policy;
  return [
    run.benchmark || "?", `${run.division || "?"} division`,
    `${plural(run.workers, "worker")} (${plural(run.nodes, "node")}, ${run.device || "?"})`,
    run.strategy, `link ${run.link || "unshaped"}`,
    Array.isArray(policy) && policy.length ? `policy ${policy.join(",")}` : "fixed (no policy)",
    run.stack ? `stack ${run.stack}` : run.backend, `started ${when(run.created_at)}`,
    run.since && `${run.state.toLowerCase()} since ${when(run.since)}`,
  ].filter(Boolean);
}

function Header({ run, progress, showLog }) {
  const failed = ["FAILED", "CANCELLED", "DAMAGED"].includes(run.state);
  const rank = typeof run.failed_rank === "number" ? run.failed_rank : null;
  const plugins = (run.manifest || {}).plugins || [];  // code from outside stackbench it used
  return html`<div class="run-header">
    <h1><${StateBadge} state=${run.state} /> <span class="mono">${run.run_id}</span></h1>
    <p class="muted">${facts(run).join(" · ")}</p>
    ${plugins.length ? html`<p class="plugins">plugin code: ${plugins.map((p, i) => html`${i ? ", " : ""}<span class="mono" data-plugin=${p.name} title=${`sha256 ${p.source_sha256} (${p.origin})`}>${p.name}${p.version ? `@${p.version}` : ""}</span>`)}</p>` : ""}
    ${failed && run.reason ? html`<div class="alert" id="reason"><b>${run.state}</b>: ${run.reason}${rank !== null ? html` (see <button class="link" onClick=${() => showLog(`rank-${rank}.log`)}>rank ${rank}'s log</button>)` : ""}</div>` : ""}
    ${run.state === "SUCCEEDED" && run.reached === false ? html`<div class="alert">Target not reached: the run ended without meeting ${metricName(run.metric)} ${run.lower_is_better ? "≤" : "≥"} ${run.target}.</div>` : ""}
    <${Problems} problems=${run.damaged} />
    ${run.notes.map((n) => html`<div class="notice">${n}</div>`)}
    ${run.state === "RUNNING" && progress ? html`<p class="progress">epoch ${progress.epoch}${run.max_epochs ? ` of at most ${run.max_epochs}` : ""}${progress.step !== null ? `, step ${progress.step} of ${progress.steps}` : ""}</p>` : ""}
  </div>`;
}

// The headline tiles: the summary's figures once it exists; before that (and for a run that
// never writes one, cancelled or killed) the live ones, computed from the events as they
// arrive (runner/dashboard/headline.py): time to target the moment it is met, throughput and
// step time over the last epoch, communication's share of the epochs so far.
function Figures({ run, live }) {
  const s = run.summary || {};
  const final = typeof s.run_time_s === "number";
  const l = live || {};
  const from = final ? "whole run" : typeof l.epoch === "number" ? `live, epoch ${l.epoch}` : "live";
  const pick = (field) => (final ? s[field] : l[field]);
  const tta = run.reached ? run.time_to_target_s : l.time_to_target_s;
  const ttaNote = run.reached ? "" : typeof l.time_to_target_s === "number"
    ? (FINISHED.includes(run.state) ? ` (met, then ${run.state.toLowerCase()}: no result)` : " (met, live)") : "";
  const items = [
    ["quality", `${metricName(run.metric)} / target`, quality(run), null],
    ["time_to_target", "time to target", typeof tta === "number" ? `${seconds(tta)}${ttaNote}` : "–", tta],
    ["run_time", "run time", seconds(run.run_time_s), run.run_time_s],
    ["init_time", "init (outside the clock)", seconds(s.init_time_s), s.init_time_s],
    ["throughput", `throughput (${from})`, typeof pick("throughput_samples_per_s") === "number" ? `${num(pick("throughput_samples_per_s"), 0)} samples/s` : "–", pick("throughput_samples_per_s")],
    ["step_time", `step time (${from})`, typeof pick("step_time_ms") === "number" ? `${num(pick("step_time_ms"), 2)} ms` : "–", pick("step_time_ms")],
    ["communication_share", `communication share (${final ? "whole run" : "live"})`, percent(pick("communication_share")), pick("communication_share")],
  ];
  return html`<dl class="figures">${items.map(([id, k, v, raw]) => html`<div data-figure=${id} data-value=${typeof raw === "number" ? String(raw) : ""}><dt>${k}</dt><dd>${v}</dd></div>`)}</dl>`;
}

function Logs({ run, log, name, setName }) {
  const box = useRef(null);
  const following = useRef(true);
  // Follow the end of a growing log, unless the reader scrolled up to read.
  useLayoutEffect(() => {
    if (box.current && following.current) box.current.scrollTop = box.current.scrollHeight;
  }, [log]);
  const onScroll = () => {
    const b = box.current;
    following.current = b.scrollHeight - b.scrollTop - b.clientHeight < 24;
  };
  if (!run.logs.length) return html`<p class="muted">no logs yet</p>`;
  return html`<div id="log">
    <div class="tabs">${run.logs.map((n) => html`<button class=${n === name ? "tab on" : "tab"} onClick=${() => setName(n)}>${n}</button>`)}
      ${run.files.some((f) => f.kind === "file" && f.path === `logs/${name}`) ? html`<a class="tab-link" href=${fileHref(run.run_id, `logs/${name}`, true)}>download</a>` : ""}</div>
    <pre class="log" data-log=${name} ref=${box} onScroll=${onScroll}>${log || "(empty so far)"}</pre>
  </div>`;
}

// Why an entry that is not a servable file has no link (the server refuses all of these).
const UNLINKED = {
  link: "symbolic link: not followed",
  unnamed: "not served: its name is hidden or not plain letters, digits, '.', '_', '-'",
  large: "too large to serve",
  other: "not a file",
};

function Files({ run }) {
  return html`<table class="files"><tbody>${run.files.map((f) => html`<tr>
    <td class="mono">${f.kind === "file" ? html`<a href=${fileHref(run.run_id, f.path)} target="_blank" rel="noopener">${f.path}</a>` : f.path}</td>
    <td class="num">${f.kind === "file" ? bytes(f.size) : html`<span class="miss">${UNLINKED[f.kind] || UNLINKED.other}${typeof f.size === "number" ? ` (${bytes(f.size)})` : ""}</span>`}</td>
    <td>${f.kind === "file" ? html`<a href=${fileHref(run.run_id, f.path, true)}>download</a>` : ""}</td>
  </tr>`)}</tbody></table>`;
}

export function RunPage({ runId }) {
  const [run, setRun] = useState(null);
  const [gone, setGone] = useState(false);
  const [curves, setCurves] = useState(emptyCurves());
  const [problems, setProblems] = useState([]);
  const [logName, setLogName] = useState("rank-0.log");
  const [log, setLog] = useState("");
  const url = `/api/stream?run=${encodeURIComponent(runId)}&log=${encodeURIComponent(`${runId}/${logName}`)}`;
  const status = useStream(url, {
    detail: setRun,
    gone: () => setGone(true),
    curves: (c) => setCurves({ ...emptyCurves(), ...c }),
    points: (p) => setCurves((old) => extend(old, p)),
    problem: (p) => setProblems((old) => [...old.filter((o) => o.file !== p.file), p]),
    log: (m) => setLog((old) => {
      const text = m.reset ? m.text : old + m.text;
      return text.length > LOG_LIMIT ? text.slice(text.length - LOG_LIMIT) : text;
    }),
  });
  const runs = useMemo(() => [{ name: runId, curves }], [runId, curves]);
  const pickLog = (name) => {
    if (name === logName) return;
    setLog("");
    setLogName(name);
  };
  // A stream that cannot open says nothing; the JSON API says why (no such run, a link).
  const [, refused] = useJSON(`/api/runs/${encodeURIComponent(runId)}`, status);
  if (gone) return html`<p class="alert">Run ${runId} is no longer in the results directory.</p>`;
  // A stream refused after the run was shown (the dashboard restarted, and the run went
  // meanwhile): what the JSON API says now, never the last state as if it were current.
  if ((!run || status === "closed") && refused) return html`<p class="alert">${refused}</p>`;
  if (!run) return html`<p class="muted">loading ${runId}…</p>`;
  const overridden = new Set((run.overrides || []).map(([k]) => k));
  const open = new Set(run.open_keys || []);
  return html`<section>
    <div class="toolbar"><a href="#/">← runs</a><${LiveBadge} status=${status} /></div>
    <${Header} run=${run} progress=${curves.progress} showLog=${(name) => {
      pickLog(name);
      document.getElementById("log")?.scrollIntoView();
    }} />
    <${Figures} run=${run} live=${curves.headline} />
    <${Problems} problems=${problems} />
    <${CurveCharts} runs=${runs} target=${run.target} metric=${run.metric} />
    <h2>Logs</h2>
    <${Logs} run=${run} log=${log} name=${logName} setName=${pickLog} />
    <div class="columns">
      <div><h2>Resolved config</h2>
        <p class="muted">highlighted: set with --set${open.size ? "; open division: " + [...open].join(", ") : ""}</p>
        <${KeyValues} data=${run.config} mark=${(k) => (open.has(k) ? "open" : overridden.has(k) ? "set" : "")} /></div>
      <div><h2>Manifest</h2><${KeyValues} data=${run.manifest} />
        <h2>Summary</h2><${KeyValues} data=${run.summary} /></div>
    </div>
    <h2>Files</h2><${Files} run=${run} />
  </section>`;
}
