// e2fleet dashboard. No framework, no build step: the coordinator serves this file as is.
//
// Rules kept throughout:
// - Text from the API is only ever set with textContent / attributes, never as HTML.
// - Exact counts stay exact: integers beyond 2^53 are parsed as BigInt (see parseJson).
// - The two speeds are never merged: "per-core" is one engine thread (median over
//   results), "aggregate" is the whole fleet per wall-clock second.
"use strict";

const REFRESH_MS = 2000;
const SVG_NS = "http://www.w3.org/2000/svg";

// ------------------------------------------------------------------ errors, for tests too

const jsErrors = [];
function recordError(msg) {
  jsErrors.push(String(msg));
  const pre = document.getElementById("js-errors");
  if (pre) {
    pre.hidden = false;
    pre.textContent = jsErrors.join("\n");
  }
}
window.addEventListener("error", (e) => recordError(e.message || e));
document.addEventListener("securitypolicyviolation", (e) => recordError("CSP violation: " + e.violatedDirective + " " + e.blockedURI));
window.addEventListener("unhandledrejection", (e) => recordError(e.reason && e.reason.stack ? e.reason.stack : e.reason));

// ------------------------------------------------------------------ small helpers

// el("div", {class: "x"}, child, "text", ...): children are nodes or strings (as text).
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  append(node, children);
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// JSON with exact integers: numbers that are not safe integers come back as BigInt.
function parseJson(text) {
  return JSON.parse(text, (key, value, ctx) => {
    if (typeof value === "number" && Number.isInteger(value) && !Number.isSafeInteger(value) &&
        ctx && /^-?\d+$/.test(ctx.source)) {
      return BigInt(ctx.source);
    }
    return value;
  });
}

async function api(path, options) {
  let res;
  try {
    res = await fetch(path, Object.assign({ headers: { Accept: "application/json" } }, options || {}));
  } catch (e) {
    const err = new Error("coordinator unreachable: " + e.message);
    err.network = true;
    throw err;
  }
  const text = await res.text();
  let body = null;
  try { body = text ? parseJson(text) : null; } catch (_) { body = { error: text }; }
  if (!res.ok) {
    const err = new Error((body && body.error) || res.status + " " + res.statusText);
    err.status = res.status;
    throw err;
  }
  return body;
}

const intFmt = new Intl.NumberFormat("en-US");
// An exact count with separators (BigInt or Number).
function exact(n) {
  if (n === null || n === undefined) return "–";
  return typeof n === "bigint" ? n.toLocaleString("en-US") : intFmt.format(n);
}

// A rate in placements (nodes) per second, with an SI prefix.
function rate(v) {
  if (v === null || v === undefined || !isFinite(Number(v))) return "–";
  v = Number(v);
  const units = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [scale, p] of units) {
    if (Math.abs(v) >= scale) return (v / scale).toFixed(v / scale >= 100 ? 0 : 1) + " " + p + "/s";
  }
  return v.toFixed(0) + " /s";
}

function duration(s) {
  const units = [[365.25 * 86400, "years"], [86400, "days"], [3600, "hours"], [60, "minutes"], [1, "seconds"]];
  for (const [size, name] of units) {
    if (s >= size || size === 1) {
      const n = s / size;
      return (n >= 1e6 ? n.toExponential(2) : n.toFixed(1)) + " " + name;
    }
  }
}

function compact(v) {
  v = Number(v);
  // past a thousand T: a power of ten (a tree estimate can be 10^40)
  if (Math.abs(v) >= 1e15) return v.toExponential(2).replace("e+", "e");
  for (const [scale, p] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
    if (Math.abs(v) >= scale) return (v / scale).toFixed(v / scale >= 100 ? 0 : 1) + p;
  }
  return String(Math.round(v));
}

function ago(ms) {
  if (!ms) return "never";
  const s = Math.max(0, Math.round((Date.now() - Number(ms)) / 1000));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
}

function when(ms) {
  return ms ? new Date(Number(ms)).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "–";
}

function badge(state) {
  return el("span", { class: "badge badge-" + String(state).toLowerCase() }, state);
}

function card(label, value, sub, attrs) {
  return el("div", Object.assign({ class: "card" }, attrs || {}),
    el("div", { class: "card-label" }, label),
    // a long exact count (a 16x16 job's nodes) in a smaller size, on one line
    el("div", { class: typeof value === "string" && value.length > 13 ? "card-value long" : "card-value" }, value),
    sub ? el("div", { class: "card-sub" }, sub) : null);
}

function section(title, ...children) {
  return el("section", { class: "panel" }, el("h2", {}, title), ...children);
}

function table(headers, rows, empty) {
  if (!rows.length) return el("p", { class: "muted" }, empty || "Nothing yet.");
  return el("div", { class: "table-wrap" }, el("table", {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => c instanceof Node ? el("td", {}, c) : el("td", {}, c)))))));
}

