// e2fleet dashboard: order studies (which fill order gives the smallest tree). Loaded
// after app.js and drawn with its helpers (el, svg, section, table, badge, compact); the
// same rules hold: text from the API is set as text only.
"use strict";

// One colour per order, in rank order.
const STUDY_COLOURS = ["#3d7be8", "#e05252", "#3dbf7a", "#e8a33d", "#a05be0", "#33b8c9", "#e05ba8",
  "#8a5a2b", "#c9c233", "#1f4f99", "#9c1f1f", "#2b8a52", "#f08a5d", "#6b6bd6", "#b8e05b", "#5be0d0"];
function studyColour(i) {
  return i < STUDY_COLOURS.length ? STUDY_COLOURS[i] : `hsl(${(i * 137.508) % 360}, 62%, 48%)`;
}

// The depth where an order's estimated nodes peak (1-based), or 0.
function peakDepth(o) {
  let best = 0, at = 0;
  o.nodes_by_depth.forEach((v, i) => { if (Number(v) > best) { best = Number(v); at = i + 1; } });
  return at;
}

function intervalText(o) {
  return o.low != null ? `${compact(o.low)} – ${compact(o.high)}` : "tail not seen";
}

function verdictText(o) {
  if (o.rounds === 0) return "no complete round yet";
  if (o.rank === 1) return "best";
  return o.separated ? "worse than the best (95%)" : "not separated from the best";
}

function studiesTable(studies) {
  return table(["Study", "State", "Orders", "Best so far", "Estimate", "Created"],
    studies.map((s) => {
      const best = s.orders[0];
      return [
        el("a", { href: "/studies/" + encodeURIComponent(s.study_id) }, s.name || s.study_id),
        badge(s.state),
        String(s.orders.length),
        best ? best.order : "–",
        best && best.rounds ? (best.low != null ? intervalText(best) : "≥ " + compact(best.at_least)) : "–",
        when(s.created_ms),
      ];
    }), "No study yet: `e2fleet-coordinator study PUZZLE --all-scanlines --wait` starts one.");
}

async function studiesPage() {
  const studies = await api("/api/studies");
  return [el("h1", {}, "Order studies"),
    el("p", { class: "muted" }, "Before a long search, the fleet estimates the tree each candidate fill order would walk " +
      "(probe units: weighted partial boards resampled depth by depth, from fixed seeds, cross-checked like any unit) and ranks them."),
    section("All studies", studiesTable(studies))];
}

// Estimated nodes per depth of every order, log scale, one line each (the peak marked).
function studyDepthChart(orders) {
  const W = 720, H = 260, L = 56, R = 10, T = 10, B = 26;
  const n = Math.max(1, ...orders.map((o) => o.nodes_by_depth.length));
  const logs = orders.flatMap((o) => o.nodes_by_depth.map((v) => (Number(v) > 0 ? Math.log10(Number(v)) : 0)));
  const top = Math.max(1, Math.ceil(Math.max(0, ...logs)));
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "estimated nodes per depth, each order" });
  const sx = (d) => L + ((d - 1) / Math.max(1, n - 1)) * (W - L - R);
  const sy = (lg) => T + (1 - lg / top) * (H - T - B);
  for (let e = 0; e <= top; e += Math.max(1, Math.ceil(top / 6))) {
    root.append(svg("line", { x1: L, x2: W - R, y1: sy(e), y2: sy(e), class: "grid" }));
    root.append(svg("text", { x: L - 6, y: sy(e) + 4, "text-anchor": "end", class: "axis" }, e === 0 ? "1" : "1e" + e));
  }
  const step = Math.max(1, Math.ceil(n / 16));
  for (let d = 1; d <= n; d += step) {
    root.append(svg("text", { x: sx(d), y: H - 8, "text-anchor": "middle", class: "axis" }, String(d)));
  }
  orders.forEach((o, i) => {
    const pts = o.nodes_by_depth.map((v, d) => [d + 1, Number(v)]).filter((p) => p[1] > 0);
    if (!pts.length) return;
    const d = pts.map((p, k) => (k ? "L" : "M") + sx(p[0]).toFixed(1) + "," + sy(Math.log10(p[1])).toFixed(1)).join(" ");
    const line = svg("path", { d, class: "line", stroke: studyColour(i) });
    line.append(svg("title", {}, `${o.order}: peak at depth ${peakDepth(o)}`));
    root.append(line);
    const pk = peakDepth(o);
    if (pk) root.append(svg("circle", { cx: sx(pk), cy: sy(Math.log10(Number(o.nodes_by_depth[pk - 1]))), r: 3.5, fill: studyColour(i) },
      svg("title", {}, `${o.order}: ${compact(o.nodes_by_depth[pk - 1])} nodes at depth ${pk} (its peak)`)));
  });
  return root;
}

