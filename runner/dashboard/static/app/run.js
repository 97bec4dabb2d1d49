// A run's page: state and why, live curves, each rank's log, config, manifest, summary, files.

import { useLayoutEffect, useMemo, useRef, useState } from "preact/hooks";
import { Chart, epochPhasesOption, linesOption } from "./charts.js";
import {
  bytes, fileHref, FINISHED, html, KeyValues, LiveBadge, metricName, num, percent, Problems,
  quality, seconds, StateBadge, useJSON, useStream, when,
} from "./lib.js";

const SERIES = ["train_loss", "eval_accuracy", "eval_loss", "throughput", "phases", "global_batch", "b_noise", "workers"];
const LOG_LIMIT = 1 << 20; // characters of a log kept on the page; older text is dropped

export function emptyCurves() {
  return {
    train_loss: [], eval_accuracy: [], eval_loss: [], throughput: [], phases: [],
    global_batch: [], b_noise: [], workers: [], progress: null,
  };
}

// Appends a `points` message to curves already shown.
export function extend(curves, points) {
  const next = { ...curves };
  for (const key of SERIES) if (points[key] && points[key].length) next[key] = [...curves[key], ...points[key]];
  if (points.progress) next.progress = points.progress;
  return next;
}

export function CurveCharts({ runs, target, metric, children }) {
  // runs: [{name, curves}] — one line per run (several on the comparison page).
  const options = useMemo(() => {
    const one = runs.length === 1;
    // One run: lines named by what they show; several: by run.
    const lines = (key, label) => runs.map((r) => ({ name: one ? label : r.name, data: r.curves[key] }));
    return {
      loss: linesOption({
        title: "Loss", yName: "loss", log: true,
        lines: one ? [{ name: "training", data: runs[0].curves.train_loss }, { name: "evaluation", data: runs[0].curves.eval_loss }]
          : lines("train_loss"),
      }),
      quality: linesOption({ title: `Quality: ${metricName(metric)}`, yName: metricName(metric), lines: lines("eval_accuracy", "evaluation"), target }),
      throughput: linesOption({
        title: "Throughput per epoch (training set / epoch wall time)", yName: "samples/s",
        lines: lines("throughput", "samples/s"),
      }),
      phases: one ? epochPhasesOption(runs[0].curves.phases) : null,
      // An adaptive run's knobs and monitors (none for a run without policies or monitors).
      adaptive: runs.some((r) => r.curves.global_batch.length || r.curves.b_noise.length) ? adaptiveOption(runs) : null,
      workers: runs.some((r) => r.curves.workers.length) ? linesOption({
        title: "Workers", yName: "workers", lines: lines("workers", "workers"), steps: "all",
      }) : null,
    };
  }, [runs, target, metric]);
  return html`<div class="charts">
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
function adaptiveOption(runs) {
  const one = runs.length === 1;
  const batch = runs.map((r) => ({ name: one ? "global batch" : `${r.name} batch`, data: r.curves.global_batch }));
  const noise = runs.map((r) => ({ name: one ? "B_noise" : `${r.name} B_noise`, data: r.curves.b_noise }));
  return linesOption({
    title: "Global batch and gradient noise scale B_noise", yName: "samples", log: true,
    lines: [...batch, ...noise], steps: batch.map((l) => l.name),
  });
}

function plural(count, word) {
  return `${count ?? "?"} ${word}${count === 1 ? "" : "s"}`;
}

function facts(run) {
  return [
    run.benchmark || "?", `${run.division || "?"} division`,
    `${plural(run.workers, "worker")} (${plural(run.nodes, "node")}, ${run.device || "?"})`,
    run.strategy, run.stack ? `stack ${run.stack}` : run.backend, `started ${when(run.created_at)}`,
    run.since && `${run.state.toLowerCase()} since ${when(run.since)}`,
  ].filter(Boolean);
}

function Header({ run, progress, showLog }) {
  const failed = ["FAILED", "CANCELLED", "DAMAGED"].includes(run.state);
  const rank = typeof run.failed_rank === "number" ? run.failed_rank : null;
  return html`<div class="run-header">
    <h1><${StateBadge} state=${run.state} /> <span class="mono">${run.run_id}</span></h1>
    <p class="muted">${facts(run).join(" · ")}</p>
    ${failed && run.reason ? html`<div class="alert" id="reason"><b>${run.state}</b>: ${run.reason}${rank !== null ? html` (see <button class="link" onClick=${() => showLog(`rank-${rank}.log`)}>rank ${rank}'s log</button>)` : ""}</div>` : ""}
    ${run.state === "SUCCEEDED" && run.reached === false ? html`<div class="alert">Target not reached: the run ended without meeting ${metricName(run.metric)} ${run.lower_is_better ? "≤" : "≥"} ${run.target}.</div>` : ""}
    <${Problems} problems=${run.damaged} />
    ${run.notes.map((n) => html`<div class="notice">${n}</div>`)}
    ${run.state === "RUNNING" && progress ? html`<p class="progress">epoch ${progress.epoch}${run.max_epochs ? ` of at most ${run.max_epochs}` : ""}${progress.step !== null ? `, step ${progress.step} of ${progress.steps}` : ""}</p>` : ""}
  </div>`;
}

function Figures({ run }) {
  const s = run.summary || {};
  const items = [
    [`${metricName(run.metric)} / target`, quality(run)],
    ["time to target", run.reached ? seconds(run.time_to_target_s) : "–"],
    ["run time", seconds(run.run_time_s)],
    ["init (outside the clock)", seconds(s.init_time_s)],
    ["throughput", run.throughput ? `${num(run.throughput, 0)} samples/s` : "–"],
    ["step time", typeof s.step_time_ms === "number" ? `${num(s.step_time_ms, 2)} ms` : "–"],
    ["communication share", percent(s.communication_share)],
  ];
  return html`<dl class="figures">${items.map(([k, v]) => html`<div><dt>${k}</dt><dd>${v}</dd></div>`)}</dl>`;
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
    <${Figures} run=${run} />
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