function progressBar(done, total) {
  const pct = total > 0 ? (100 * done) / total : 0;
  const fill = el("div", { class: "bar-fill" });
  fill.style.width = pct.toFixed(2) + "%";
  return el("div", { class: "bar", title: pct.toFixed(1) + "%" }, fill);
}

// ------------------------------------------------------------------ admin token

function adminToken() { return sessionStorage.getItem("e2fleet-admin-token") || ""; }

function refreshAdminButton() {
  const b = document.getElementById("admin-button");
  b.textContent = adminToken() ? "Admin: on (forget)" : "Admin token";
  b.classList.toggle("on", !!adminToken());
}

function setupAdmin() {
  const b = document.getElementById("admin-button");
  b.addEventListener("click", () => {
    if (adminToken()) {
      sessionStorage.removeItem("e2fleet-admin-token");
    } else {
      const t = window.prompt("Admin token (E2FLEET_ADMIN_TOKEN). Kept for this tab only.");
      if (t) sessionStorage.setItem("e2fleet-admin-token", t.trim());
    }
    refreshAdminButton();
    refresh();
  });
  refreshAdminButton();
}

async function adminAction(path, confirmText) {
  if (!adminToken()) {
    window.alert("This action needs the admin token: use the “Admin token” button first.");
    return;
  }
  if (!window.confirm(confirmText)) return;
  try {
    await api(path, { method: "POST", headers: { Authorization: "Bearer " + adminToken() } });
  } catch (e) {
    window.alert("Refused: " + e.message);
  }
  refresh();
}

// ------------------------------------------------------------------ charts (SVG)

// A line chart of series [{name, cls, points: [[x_ms, y]]}] over time.
function lineChart(series, opts) {
  const W = 640, H = 200, L = 56, R = 10, T = 10, B = 26;
  const all = series.flatMap((s) => s.points);
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": opts.label });
  if (!all.length) {
    root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "chart-empty" }, "no data in the last hour yet"));
    return root;
  }
  // from the first data (at least the last 10 minutes, at most the last hour) to now
  const now = Date.now();
  const first = Math.min(...all.map((p) => p[0]));
  const x0 = Math.max(now - 3600e3, Math.min(now - 600e3, first - 60e3)), x1 = Math.max(now, ...all.map((p) => p[0]));
  const yMax = Math.max(1, ...all.map((p) => p[1])) * 1.1;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - y / yMax) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const y = (yMax * i) / 4;
    root.append(svg("line", { x1: L, x2: W - R, y1: sy(y), y2: sy(y), class: "grid" }));
    root.append(svg("text", { x: L - 6, y: sy(y) + 4, "text-anchor": "end", class: "axis" }, opts.fmt(y)));
  }
  const span = (x1 - x0) / 60e3, tick = span > 30 ? 15 : span > 12 ? 5 : 2;
  for (let m = 0; m <= span; m += tick) {
    const x = now - m * 60e3;
    root.append(svg("text", { x: sx(x), y: H - 8, "text-anchor": "middle", class: "axis" }, m === 0 ? "now" : `-${m} min`));
  }
  for (const s of series) {
    if (!s.points.length) continue;
    const d = s.points.map((p, i) => (i ? "L" : "M") + sx(p[0]).toFixed(1) + "," + sy(p[1]).toFixed(1)).join(" ");
    root.append(svg("path", { d, class: "line " + s.cls }));
    for (const p of s.points) root.append(svg("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 2.5, class: "dot " + s.cls },
      svg("title", {}, `${s.name}: ${opts.fmt(p[1])} (minute of ${new Date(p[0]).toLocaleTimeString()})`)));
  }
  return root;
}

function legend(series) {
  return el("div", { class: "legend" }, series.map((s) => el("span", { class: "key " + s.cls }, s.name)));
}

// Bars of nodes per depth, log scale (the profile spans many orders of magnitude).
function depthChart(counts) {
  const W = 640, H = 220, L = 56, R = 10, T = 10, B = 26;
  const n = counts.length;
  const vals = counts.map((c) => Number(c));
  const maxLog = Math.max(1, ...vals.map((v) => (v > 0 ? Math.log10(v) : 0)));
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "nodes per depth" });
  const bw = (W - L - R) / Math.max(1, n);
  const sy = (lg) => T + (1 - lg / Math.ceil(maxLog)) * (H - T - B);
  for (let e = 0; e <= Math.ceil(maxLog); e += Math.max(1, Math.ceil(maxLog / 5))) {
    root.append(svg("line", { x1: L, x2: W - R, y1: sy(e), y2: sy(e), class: "grid" }));
    root.append(svg("text", { x: L - 6, y: sy(e) + 4, "text-anchor": "end", class: "axis" }, e === 0 ? "1" : "1e" + e));
  }
  counts.forEach((c, i) => {
    const v = Number(c);
    if (v <= 0) return;
    const lg = Math.log10(v) + 0.02;
    root.append(svg("rect", { x: L + i * bw + bw * 0.1, width: Math.max(1, bw * 0.8), y: sy(lg), height: sy(0) - sy(lg), class: "depth-bar" },
      svg("title", {}, `depth ${i + 1}: ${exact(c)} nodes`)));
  });
  const step = Math.max(1, Math.ceil(n / 16));
  for (let i = 0; i < n; i += step) {
    root.append(svg("text", { x: L + (i + 0.5) * bw, y: H - 8, "text-anchor": "middle", class: "axis" }, String(i + 1)));
  }
  return root;
}

