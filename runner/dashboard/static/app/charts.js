// Charts: one Preact component around an Apache ECharts instance, and the declarative options
// of each chart the dashboard shows. ECharts draws everything; nothing here draws.

import { useEffect, useRef } from "preact/hooks";
import { html } from "./lib.js";

const echarts = window.echarts; // echarts.common.min.js, loaded before the modules
const PHASE_ORDER = ["data", "forward", "backward", "optimizer", "communication"];
// The report's colours (runner/results/figures.py), so the two read alike.
const PHASE_COLORS = {
  data: "#bdbdbd", forward: "#6baed6", backward: "#3182bd", optimizer: "#9ecae1", communication: "#e6550d",
};

// A legend that wraps onto as many lines as its entries need, the plot below it: a scrolling
// legend paged its entries (1/2, 1/3) and drew its pager over them. Entries are measured as
// ECharts draws them (12px sans-serif, a 25 px icon, 5 px to the text, 10 px between).
const LEGEND_FONT = "12px sans-serif";
const LEGEND_LINE_PX = 22;
let measure = null;

function textWidth(text) {
  measure = measure || document.createElement("canvas").getContext("2d");
  measure.font = LEGEND_FONT;
  return measure.measureText(text).width;
}

function legendLines(option, width) {
  const entries = (option.series || []).map((s) => s.name).filter((n, i, all) => all.indexOf(n) === i);
  const format = option.legend.formatter || ((n) => n);
  let lines = 1;
  let used = 0;
  const room = width - 8 - 10; // the legend's right offset and its padding
  for (const name of entries) {
    const item = 25 + 5 + textWidth(format(name)) + 10;
    if (used > 0 && used + item > room) {
      lines += 1;
      used = 0;
    }
    used += item;
  }
  return entries.length ? lines : 0;
}

function fitted(option, width) {
  if (!option || !option.legend || !option.grid || !width) return option;
  const lines = legendLines(option, width);
  return { ...option, legend: { ...option.legend, type: "plain" },
    grid: { ...option.grid, top: 36 + LEGEND_LINE_PX * Math.max(1, lines) } };
}

// `name` labels the chart for tests and people alike (data-chart attribute).
export function Chart({ option, name }) {
  const box = useRef(null);
  const chart = useRef(null);
  const latest = useRef(option);
  latest.current = option;
  useEffect(() => {
    chart.current = echarts.init(box.current, null, { renderer: "canvas" });
    const observer = new ResizeObserver(() => {
      if (!chart.current || !box.current) return; // gone with its page
      chart.current.setOption(fitted(latest.current, box.current.clientWidth), { replaceMerge: ["series"] });
      chart.current.resize();
    });
    observer.observe(box.current);
    return () => {
      observer.disconnect();
      chart.current.dispose();
      chart.current = null;
    };
  }, []);
  useEffect(() => {
    // Merge, replacing the series: a live update keeps the zoom and the legend's choices.
    if (chart.current && box.current) {
      chart.current.setOption(fitted(option, box.current.clientWidth), { replaceMerge: ["series"] });
    }
  }, [option]);
  return html`<div class="chart" ref=${box} data-chart=${name}></div>`;
}

function compact(value) {
  if (typeof value !== "number") return "–";
  const magnitude = Math.abs(value);
  if (magnitude >= 1000) return value.toLocaleString("en-US", { maximumFractionDigits: 0 });
  return value.toPrecision(4).replace(/\.?0+$/, "");
}

// Tooltips drawn on the canvas ("richText"), not as HTML: the page's Content-Security-Policy
// refuses inline styles, and no text from a run directory is ever parsed as markup.
const TOOLTIP = { renderMode: "richText", valueFormatter: compact };

