// Studies: the list, and one study's report (its tables and figures) with outliers flagged.

import { useMemo, useRef, useState } from "preact/hooks";
import {
  Chart, cellPhasesOption, linesOption, PALETTE, speedupOption, timeToAccuracyOption,
} from "./charts.js";
import {
  GroupBy, html, LiveBadge, Problems, runHref, StateBadge, useJSON, useStream, when,
} from "./lib.js";

// Changes whenever a run of the results directory comes, goes or changes state (the table
// stream's `states`), so that a study being swept refreshes as its runs start and end, not
// at every epoch.
function useRunsVersion() {
  const [states, setStates] = useState(0);
  const status = useStream("/api/stream?table=1", { table: (t) => setStates(t.states) });
  return [states, status];
}

export function StudiesPage() {
  const [version, status] = useRunsVersion();
  const [studies, error] = useJSON("/api/studies", version);
  return html`<section>
    <div class="toolbar"><h1>Studies</h1><${LiveBadge} status=${status} /></div>
    ${error ? html`<p class="alert">${error}</p>` : !studies ? html`<p class="muted">loading…</p>`
      : !studies.length ? html`<p class="muted">No studies yet: <code>runner sweep cnn-digits --workers 1,2 --runs 3 --local</code> makes one.</p>`
      : html`<table class="runs"><thead><tr><th>study</th><th>benchmark</th><th>state</th><th>grid</th><th>runs</th><th>started</th></tr></thead>
        <tbody>${studies.map((s) => html`<tr>
          <td class="mono"><a href=${`#/study/${encodeURIComponent(s.study_id)}`}>${s.study_id}</a>
            ${s.damaged.map((p) => html`<div class="why">${p.file}: ${p.problem}</div>`)}</td>
          <td>${s.benchmark || "–"}</td><td>${s.state ? html`<${StateBadge} state=${s.damaged.length ? "DAMAGED" : s.state.toUpperCase()} />` : html`<${StateBadge} state="DAMAGED" />`}</td>
          <td>${s.workers ? `workers ${s.workers.join(", ")}` : ""}${s.grid ? Object.entries(s.grid).map(([k, v]) => ` × ${k} ${v.join(", ")}`).join("") : ""}${s.runs_per_cell ? ` × ${s.runs_per_cell} runs` : ""}</td>
          <td class="num">${s.submitted ?? "–"} / ${s.planned ?? "–"}</td><td>${when(s.created_at)}</td>
        </tr>`)}</tbody></table>`}
  </section>`;
}

function ReportTable({ table, flags }) {
  const runColumn = table.header.indexOf("run");
  return html`<h3>${table.title}</h3>
    <table class="report"><thead><tr>${table.header.map((h) => html`<th>${h}</th>`)}${runColumn >= 0 ? html`<th>flag</th>` : ""}</tr></thead>
    <tbody>${table.rows.map((row) => {
      const flag = runColumn >= 0 ? flags[row[runColumn]] : null;
      return html`<tr class=${flag && flag.flag ? "outlier" : ""} data-run=${runColumn >= 0 ? row[runColumn] : undefined}>
        ${row.map((cell, i) => html`<td class=${i === runColumn ? "mono" : ""}>${i === runColumn ? html`<a href=${runHref(cell)}>${cell}</a>` : cell}</td>`)}
        ${runColumn >= 0 ? html`<td>${flag ? [flag.flag && html`<span class="flag">${flag.flag}</span>`, flag.dropped && html`<span class="muted"> dropped by the MLPerf mean</span>`] : ""}</td>` : ""}
      </tr>`;
    })}</tbody></table>
    ${table.notes.length ? html`<ul class="notes">${table.notes.map((n) => html`<li>${n}</li>`)}</ul>` : ""}`;
}

function Figures({ report }) {
  const options = useMemo(() => {
    const bySeries = {};
    for (const cell of report.cells) (bySeries[cell.series] ||= []).push(cell);
    const several = Object.keys(bySeries).length > 1;
    const labelled = report.cells.map((c) => ({ label: several ? `${c.workers} workers\n${c.series}` : `${c.workers} workers`, phase_ms: c.phase_ms }));
    // Grouped by a key, a series' runs share its colour (the speedup chart's), so its runs
    // read as one; otherwise each run has its own.
    const color = (c) => (report.group_by ? PALETTE[report.series.indexOf(c.group) % PALETTE.length] : undefined);
    const line = (c, data) => ({ name: `${c.label} #${report.curves.indexOf(c) + 1}`, full: `${c.run_id} (${c.label})`, color: color(c), data });
    return {
      speedup: speedupOption(bySeries),
      tta: timeToAccuracyOption(bySeries),
      phases: cellPhasesOption(labelled, "Compute and communication per step (ms, mean over runs)"),
      curves: linesOption({
        title: "Quality of every run", yName: "quality", target: report.target,
        lines: report.curves.map((c) => line(c, c.series.eval_accuracy || [])),
      }),
      // As `runner report`'s adaptive figure: B_noise of the runs that measured it (a fixed
      // run has none, and no legend entry).
      noise: report.curves.some((c) => (c.series.b_noise || []).length) ? linesOption({
        title: "Gradient noise scale B_noise", yName: "samples", log: true,
        lines: report.curves.filter((c) => (c.series.b_noise || []).length)
          .map((c) => line(c, c.series.b_noise)),
      }) : null,
    };
  }, [report]);
  return html`<div class="charts">
    <${Chart} name="speedup" option=${options.speedup} />
    <${Chart} name="time_to_accuracy" option=${options.tta} />
    <${Chart} name="compute_communication" option=${options.phases} />
    <${Chart} name="curves" option=${options.curves} />
    ${options.noise ? html`<${Chart} name="b_noise" option=${options.noise} />` : ""}
  </div>`;
}