// ------------------------------------------------------------------ boards (SVG)

// Edge colours: 0 is the grey rim; others get a fixed palette, then golden-angle hues.
const PALETTE = ["#5b5f66", "#e05252", "#3d7be8", "#e8a33d", "#3dbf7a", "#a05be0", "#e05ba8", "#33b8c9",
  "#c9c233", "#8a5a2b", "#1f4f99", "#9c1f1f", "#2b8a52", "#f08a5d", "#6b6bd6", "#b8e05b",
  "#5be0d0", "#d68a6b", "#4a4a8a", "#d6b86b", "#8ad66b", "#d66bd0", "#6b8ad6"];
function colourOf(c) {
  if (c < PALETTE.length) return PALETTE[c];
  return `hsl(${(c * 137.508) % 360}, 62%, 52%)`;
}

// The colours a piece shows when turned `rot` clockwise quarter turns (engine/src/model.rs):
// placed side s shows piece[(s - rot) mod 4], sides URDL.
function shown(piece, rot) {
  return [0, 1, 2, 3].map((s) => piece[(s - rot + 4) % 4]);
}

// Draws `placements` ([{pos, piece, rot}]) on the puzzle's grid; hints are outlined.
function board(puzzle, placements, caption) {
  const S = 32, w = puzzle.width, h = puzzle.height;
  const hintCells = new Set(puzzle.hints.map((p) => p.pos));
  const byCell = new Map();
  for (const p of puzzle.hints) byCell.set(p.pos, p);
  for (const p of placements) byCell.set(p.pos, p);
  const root = svg("svg", {
    viewBox: `-1 -1 ${w * S + 2} ${h * S + 2}`, class: "board", role: "img",
    "aria-label": caption, "data-cells": w * h, "data-placed": byCell.size,
  });
  for (let pos = 0; pos < w * h; pos++) {
    const x = (pos % w) * S, y = Math.floor(pos / w) * S;
    const p = byCell.get(pos);
    const g = svg("g", { class: p ? "cell placed" : "cell", transform: `translate(${x},${y})` });
    if (!p) {
      g.append(svg("rect", { width: S, height: S, class: "empty" }));
    } else {
      const cols = shown(puzzle.pieces[p.piece], p.rot);
      const tri = [[0, 0, S, 0], [S, 0, S, S], [S, S, 0, S], [0, S, 0, 0]];
      tri.forEach(([ax, ay, bx, by], side) => {
        g.append(svg("polygon", { points: `${ax},${ay} ${bx},${by} ${S / 2},${S / 2}`, fill: colourOf(cols[side]), class: "edge" }));
      });
      g.append(svg("title", {}, `cell ${pos} (x ${pos % w}, y ${Math.floor(pos / w)}): piece ${p.piece}, rotation ${p.rot}` +
        (hintCells.has(pos) ? " — hint" : "")));
      if (hintCells.has(pos)) g.append(svg("rect", { x: 1.5, y: 1.5, width: S - 3, height: S - 3, class: "hint" }));
    }
    root.append(g);
  }
  return el("figure", { class: "board-fig" }, root, el("figcaption", {}, caption));
}

// ------------------------------------------------------------------ pages

let current = null; // {render: async fn, key}

function setLive(ok, text) {
  const live = document.getElementById("live");
  live.textContent = text;
  live.classList.toggle("down", !ok);
}

function jobsTable(jobs) {
  return table(["Job", "State", "Progress (units)", "Nodes counted (exact)", "Solutions", "Conservation", "Created"],
    jobs.map((j) => {
      const u = j.units;
      const total = Number(u.open) + Number(u.leased) + Number(u.done);
      return [
        el("a", { href: "/jobs/" + encodeURIComponent(j.job_id) }, j.name || j.job_id),
        badge(j.state),
        el("div", { class: "progress-cell" }, progressBar(Number(u.done), total), el("span", { class: "num" }, `${exact(u.done)} / ${exact(total)}`)),
        el("span", { class: "num" }, exact(j.nodes_total)),
        el("span", { class: "num" }, exact(j.solutions_count)),
        conservationText(j),
        when(j.created_ms),
      ];
    }), "No jobs yet. Submit one with: e2fleet-coordinator submit PUZZLE");
}

function conservationText(j) {
  if (j.conservation_ok === true) return el("span", { class: "ok" }, "holds");
  if (j.conservation_ok === false) return el("span", { class: "bad" }, "BROKEN");
  return el("span", { class: "muted" }, j.state === "running" ? "checked at completion" : "not checked");
}