function studyLegend(orders) {
  return el("div", { class: "legend" }, orders.map((o, i) => {
    const key = el("span", { class: "key study-key" }, o.order);
    key.style.setProperty("--key", studyColour(i));
    return key;
  }));
}

// The shape an order has built at depth `upto`: filled cells shaded by when they were
// filled, hints outlined.
function shapeBoard(width, height, cells, hints, upto, caption) {
  const S = 20;
  const depthOf = new Map(cells.map((c, i) => [c, i + 1]));
  const hintSet = new Set(hints);
  const root = svg("svg", { viewBox: `-1 -1 ${width * S + 2} ${height * S + 2}`, class: "board shape", role: "img", "aria-label": caption });
  for (let pos = 0; pos < width * height; pos++) {
    const x = (pos % width) * S, y = Math.floor(pos / width) * S;
    const d = depthOf.get(pos);
    let cls = "empty";
    if (hintSet.has(pos)) cls = "shape-hint";
    else if (d && d <= upto) cls = "shape-filled";
    const r = svg("rect", { x, y, width: S, height: S, class: cls });
    if (cls === "shape-filled") r.style.opacity = (0.35 + 0.65 * (d / Math.max(1, upto))).toFixed(2);
    r.append(svg("title", {}, hintSet.has(pos) ? `cell ${pos}: hint` : `cell ${pos}: filled at depth ${d}`));
    root.append(r);
  }
  return el("figure", { class: "board-fig small-board" }, root, el("figcaption", {}, caption));
}

// Placed neighbours of each depth's cell (0-4), as thin bars.
function constraintBars(counts) {
  const W = 360, H = 60, n = Math.max(1, counts.length), bw = W / n;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart constraints", role: "img", "aria-label": "placed neighbours per depth" });
  counts.forEach((c, i) => {
    const h = (c / 4) * (H - 4);
    root.append(svg("rect", { x: i * bw, y: H - h, width: Math.max(0.8, bw * 0.9), height: h, class: "constraint-bar" },
      svg("title", {}, `depth ${i + 1}: ${c} placed neighbour${c === 1 ? "" : "s"}`)));
  });
  return root;
}

async function studyPage(id) {
  const s = await api("/api/studies/" + encodeURIComponent(id));
  const rows = s.orders.map((o, i) => {
    const swatch = el("span", { class: "swatch" });
    swatch.style.background = studyColour(i);
    return [
      String(o.rank),
      // (not a link to the probe job's page: its "nodes" are the probes' children listed)
      el("span", { title: o.order }, swatch, o.order.length > 40 ? o.order.slice(0, 37) + "…" : o.order),
      o.rounds ? compact(o.estimate) : "–",
      o.rounds ? intervalText(o) : "–",
      o.rounds ? compact(o.at_least) : "–",
      `${o.rounds} / ${o.rounds_planned}`,
      `${o.strata} at depth ${o.strata_depth}`,
      o.rounds ? String(peakDepth(o)) : "–",
      verdictText(o),
    ];
  });
  const best = s.orders[0];
  const guess = best && best.rounds && best.low == null;
  return [
    el("h1", {}, "Study: " + s.name, " ", badge(s.state)),
    el("p", { class: "muted" }, `${s.orders.length} orders of a ${s.width}x${s.height} board, probes of ${s.particles} boards; ` +
      "every order's tree is estimated from the same kind of probes, so the ranking compares like with like."),
    section("Ranking (fewest nodes first)",
      table(["#", "Order", "Estimated nodes", "95% interval", "At least (95%)", "Rounds", "Strata", "Peak depth", ""], rows),
      best ? el("p", { class: "small muted" }, "How the best was estimated: " + best.how + ".") : null,
      guess ? el("p", { class: "small" }, "No interval is stated: the probes did not see the bottom of these trees, so the order of the means is a guess; " +
        "an order marked worse is so at 95% by its lower bound.") : null,
      best ? el("p", { class: "small" }, "Start a search with the winner: ", el("code", {}, `e2fleet-coordinator submit PUZZLE --order study:${s.study_id}`)) : null),
    section("Estimated nodes per depth (log scale; dots at each order's peak)", studyDepthChart(s.orders), studyLegend(s.orders)),
    section("Shape at the peak and constraints per depth",
      el("div", { class: "boards" }, s.orders.map((o, i) => {
        const pk = peakDepth(o);
        const fig = shapeBoard(s.width, s.height, o.cells, s.hints, pk, `#${i + 1} ${o.order.length > 40 ? o.order.slice(0, 37) + "…" : o.order}: cells filled by depth ${pk}`);
        fig.append(constraintBars(o.constraints_by_depth));
        fig.append(el("figcaption", {}, "placed neighbours of each depth's cell (0-4)"));
        return fig;
      }))),
  ];
}