export function StudyPage({ studyId }) {
  const [version, status] = useRunsVersion();
  const [group, setGroup] = useState("");
  const query = group ? `?group=${encodeURIComponent(group)}` : "";
  const [page, error] = useJSON(`/api/studies/${encodeURIComponent(studyId)}${query}`, version);
  const last = useRef(null);
  if (page) last.current = page; // keep showing the last report while a refresh loads
  const shown = page || last.current;
  const flags = useMemo(() => {
    const out = {};
    for (const cell of (shown && shown.report ? shown.report.cells : [])) for (const r of cell.runs) out[r.run_id] = r;
    return out;
  }, [shown]);
  if (error) return html`<p class="alert">${error}</p>`;
  if (!shown) return html`<p class="muted">loading…</p>`;
  const { study, report } = shown;
  const flagged = Object.values(flags).filter((r) => r.flag);
  return html`<section>
    <div class="toolbar"><a href="#/studies">← studies</a><h1 class="mono">${study.study_id}</h1><${LiveBadge} status=${status} />
      <${GroupBy} keys=${shown.keys || []} group=${group} setGroup=${setGroup} none="what the runs vary in" /></div>
    <p class="muted">${study.benchmark} · ${study.where} · workers ${study.workers.join(", ")}${Object.entries(study.grid).map(([k, v]) => ` × ${k} ${v.join(", ")}`).join("")} × ${study.runs_per_cell} runs · ${study.state} · started ${when(study.created_at)}</p>
    ${shown.error ? html`<div class="alert">${shown.error}</div>` : ""}
    <${Problems} problems=${shown.problems} />
    ${report && report.conflicts.length ? html`<div class="alert"><b>Runs of different closed-division configurations</b>:<ul>${report.conflicts.map((c) => html`<li>${c}</li>`)}</ul></div>` : ""}
    ${flagged.length ? html`<div class="notice" id="outliers"><b>Outliers</b> (a time to target more than 1.5 times its cell's median or less than two thirds of it, in a cell of three or more converged runs; or a missed target):
      <ul>${flagged.map((r) => html`<li><a class="mono" href=${runHref(r.run_id)}>${r.run_id}</a>: ${r.flag}</li>`)}</ul></div>` : ""}
    ${report ? html`<${Figures} report=${report} />${report.tables.map((t) => html`<${ReportTable} table=${t} flags=${flags} />`)}` : ""}
  </section>`;
}