function perCoreTable(groups, what) {
  return table([what, "Results", "Per-core median"],
    (groups || []).map((g) => [g.key || "(unknown)", exact(g.results), el("span", { class: "num" }, rate(g.median_nodes_per_s))]),
    "No accepted results in the last hour.");
}

async function fleetPage() {
  const [fleet, jobs] = await Promise.all([api("/api/fleet"), api("/api/jobs")]);
  const agg = fleet.aggregate_nodes_per_s, pc = fleet.per_core_nodes_per_s, w = fleet.workers, u = fleet.units_last_minute;
  const series = fleet.aggregate_series || [];
  const rateSeries = [
    { name: "verified nodes/s", cls: "s-verified", points: series.map((m) => [Number(m.minute_unix_ms) + 30e3, m.verified_nodes_per_s]) },
    { name: "raw nodes/s (all reports)", cls: "s-raw", points: series.map((m) => [Number(m.minute_unix_ms) + 30e3, m.raw_nodes_per_s]) },
  ];
  const unitSeries = [
    { name: "completed", cls: "s-verified", points: series.map((m) => [Number(m.minute_unix_ms) + 30e3, m.units_completed]) },
    { name: "leased", cls: "s-raw", points: series.map((m) => [Number(m.minute_unix_ms) + 30e3, m.leases_created]) },
    { name: "expired", cls: "s-bad", points: series.map((m) => [Number(m.minute_unix_ms) + 30e3, m.leases_expired]) },
  ];
  return [
    el("h1", {}, "Fleet"),
    el("div", { class: "cards" },
      card("Aggregate fleet speed", rate(agg.verified),
        `all machines together, verified nodes per wall-clock second (last 60 s); raw ${rate(agg.raw)}`,
        { id: "aggregate-rate", "data-value": agg.verified }),
      card("Per-core speed", rate(pc.overall),
        "one engine thread: median of nodes / engine second over results of the last hour",
        { id: "per-core-rate", "data-value": pc.overall }),
      card("Workers", `${exact(w.online)} online`,
        `${exact(w.idle || 0)} idle · ${exact(w.offline)} offline · ${exact(w.quarantined)} quarantined` +
          (w.paused ? ` · ${exact(w.paused)} of them paused` : ""), { id: "workers-card" }),
      card("Units, last minute", `${exact(u.completed)} completed`, `${exact(u.leased)} leased · ${exact(u.expired)} leases expired`),
      card("Wrong results", exact(fleet.wrong_results), "results outvoted or failing verification (all time)",
        { class: fleet.wrong_results > 0 ? "card warn" : "card" })),
    el("div", { class: "grid2" },
      section("Aggregate fleet nodes/s, per minute (last hour)",
        lineChart(rateSeries, { label: "aggregate fleet nodes per second", fmt: compact }), legend(rateSeries),
        el("p", { class: "note" }, "Nodes received from all workers per wall-clock second. Not a per-core figure.")),
      section("Units per minute (last hour)",
        lineChart(unitSeries, { label: "units per minute", fmt: (v) => String(Math.round(v)) }), legend(unitSeries))),
    el("div", { class: "grid2" },
      section("Per-core nodes/s by CPU model", perCoreTable(pc.by_cpu_model, "CPU model"),
        el("p", { class: "note" }, "How fast one engine thread walks on that CPU: the median over results of committed nodes / engine seconds.")),
      section("Per-core nodes/s by engine kind", perCoreTable(pc.by_engine_kind, "Engine kind"))),
    section("Jobs", jobsTable(jobs)),
  ];
}

async function jobsPage() {
  const jobs = await api("/api/jobs");
  return [el("h1", {}, "Jobs"), section("All jobs", jobsTable(jobs))];
}

const puzzleCache = new Map();
let shownSolution = 0;