// A name from a run directory, as text: a richText tooltip reads `{style|text}` in it as
// markup (zrender's /\{([a-zA-Z0-9_]+)\|([^}]*)\}/), so a --set value of `{marker0|}` drew a
// marker and swallowed its braces. A zero-width space after the brace breaks the pattern and
// shows the same characters.
export function plain(name) {
  return String(name).replace(/\{(?=[A-Za-z0-9_]+\|)/g, "{\u200b");
}

// The axis tooltip, written here rather than by ECharts: its own richText tooltip wraps each
// series name in a `{style|name}` span, which the first `}` in the name ends, so `{a}b` showed
// as `{a` and `b}`, a brace moved. Here the names stand outside any span, as plain text, and
// only the colour markers ECharts hands over (`{markerN|}`) are markup.
function axisTooltip(params) {
  const rows = [].concat(params);
  if (!rows.length) return "";
  const head = rows[0].axisValueLabel ?? rows[0].name ?? "";
  const value = (p) => (Array.isArray(p.value) ? p.value[p.value.length - 1] : p.value);
  return [plain(head), ...rows.map((p) => `${p.marker}${plain(p.seriesName)}  ${compact(value(p))}`)]
    .join("\n");
}

// Colours told apart at a glance (ECharts' own palette has a pale yellow that vanishes on
// white); the report's figures use matplotlib's tab10, which this follows, less its olive.
export const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
  "#e377c2", "#7f7f7f", "#393b79"];
const LEGEND_CHARS = 26; // a legend entry's length; the whole name shows on hover

export function short(name, chars = LEGEND_CHARS) {
  const text = String(name);
  return text.length <= chars ? text : `${text.slice(0, chars - 1)}…`;
}

function base(title, yName, xName) {
  return {
    animation: false,
    color: PALETTE,
    title: { text: title, left: 0, top: 0, textStyle: { fontSize: 13, fontWeight: 600 } },
    tooltip: { ...TOOLTIP, trigger: "axis", formatter: axisTooltip },
    // Short entries, the full name on hover: a legend of full run ids was cut and paged.
    legend: { type: "plain", top: 22, left: 0, right: 8, formatter: (n) => plain(short(n)),
      tooltip: { show: true, ...TOOLTIP, formatter: (p) => plain(p.name) } },
    grid: { left: 64, right: 24, top: 58, bottom: 44 },
    // Labels that would overlap are left out, never drawn over each other.
    xAxis: { type: "value", name: xName, nameLocation: "middle", nameGap: 28, min: 0,
      axisLabel: { hideOverlap: true } },
    yAxis: { type: "value", name: yName, scale: true, nameLocation: "middle", nameGap: 46,
      axisLabel: { hideOverlap: true } },
    dataZoom: [{ type: "inside", filterMode: "none" }],
  };
}

// Vertical markers at decisions: [{x, text}], the text shown on hover (not a template:
// ECharts would read `{a}` in a reason as markup).
function decisionMarks(marks) {
  return marks.map((m) => ({
    xAxis: m.x,
    lineStyle: { type: "dotted", color: "#8c564b", width: 1.2 },
    label: { show: false, formatter: () => plain(m.text) },
    emphasis: { label: { show: true, position: "insideEndTop", formatter: () => plain(m.text) } },
  }));
}

// Lines against seconds since run_start: [{name, data: [[t, v], ...]}]. `target`: a dashed
// horizontal line at the target value. `steps`: "all", or the names of the lines drawn as
// steps (a value that changes at once, such as an adaptive run's global batch).
export function linesOption({
  title, yName, lines, target = null, log = false, steps = [], xName = "seconds since run_start",
  marks = [],
}) {
  const series = lines.map((line, i) => ({
    id: line.name,
    name: plain(line.name),
    type: "line",
    ...(steps === "all" || steps.includes(line.name) ? { step: "end" } : {}),
    data: line.data,
    showSymbol: line.data.length <= 60,
    // A line may carry its colour (a comparison's run keeps one colour on every chart).
    ...(line.color ? { color: line.color, itemStyle: { color: line.color } } : {}),
    symbolSize: 5,
    lineStyle: { width: 1.6 },
    ...(i === 0 && (target !== null || marks.length) ? {
      markLine: {
        symbol: "none", silent: false, lineStyle: { type: "dashed", color: "#333" },
        // A function, not a template: a template reads `{a}`, `{b}`... in the text.
        label: { formatter: () => plain(`target ${target}`), position: "insideEndTop" },
        data: [...(target !== null ? [{ yAxis: target }] : []), ...decisionMarks(marks)],
      },
    } : {}),
  }));
  const option = base(title, yName, xName);
  // A line's `full` name (a comparison's run id) on hovering its short legend entry.
  const full = Object.fromEntries(lines.filter((l) => l.full).map((l) => [plain(l.name), l.full]));
  option.legend = { ...option.legend, tooltip: { ...option.legend.tooltip, formatter: (p) => plain(full[p.name] || p.name) } };
  if (log) option.yAxis = { ...option.yAxis, type: "log", scale: false };
  return { ...option, series };
}

