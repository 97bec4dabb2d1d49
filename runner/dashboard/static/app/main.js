// The dashboard's entry: a hash router over the pages, and the top bar.
//   #/                 runs            #/run/ID           one run
//   #/compare/A,B,...  comparison      #/studies, #/study/ID

import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { ComparePage } from "./compare.js";
import { html } from "./lib.js";
import { RunPage } from "./run.js";
import { RunsPage } from "./runs.js";
import { StudiesPage, StudyPage } from "./studies.js";

function decode(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text; // a malformed escape typed by hand: shown as typed, found by no route
  }
}

function route(hash) {
  const [page, arg = ""] = hash.replace(/^#\/?/, "").split(/\/(.*)/s);
  const value = decode(arg);
  if (page === "run" && value) return html`<${RunPage} key=${value} runId=${value} />`;
  if (page === "compare" && arg) {
    const ids = arg.split(",").map(decode).filter(Boolean);
    return html`<${ComparePage} key=${ids.join(",")} runIds=${ids} />`;
  }
  if (page === "studies") return html`<${StudiesPage} />`;
  if (page === "study" && value) return html`<${StudyPage} key=${value} studyId=${value} />`;
  return html`<${RunsPage} />`;
}

function App() {
  const [hash, setHash] = useState(window.location.hash);
  useEffect(() => {
    const onChange = () => setHash(window.location.hash);
    window.addEventListener("hashchange", onChange);
    return () => window.removeEventListener("hashchange", onChange);
  }, []);
  const studies = /^#\/stud/.test(hash);
  return html`<header class="top">
      <a class="brand" href="#/">stackbench</a>
      <nav><a class=${studies ? "" : "on"} href="#/">runs</a><a class=${studies ? "on" : ""} href="#/studies">studies</a></nav>
      <span class="muted">read-only view of the results directory</span>
    </header>
    <main>${route(hash)}</main>`;
}

render(html`<${App} />`, document.getElementById("app"));