async function jobPage(id) {
  const job = await api("/api/jobs/" + encodeURIComponent(id));
  if (!puzzleCache.has(id)) puzzleCache.set(id, await api("/api/jobs/" + encodeURIComponent(id) + "/puzzle"));
  const puzzle = puzzleCache.get(id);
  const best = await api("/api/jobs/" + encodeURIComponent(id) + "/best");
  const audits = await api("/api/jobs/" + encodeURIComponent(id) + "/audits");
  const u = job.units;
  const total = Number(u.open) + Number(u.leased) + Number(u.done);
  const sols = job.solutions || [];
  if (shownSolution >= sols.length) shownSolution = 0;
  const est = job.estimate;
  const actions = job.state === "running"
    ? el("button", { type: "button", class: "danger", onclick: () => adminAction("/api/jobs/" + encodeURIComponent(id) + "/cancel", `Cancel job “${job.name}”? Held leases are told to stop.`) }, "Cancel job")
    : null;
  const boards = [];
  // a deepest board that is a full solution is already shown as one
  if (!(sols.length && Number(job.deepest.depth) === Number(job.depths))) boards.push(board(puzzle, job.deepest.board || [],
    `Deepest board: depth ${exact(job.deepest.depth)} of ${exact(job.depths)} free cells` + (puzzle.hints.length ? `, ${puzzle.hints.length} hint(s) outlined` : "")));
  if (sols.length) {
    const pick = el("div", { class: "solution-pick" }, "Solution ",
      sols.map((_, i) => el("button", { type: "button", class: i === shownSolution ? "small on" : "small", onclick: () => { shownSolution = i; refresh(); } }, String(i + 1))));
    boards.push(el("div", {}, board(puzzle, sols[shownSolution], `Solution ${shownSolution + 1} of ${exact(job.solutions_count)} found`), pick));
  }
  return [
    el("div", { class: "title-row" },
      el("h1", {}, job.name || job.job_id, " ", badge(job.state)), actions),
    el("p", { class: "muted" }, `Job ${job.job_id} · ${puzzle.width}×${puzzle.height} · order ${job.order} · split depth ${job.split_depth} · budget ${job.budget ? exact(job.budget) + " nodes/run" : "none"} · ` +
      (job.replicas > 1 ? `${job.replicas} replicas per unit` : job.spot_check > 0 ? `spot check ${(job.spot_check * 100).toFixed(0)}%` : "no cross-check") +
      ` · priority ${job.priority}, share ${job.share}` +
      ` · submitted ${when(job.created_ms)}` + (job.finished_ms ? ` · finished ${when(job.finished_ms)}` : "")),
    job.paused ? el("p", { class: "notice", id: "paused" }, "Paused: no new leases; the ones out finish (e2fleet-coordinator resume " + job.job_id + ")") : null,
    job.waiting && job.waiting.reason ? el("p", { class: "notice", id: "waiting" }, "Waiting: " + job.waiting.reason) : null,
    el("div", { class: "cards" },
      card("Nodes counted (exact)", exact(job.nodes_total),
        `enumeration ${exact(job.enumeration_nodes)} + splits ${exact(job.split_nodes)} + units ${exact(job.unit_nodes)}`,
        { id: "nodes-total", "data-value": String(job.nodes_total) }),
      card("Units", `${exact(u.done)} / ${exact(total)} done`, `${exact(u.open)} open · ${exact(u.leased)} leased`, { id: "units-card", "data-done": u.done }),
      card("Solutions", exact(job.solutions_count), sols.length < Number(job.solutions_count) ? `first ${sols.length} shown` : null),
      card("Conservation", job.conservation_ok === null || job.conservation_ok === undefined ? (job.state === "running" ? "pending" : "not checked") : conservationText(job),
        "enumeration + accepted unit nodes = total, per depth; recomputed from stored results at completion"),
      card("Per-core speed", rate(job.per_core_nodes_per_s), "one engine thread, median over this job's results", { id: "per-core-rate", "data-value": job.per_core_nodes_per_s }),
      card("Aggregate speed", rate(job.aggregate_nodes_per_s), `this job, whole fleet, verified per wall-clock second (raw ${rate(job.aggregate_raw_nodes_per_s)})`,
        { id: "aggregate-rate", "data-value": job.aggregate_nodes_per_s })),
    section("Progress", progressBar(Number(u.done), total),
      el("p", {}, est ? `Estimated remaining: about ${compact(est.remaining_nodes)} nodes. How: ${est.how}.` :
        job.state === "running" ? "No estimate yet: it needs finished units." : "Nothing remains."),
      est && est.tree_nodes != null ? el("p", { id: "tree-estimate" }, treeEstimateText(est)) : null),
    el("div", { class: "grid2" },
      section("Boards", el("div", { class: "boards" }, boards)),
      section("Nodes per depth (log scale)", depthChart(job.nodes_by_depth || []),
        el("p", { class: "note" }, "Exact counts on hover. Depth k is the k-th free cell in the fill order."))),
    section("Best boards", table(["#", "Depth", "Score", "Account", "Host", "Found"],
      best.map((b) => [exact(b.rank), exact(b.depth), `${exact(b.score)} / ${exact(b.max_score)}`, b.account,
        el("span", { class: "host" }, b.hostname), el("span", { title: when(b.found_ms) }, ago(b.found_ms))]),
      "No accepted result yet."),
      el("p", { class: "note" }, "The deepest boards of accepted (cross-checked where the job asks for it) results, each verified when it was reported; score = matched inner edges, hints included.")),
    section("Audits", table(["By", "Hardware class", "Audits", "Units re-run", "Agree", "Disagree", "Engine builds", "Latest"],
      audits.classes.map((a) => [
        a.operator ? "the operator's machines" : el("span", { title: "a volunteer account: what it says is its own word" }, "volunteer ", a.account),
        el("code", {}, a.class_id), exact(a.audits), exact(a.units_checked), exact(a.units_agreed),
        // a volunteer's disagreement is its claim, not the job's fault: shown as such
        a.disagreed.length
          ? (a.operator ? el("span", { class: "bad" }, "units " + a.disagreed.join(", "))
                        : el("span", { class: "note" }, a.account + " says units " + a.disagreed.join(", ") + " differ (not confirmed)"))
          : "none",
        a.engine_builds.map((b) => el("code", {}, b)), el("span", { title: when(a.last_ms) }, ago(a.last_ms))]),
      "No audit yet."),
      el("p", { class: "note", id: "audit-how" }, "Anyone can check this job: the operator publishes its certificate (e2fleet-coordinator export " + job.job_id +
        " --out FILE) and auditors run e2fleet-worker audit FILE --sample N on their own machines, which re-derives the tiling and the totals and re-runs units to the digit; with --coordinator the re-runs are compared here with the accepted results.")),
    section("Results by verdict and engine", table(["Verdict", "Engine kind", "Engine build", "Results", "Nodes"],
      (job.results || []).map((r) => [badge(r.verdict), r.engine_kind, el("code", {}, r.engine_build), exact(r.results), el("span", { class: "num" }, exact(r.nodes))]),
      "No results yet.")),
  ];
}