// The step phases of each epoch, stacked: [{epoch, data, forward, ...}] in seconds.
export function epochPhasesOption(phases) {
  const option = base("Step phases per epoch (s, mean over ranks)", "s", "epoch");
  return {
    ...option,
    tooltip: { ...TOOLTIP, trigger: "axis", axisPointer: { type: "shadow" }, formatter: axisTooltip },
    xAxis: { type: "category", name: "epoch", nameLocation: "middle", nameGap: 28,
      data: phases.map((p) => String(p.epoch)), axisLabel: { hideOverlap: true } },
    series: PHASE_ORDER.map((phase) => ({
      id: phase, name: phase, type: "bar", stack: "phases", barMaxWidth: 40,
      itemStyle: { color: PHASE_COLORS[phase] },
      data: phases.map((p) => p[phase]),
    })),
  };
}

// Time per step by phase, one bar per cell of a study or per run: [{label, phase_ms}].
export function cellPhasesOption(cells, title) {
  const option = epochPhasesOption([]);
  return {
    ...option,
    title: { ...option.title, text: title },
    // Every label that fits beside its neighbours (the others left out); the tooltip has
    // them all. Not cut to a width: a cut label of two lines drew its lines over each other.
    xAxis: { ...option.xAxis, name: "", data: cells.map((c) => plain(c.label)),
      axisLabel: { interval: 0, hideOverlap: true, lineHeight: 14 } },
    yAxis: { ...option.yAxis, name: "ms per step" },
    series: option.series.map((s) => ({ ...s, data: cells.map((c) => c.phase_ms[s.id] ?? 0) })),
  };
}

// Speedup of time to accuracy against workers, one line per series, and the ideal.
export function speedupOption(bySeries) {
  const workers = [...new Set(Object.values(bySeries).flat().map((c) => c.workers))].sort((a, b) => a - b);
  const option = base("Speedup of time to accuracy", "speedup", "workers");
  const series = Object.entries(bySeries).map(([name, cells]) => ({
    id: name, name: plain(name), type: "line", symbolSize: 8,
    data: cells.filter((c) => c.speedup !== null).map((c) => [c.workers, c.speedup]),
  }));
  if (workers.length) {
    series.push({
      id: "ideal", name: "ideal", type: "line", symbol: "none",
      lineStyle: { type: "dashed", color: "#333", width: 1 },
      data: workers.map((w) => [w, w / workers[0]]),
    });
  }
  return { ...option, xAxis: { ...option.xAxis, min: "dataMin", minInterval: 1 }, series };
}

// Time to accuracy against workers: the aggregate (MLPerf mean) as a line per series, every
// run as a point; outliers red, runs the MLPerf mean dropped hollow.
export function timeToAccuracyOption(bySeries) {
  const option = base("Time to accuracy per run (points) and aggregate (line)", "seconds", "workers");
  const series = [];
  for (const [name, cells] of Object.entries(bySeries)) {
    series.push({
      id: `${name} mean`, name: plain(name), type: "line", symbolSize: 9,
      data: cells.filter((c) => c.mean_s !== null).map((c) => [c.workers, c.mean_s]),
    });
    const points = cells.flatMap((c) => c.runs
      .filter((r) => r.time_to_target_s !== null)
      .map((r) => ({
        value: [c.workers, r.time_to_target_s],
        run: r.run_id,
        itemStyle: r.flag ? { color: "#d62728" } : r.dropped ? { color: "#fff", borderColor: "#555", borderWidth: 1.5 } : {},
        symbolSize: r.flag ? 11 : 7,
      })));
    series.push({ id: `${name} runs`, name: plain(name), type: "scatter", data: points, z: 3 });
  }
  return {
    ...option,
    tooltip: { ...TOOLTIP, trigger: "item", formatter: (p) => `${plain(p.data.run || p.seriesName)}: ${compact(p.value[1])} s` },
    xAxis: { ...option.xAxis, min: "dataMin", minInterval: 1 },
    series,
  };
}