// The worker versions in the fleet, and for each release offered how many workers of its
// platform run it.
function versionsSection(workers, offered) {
  const counts = new Map();
  for (const w of workers) counts.set(w.worker_version, (counts.get(w.worker_version) || 0) + 1);
  const versions = [...counts.entries()].sort((a, b) => b[1] - a[1]);
  const lines = offered.map((o) => {
    const mine = workers.filter((w) => `${w.arch}-${w.os}` === o.platform);
    const on = mine.filter((w) => w.worker_version === o.version).length;
    return el("p", { class: "note", "data-offered": o.version },
      `e2fleet-worker ${o.version} is offered to ${o.platform}: ${exact(on)} of ${exact(mine.length)} worker${mine.length === 1 ? "" : "s"} of that platform run it (workers with updates on switch between units).`);
  });
  return section("Worker versions",
    el("div", { class: "cards", id: "versions" },
      ...versions.map(([v, n]) => card("e2fleet-worker " + v, `${exact(n)} worker${n === 1 ? "" : "s"}`, null, { "data-version": v }))),
    ...(lines.length ? lines : [el("p", { class: "note" }, "No worker release is offered: e2fleet-coordinator release publish BINARY --key KEY offers one.")]));
}

async function workersPage() {
  const [workers, releases] = await Promise.all([api("/api/workers"), api("/api/releases")]);
  const rows = workers.map((w) => [
    el("span", { class: "host" }, w.hostname),
    // a worker seen lately whose engines are paused says why (the pause file, on battery...);
    // the API gives the reason only while the worker is seen lately
    w.paused
      ? el("span", { title: "paused: " + w.paused }, badge("paused"), " ", el("span", { class: "note" }, w.paused))
      : badge(w.state),
    w.cpu_model,
    exact(w.cores),
    `${w.arch} / ${w.os}`,
    el("code", {}, w.worker_version),
    el("code", {}, w.rustc_version),
    el("span", {}, w.engine_kind || "–", " ", el("code", {}, w.engine_build || "")),
    el("span", { class: "num" }, rate(w.per_core_rate)),
    exact(w.threads),
    // its link: the median round trip of its calls, and the share of its engines' time
    // spent waiting on the coordinator (both from its last heartbeat)
    el("span", { class: "num" + (w.network_wait >= 0.05 ? " bad" : "") },
      w.round_trip_ms > 0 ? `${Math.round(w.round_trip_ms)} ms` : "–",
      " · ",
      `${(100 * (w.network_wait || 0)).toFixed(1)}%`),
    exact(w.units_done),
    el("span", { class: w.errors > 0 ? "bad" : "" }, exact(w.errors)),
    el("span", { title: when(w.last_seen_ms) }, ago(w.last_seen_ms)),
    w.quarantined
      ? el("button", { type: "button", class: "small", onclick: () => adminAction("/api/hosts/" + encodeURIComponent(w.hostname) + "/release", `Release host “${w.hostname}” from quarantine?`) }, "Release host")
      : "",
  ]);
  return [
    el("h1", {}, "Workers"),
    versionsSection(workers, releases.offered || []),
    section(`${workers.length} registered`,
      table(["Host", "State", "CPU", "Cores", "Arch / OS", "Version", "rustc", "Engine", "Per-core", "Threads", "Link (round trip · waiting)", "Units done", "Errors", "Last seen", ""], rows,
        "No worker has registered yet. Start one with: e2fleet-worker run --coordinator URL --token TOKEN"),
      el("p", { class: "note" }, "Per-core is the worker's own engine-thread speed (its last heartbeat). Link: the median round trip of its calls, and the share of its engine threads' time spent without a unit while it waited on the coordinator (5% or more is shown in red: a slow or lossy link keeps it idle). A paused worker says why (its owner's pause file, on battery, outside its hours, other programs busy); after a long pause it hands its units back. A quarantined host gets no leases until an operator releases it.")),
  ];
}

async function verificationPage() {
  const suite = new URLSearchParams(location.search).get("suite") || "default";
  const m = await api("/api/verification?suite=" + encodeURIComponent(suite));
  const units = m.units || [];
  const classes = m.classes || [];
  const mark = { agrees: "agrees", DISAGREES: "DISAGREES", pending: "pending", "not run": "not run" };
  const header = ["Hardware class", "Status", ...units.map((u, i) => el("span", { title: u.name }, "U" + (i + 1)))];
  const rows = classes.map((c) => [
    el("div", {},
      el("div", { class: "host" }, c.cpu_model, " · ", c.engine_kind),
      el("div", { class: "muted small" }, `${c.arch} / ${c.os} · ${c.rustc_version || "no rustc"}`),
      el("div", {}, el("code", {}, c.engine_release), " ", el("code", {}, c.id)),
      el("div", { class: "muted small" }, "hosts: " + ((c.hosts || []).join(", ") || "–"))),
    c.flagged ? badge("flagged") : badge("ok"),
    ...units.map((u) => {
      const cell = (c.cells || {})[u.name] || { verdict: "not run" };
      return el("div", { class: "cell-" + cell.verdict.replace(" ", "-").toLowerCase(), title: cell.verdict + (cell.results ? ` · ${cell.results} result(s) · hosts ${(cell.hosts || []).join(", ")}` : "") },
        el("div", {}, mark[cell.verdict] || cell.verdict),
        cell.per_core_nodes_per_s ? el("div", { class: "muted small num" }, rate(cell.per_core_nodes_per_s)) : null);
    }),
  ]);
  return [
    el("h1", {}, "Verification"),
    el("p", { class: "muted" }, `Suite “${m.suite}”: ${units.length} units with exact results, run by every hardware class (CPU model, arch, OS, rustc, CPU features, engine kind and release) before it gets real work. A class that DISAGREES anywhere is flagged and gets no real units until a fixed build — a new class — agrees.`),
    section("Conformance matrix", table(header, rows, "No hardware class has run this suite yet. Workers run it when they first connect; or: e2fleet-worker verify --coordinator URL --token TOKEN")),
    section("Speed table: per-core nodes/s on the suite's speed units",
      table(["Class", "CPU", "Engine", "rustc", "Per-core (median)"],
        (m.speed_table || []).map((s) => [el("code", {}, s.class_id), s.cpu_model, el("span", {}, s.engine_kind, " ", el("code", {}, s.engine_release)), el("code", {}, s.rustc_version), el("span", { class: "num" }, rate(s.per_core_nodes_per_s))]),
        "Nothing measured yet."),
      el("p", { class: "note" }, "One engine thread's speed on identical, exactly known pieces of work: the fleet's answer to “which CPU and compiler is fastest”.")),
    section("Units", table(["", "Name", "Puzzle", "Order", "Prefix", "Budget", "Expected result"],
      units.map((u, i) => ["U" + (i + 1), u.name, u.puzzle, u.order, `depth ${u.prefix_depth} #${u.prefix_index}`, u.budget ? exact(u.budget) : "none",
        u.expected ? `${exact(u.expected.committed)} nodes, ${exact(u.expected.solutions_count)} solutions (${u.expected_source})` : el("span", { class: "muted" }, "not known yet: fixed when two classes agree")]))),
  ];
}

function dayName(day) {
  return new Date(day * 86400000).toISOString().slice(0, 10);
}

// one bar per day of the last 30, height by credited nodes (SVG, no script in it)
function dayBars(days, today, max) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 120 20");
  svg.setAttribute("class", "daybars");
  for (const d of days) {
    const x = 4 * (29 - (today - d.day));
    if (x < 0) continue;
    const h = max > 0 ? Math.max(1, Math.round(20 * Number(d.nodes) / max)) : 0;
    const r = document.createElementNS(ns, "rect");
    r.setAttribute("x", String(x));
    r.setAttribute("y", String(20 - h));
    r.setAttribute("width", "3");
    r.setAttribute("height", String(h));
    const t = document.createElementNS(ns, "title");
    t.textContent = `${dayName(d.day)}: ${exact(d.nodes)} nodes, ${exact(d.results)} results`;
    r.appendChild(t);
    svg.appendChild(r);
  }
  return svg;
}

async function statsPage() {
  const s = await api("/api/stats");
  const max = Math.max(0, ...s.accounts.flatMap((a) => a.days.map((d) => Number(d.nodes))));
  const rows = s.accounts.map((a) => [
    exact(a.rank),
    el("span", { class: "host" }, a.id),
    a.team != null ? el("span", { class: "host" }, a.team) : el("span", { class: "muted" }, "–"),
    el("span", { class: "num" }, exact(a.credit_nodes)),
    exact(a.credit_results),
    el("span", { class: "num" }, exact(a.confirmed_nodes)),
    a.first_day != null ? dayName(a.first_day) : "–",
    a.last_day != null ? dayName(a.last_day) : "–",
    dayBars(a.days, s.today, max),
    a.inactive ? badge("inactive") : a.trusted ? badge("trusted") : badge("confirming"),
  ]);
  const teams = s.teams || [];
  const teamMax = Math.max(0, ...teams.flatMap((t) => t.days.map((d) => Number(d.nodes))));
  const teamRows = teams.map((t) => [
    exact(t.rank),
    el("span", { class: "host" }, t.id),
    exact(t.accounts),
    el("span", { class: "num" }, exact(t.credit_nodes)),
    exact(t.credit_results),
    el("span", { class: "num" }, exact(t.confirmed_nodes)),
    dayBars(t.days, s.today, teamMax),
  ]);
  const totalMax = Math.max(0, ...s.days.map((d) => Number(d.nodes)));
  return [
    el("h1", {}, "Stats"),
    el("p", { class: "muted" }, "Credit per volunteer account: the nodes and results of its work that counts — accepted on a trusted account's word or confirmed by another party (the same exact result from another account or one of the operator's machines), or agreeing with the accepted result. A result later found wrong, or voided with its account, loses its credit. Work waiting for confirmation earns nothing yet; the operator's own machines are not ranked."),
    section("All volunteers, last 30 days", dayBars(s.days, s.today, totalMax)),
    section(`${teams.length} ${teams.length === 1 ? "team" : "teams"}`,
      table(["Rank", "Team", "Accounts", "Credited nodes", "Results", "Confirmed by another party", "Last 30 days"], teamRows,
        "No team yet. The operator puts an account in one with: e2fleet-coordinator account team NAME TEAM"),
      el("p", { class: "note" }, "A team's figures are its accounts' added up; an account that changes team takes its credit along.")),
    section(`${s.accounts.length} ${s.accounts.length === 1 ? "account" : "accounts"}`,
      table(["Rank", "Account", "Team", "Credited nodes", "Results", "Confirmed by another party", "First credit", "Last credit", "Last 30 days", ""], rows,
        "No volunteer account yet. The operator makes one with: e2fleet-coordinator account add NAME")),
  ];
}

function route() {
  const path = location.pathname;
  let m;
  if ((m = path.match(/^\/jobs\/([^/]+)$/))) return { nav: "jobs", key: "job", render: () => jobPage(decodeURIComponent(m[1])) };
  if (path === "/jobs") return { nav: "jobs", key: "jobs", render: jobsPage };
  if ((m = path.match(/^\/studies\/([^/]+)$/))) return { nav: "studies", key: "study", render: () => studyPage(decodeURIComponent(m[1])) };
  if (path === "/studies") return { nav: "studies", key: "studies", render: studiesPage };
  if (path === "/workers") return { nav: "workers", key: "workers", render: workersPage };
  if (path === "/verification") return { nav: "verification", key: "verification", render: verificationPage };
  if (path === "/stats") return { nav: "stats", key: "stats", render: statsPage };
  return { nav: "fleet", key: "fleet", render: fleetPage };
}

// The tree estimate in words: an interval only when the estimate can support one, and
// the time to go only then.
function treeEstimateText(est) {
  const size = est.tree_high != null
    ? `about ${compact(est.tree_nodes)} nodes (95% interval ${compact(est.tree_low)} to ${compact(est.tree_high)})`
    : `at least ${compact(est.tree_at_least)} nodes (95% confidence; the mean of the samples, ${compact(est.tree_nodes)}, is a guess: the tree's mass is in branches the samples have not all seen)`;
  const eta = est.eta_seconds != null ? `, about ${duration(est.eta_seconds)} to go at this job's rate` : ", time to go unknown";
  return `The whole tree: ${size}${eta}. How: ${est.tree_how}.`;
}

let inFlight = false;
async function refresh() {
  if (inFlight || !current) return;
  inFlight = true;
  try {
    const content = await current.render();
    const main = document.getElementById("main");
    const scroll = window.scrollY;
    // pages leave out what does not apply as null: append() skips it, replaceChildren
    // would print it
    main.replaceChildren();
    append(main, content);
    window.scrollTo(0, scroll);
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
    setLive(true, "live · " + new Date().toLocaleTimeString());
  } catch (e) {
    if (e.network) {
      setLive(false, "coordinator unreachable — retrying");
    } else if (e.status) {
      document.getElementById("main").replaceChildren(el("h1", {}, e.status === 404 ? "Not found" : "Error " + e.status), el("p", {}, e.message));
      setLive(true, "live");
    } else {
      recordError(e.stack || e);
    }
  } finally {
    inFlight = false;
  }
}

function start() {
  current = route();
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === current.nav);
  setupAdmin();
  refresh();
  setInterval(refresh, REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", start);
