"""The fleet-health page: one self-contained HTML document (inline CSS and JS, charts in
inline SVG, no CDN: it must work on machines without internet). It polls the JSON views
with relative URLs, so it works at `/` (faultline serve) and under a prefix (`/fleet/` on
a Faust worker). Kept as a Python string so it ships inside the package without
package-data configuration."""

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>faultline · fleet health</title>
<style>
  :root {
    --bg: #f4f6fa; --card: #ffffff; --ink: #1b2333; --muted: #667085; --line: #e4e8ef;
    --critical: #e5484d; --user: #8e4ec6; --warn: #f5a524; --ok: #30a46c; --system: #d6409f;
    --navy: #111a2e; --accent: #3b82f6;
  }
  * { box-sizing: border-box; }
  body { margin: 0; background: var(--bg); color: var(--ink);
         font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; }
  header { background: var(--navy); color: #fff; padding: 12px 24px; display: flex; align-items: center; gap: 18px; }
  header h1 { font-size: 18px; margin: 0; font-weight: 650; letter-spacing: .2px; }
  header h1 span { color: #8ea3c7; font-weight: 400; }
  header .spacer { flex: 1; }
  header .meta { color: #c5d0e3; font-size: 13px; }
  .dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%; background: #8ea3c7; margin-right: 6px; vertical-align: 1px; }
  .dot.live { background: #46d08a; box-shadow: 0 0 0 3px rgba(70,208,138,.25); }
  .dot.down { background: var(--critical); }
  main { padding: 18px 24px 32px; display: grid; gap: 16px; grid-template-columns: repeat(12, 1fr); }
  .card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px; min-width: 0; }
  .card h2 { font-size: 13px; text-transform: uppercase; letter-spacing: .6px; color: var(--muted); margin: 0 0 10px; font-weight: 650; }
  .card h2 small { text-transform: none; letter-spacing: 0; font-weight: 400; }
  .kpis { grid-column: span 12; display: grid; grid-template-columns: repeat(7, 1fr); gap: 16px; }
  .kpi .value { font-size: 28px; font-weight: 700; line-height: 1.1; }
  .kpi .label { font-size: 13px; font-weight: 600; margin-top: 4px; }
  .kpi .detail { color: var(--muted); font-size: 12px; }
  .kpi.alert { border-color: #f3b0b2; background: #fff6f6; }
  .kpi.alert .value { color: var(--critical); }
  .span8 { grid-column: span 8; } .span4 { grid-column: span 4; } .span12 { grid-column: span 12; }
  .span5 { grid-column: span 5; } .span7 { grid-column: span 7; }
  .cost { display: grid; grid-template-columns: 1.3fr 1fr 1fr 1fr; gap: 18px; }
  .cost h3 { font-size: 12px; color: var(--muted); margin: 0 0 6px; font-weight: 600; }
  .legend { display: flex; gap: 14px; font-size: 12.5px; color: var(--muted); margin: -4px 0 6px; flex-wrap: wrap; }
  .sw { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 5px; vertical-align: -1px; }
  svg text { font: 11px system-ui, "DejaVu Sans", sans-serif; fill: var(--muted); }
  .empty { color: var(--muted); padding: 18px 0; text-align: center; }
  .mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
  .cand { border: 1px solid #f3c2c4; border-left: 4px solid var(--critical); border-radius: 8px; padding: 8px 10px; margin-bottom: 8px; background: #fffafa; }
  .cand .who { font-weight: 650; }
  .cand .sub { color: var(--muted); font-size: 12.5px; }
  .chip { display: inline-block; padding: 1px 7px; border-radius: 999px; font-size: 11.5px; font-weight: 600; margin: 2px 3px 0 0; white-space: nowrap; }
  .chip.CRITICAL { background: #fde8e8; color: #b4232a; } .chip.USER { background: #f1e7fb; color: #6c2fa3; }
  .chip.WARN { background: #fdf1d8; color: #8a5a00; } .chip.scope { background: #e8eef9; color: #2a4a80; }
  .chip.code { background: #eef1f6; color: #3a4559; }
  .chip.action { background: #e6f4ea; color: #1d6b3a; }
  .kind { display: inline-block; padding: 1px 7px; border-radius: 4px; font-size: 11px; font-weight: 700; letter-spacing: .3px; }
  .kind.SYSTEM { background: #fde8f3; color: #a61d6e; } .kind.USER { background: #e7eefb; color: #2c4f8f; }
  .bars .row { display: grid; grid-template-columns: 140px 1fr 36px; align-items: center; gap: 10px; padding: 3px 0; }
  .bars .name { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  .bars .track { height: 14px; background: #f0f2f6; border-radius: 4px; overflow: hidden; display: flex; }
  .bars .track span { height: 100%; }
  .bars .n { text-align: right; font-variant-numeric: tabular-nums; font-weight: 600; }
  .bars .note { grid-column: 2 / 4; color: var(--muted); font-size: 12px; margin-top: -3px; }
  table { width: 100%; border-collapse: collapse; }
  th { text-align: left; font-size: 12px; color: var(--muted); font-weight: 600; padding: 6px 8px; border-bottom: 1px solid var(--line); white-space: nowrap; }
  td { padding: 6px 8px; border-bottom: 1px solid #f0f2f6; vertical-align: top; white-space: nowrap; }
  td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
  tr.click { cursor: pointer; } tr.click:hover td { background: #f7f9fd; }
  .ellip { max-width: 240px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  .clusters h3, .gp h3 { font-size: 12px; color: var(--muted); margin: 6px 0 2px; font-weight: 600; }
  .clusters h3 b, .gp h3 b { color: var(--ink); }
  .goodput { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 22px; }
  .gp-kpis { display: flex; gap: 16px; flex-wrap: wrap; margin: 4px 0 8px; }
  .gp-kpis div { font-size: 12px; color: var(--muted); }
  .gp-kpis b { display: block; font-size: 18px; color: var(--ink); line-height: 1.15; }
  .gp-kpis .good b { color: var(--ok); }
  .more summary { cursor: pointer; color: var(--accent); font-size: 12.5px; margin-top: 4px; }
  .flag { color: var(--critical); font-weight: 700; }
  #drawer { position: fixed; top: 0; right: 0; bottom: 0; width: 620px; max-width: 95vw; background: #fff; box-shadow: -8px 0 30px rgba(17,26,46,.18);
            transform: translateX(105%); transition: transform .18s ease; overflow-y: auto; padding: 18px 22px; z-index: 10; }
  #drawer.open { transform: none; }
  #drawer h3 { margin: 0 0 4px; font-size: 16px; word-break: break-all; }
  #drawer h4 { margin: 18px 0 6px; font-size: 12.5px; text-transform: uppercase; letter-spacing: .5px; color: var(--muted); }
  #drawer .close { float: right; border: 0; background: #eef1f6; border-radius: 6px; padding: 4px 10px; cursor: pointer; }
  .timeline { border-left: 2px solid var(--line); margin-left: 6px; padding-left: 14px; }
  .timeline .ev { position: relative; margin-bottom: 10px; }
  .timeline .ev::before { content: ""; position: absolute; left: -20px; top: 5px; width: 10px; height: 10px; border-radius: 50%; background: var(--muted); }
  .timeline .ev.CRITICAL::before { background: var(--critical); } .timeline .ev.USER::before { background: var(--user); }
  .timeline .ev.WARN::before { background: var(--warn); }
  .muted { color: var(--muted); }
  #error { display: none; grid-column: span 12; background: #fff4e5; border: 1px solid #f5c27a; color: #7a4b00; border-radius: 8px; padding: 8px 12px; }
</style>
</head>
<body>
<header>
  <h1>faultline <span>· fleet health</span></h1>
  <div class="spacer"></div>
  <div class="meta" id="window"></div>
  <div class="meta" id="asof">stream time —</div>
  <div class="meta" id="watermarks" title="how far each cluster's bridge is known to have published (SPEC R12)"></div>
  <div class="meta"><span class="dot" id="dot"></span><span id="status">connecting…</span></div>
</header>
<main>
  <div id="error"></div>
  <section class="kpis" id="kpis"></section>

  <section class="card span8">
    <h2>Faults per hour <small id="hours-note"></small></h2>
    <div class="legend">
      <span><i class="sw" style="background:var(--critical)"></i>critical</span>
      <span><i class="sw" style="background:var(--user)"></i>user (workload)</span>
      <span><i class="sw" style="background:var(--warn)"></i>warn</span>
      <span><i class="sw" style="background:var(--navy)"></i>failed attempts</span>
    </div>
    <div id="chart"></div>
  </section>

  <section class="card span4">
    <h2>Quarantine candidates <small id="q-note"></small></h2>
    <div id="quarantine"></div>
  </section>

  <section class="card span4">
    <h2>Top nodes <small>distinct fault events</small></h2>
    <div class="bars" id="nodes"></div>
  </section>

  <section class="card span8">
    <h2>Recent verdicts <small>click a row for its evidence</small></h2>
    <div id="verdicts"></div>
  </section>

  <section class="card span7">
    <h2>Top GPUs</h2>
    <div id="gpus"></div>
  </section>

  <section class="card span5">
    <h2>Failures by code and kind <small id="failures-note"></small></h2>
    <div class="bars" id="failures"></div>
  </section>

  <section class="card span12">
    <h2>GPU-hours lost to failures <small id="cost-note">the GPUs each failed attempt's pods requested × how long they ran</small></h2>
    <div class="legend">
      <span><i class="sw" style="background:var(--system)"></i>system (hardware, cluster)</span>
      <span><i class="sw" style="background:var(--accent)"></i>user (workload)</span>
    </div>
    <div class="cost">
      <div><h3>per hour of failure</h3><div id="cost-chart"></div></div>
      <div><h3>by code</h3><div class="bars" id="cost-codes"></div></div>
      <div><h3>by node</h3><div class="bars" id="cost-nodes"></div></div>
      <div><h3>by namespace</h3><div class="bars" id="cost-namespaces"></div></div>
    </div>
  </section>

  <section class="card span12" id="goodput-card">
    <h2>Where the GPU-hours went <small>reserved by Kueue, running, useful, lost to failures, idle — per cluster, each on its own stream time; a pod's run counts once it ended, a hold once released</small></h2>
    <div class="legend">
      <span><i class="sw" style="background:var(--ok)"></i>useful</span>
      <span><i class="sw" style="background:var(--system)"></i>lost (system)</span>
      <span><i class="sw" style="background:var(--accent)"></i>lost (user)</span>
      <span><i class="sw" style="background:#c9d0dc"></i>idle (reserved, nothing running)</span>
    </div>
    <div id="goodput"></div>
    <div id="idle"></div>
  </section>

  <section class="card span12" id="queues-card" style="display:none">
    <h2>Gang preemptions and readmission waits <small>per queue</small></h2>
    <div id="queues"></div>
    <div id="stuck"></div>
  </section>
</main>

<aside id="drawer" aria-live="polite"></aside>

<script>
"use strict";
const POLL_MS = 3000;
const SEV = [["critical", "var(--critical)"], ["user", "var(--user)"], ["warn", "var(--warn)"]];
const $ = (id) => document.getElementById(id);

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
function when(iso) { return iso ? iso.replace("T", " ").replace(/:\d\dZ$/, "").replace(/Z$/, "") + " UTC" : "—"; }
function hhmm(iso) { return iso ? iso.slice(11, 16) : ""; }
function duration(seconds) {
  if (seconds == null) return "—";
  if (seconds < 90) return Math.round(seconds) + " s";
  if (seconds < 5400) return Math.round(seconds / 60) + " min";
  return (seconds / 3600).toFixed(1) + " h";
}
function gpuh(seconds) { return seconds == null ? "—" : (seconds / 3600).toFixed(1); }
function windowText(s) { const h = s / 3600; return Number.isInteger(h) ? h + " h" : duration(s); }
function sevChip(sev) { return sev ? `<span class="chip ${esc(sev)}">${esc(sev.toLowerCase())}</span>` : ""; }

async function getJSON(path) {
  const response = await fetch(path, {cache: "no-store"});
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

function renderKpis(f) {
  const t = f.totals, sev = t.severity;
  const kpis = [
    [t.faults, "GPU faults", `${sev.critical} critical · ${sev.user} user · ${sev.warn} warn`, false],
    [t.nodes, "nodes with faults", `${t.gpus} GPU${t.gpus === 1 ? "" : "s"} with faults`, false],
    [t.failures, "failed attempts", `${t.system_failures} system · ${t.user_failures} user`, false],
    [t.gpu_failures, "with a GPU fault", t.failures ? `${Math.round((100 * t.gpu_failures) / t.failures)}% of failures` : "", false],
    [gpuh(t.gpu_seconds), "GPU-hours lost", `${gpuh(t.system_gpu_seconds)} system · ${gpuh(t.user_gpu_seconds)} user` + (t.gpu_seconds_unknown ? ` · ${t.gpu_seconds_unknown} unknown` : ""), false],
    [t.candidates, "quarantine candidates", `≥ ${f.threshold} critical in ${windowText(f.window_seconds)}`, t.candidates > 0],
    [t.dead_letters, "dead letters", "unreadable records", t.dead_letters > 0],
  ];
  $("kpis").innerHTML = kpis.map(([value, label, detail, alert]) =>
    `<div class="card kpi${alert ? " alert" : ""}"><div class="value">${esc(value)}</div><div class="label">${esc(label)}</div><div class="detail">${esc(detail)}</div></div>`).join("");
}

function niceMax(n) {
  if (n <= 4) return 4;
  const p = Math.pow(10, Math.floor(Math.log10(n)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= n) return m * p;
  return 10 * p;
}

// One chart per cluster when there are several: each on its own stream time, so clusters
// far apart both keep bars that read (one axis over both would squeeze them to nothing).
function perCluster(id, f, draw) {
  const box = $(id), clusters = f.clusters || [];
  if (clusters.length <= 1) { draw(box, f.hours, 1); return; }
  box.innerHTML = `<div class="clusters">` + clusters.map((c, i) =>
    `<div><h3><b>${esc(c.cluster)}</b> · stream time ${esc(when(c.stream_time))}</h3><div id="${id}-${i}"></div></div>`).join("") + `</div>`;
  clusters.forEach((c, i) => draw($(`${id}-${i}`), c.hours, clusters.length));
}

function renderChart(box, hours, shown) {
  if (!hours.length) { box.innerHTML = `<div class="empty">No records yet.</div>`; return; }
  const W = Math.max(box.clientWidth, 300), H = Math.max(130, Math.round(210 / Math.min(shown || 1, 2))), L = 34, R = 10, T = 14, B = 28;
  const innerW = W - L - R, innerH = H - T - B;
  const max = niceMax(Math.max(1, ...hours.map((h) => Math.max(h.critical + h.user + h.warn, h.failures))));
  const slot = innerW / hours.length, group = Math.min(64, slot * 0.78);
  const faultW = group * 0.62, failW = group * 0.3, labels = slot >= 22;
  const y = (v) => T + innerH - (v / max) * innerH;
  let svg = `<svg width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="faults per hour">`;
  for (let i = 0; i <= 4; i++) {
    const v = (max / 4) * i, yy = y(v);
    svg += `<line x1="${L}" x2="${W - R}" y1="${yy}" y2="${yy}" stroke="#eef1f6"/>`;
    svg += `<text x="${L - 6}" y="${yy + 4}" text-anchor="end">${Number.isInteger(v) ? v : v.toFixed(1)}</text>`;
  }
  const every = Math.max(1, Math.ceil(hours.length / 12));
  hours.forEach((h, i) => {
    const x = L + slot * i + (slot - group) / 2;
    let base = 0;
    for (const [name, color] of SEV) {
      const v = h[name];
      if (v > 0) svg += `<rect x="${x}" y="${y(base + v)}" width="${faultW}" height="${y(base) - y(base + v)}" fill="${color}"><title>${esc(hhmm(h.hour))}: ${v} ${name} fault${v === 1 ? "" : "s"}</title></rect>`;
      base += v;
    }
    if (base > 0 && labels) svg += `<text x="${x + faultW / 2}" y="${y(base) - 4}" text-anchor="middle" style="fill:var(--ink);font-weight:600">${base}</text>`;
    const fx = x + group - failW;
    if (h.failures > 0) {
      svg += `<rect x="${fx}" y="${y(h.failures)}" width="${failW}" height="${y(0) - y(h.failures)}" fill="var(--navy)" opacity=".85"><title>${esc(hhmm(h.hour))}: ${h.failures} failed attempts (${h.system_failures} system)</title></rect>`;
      if (labels) svg += `<text x="${fx + failW / 2}" y="${y(h.failures) - 4}" text-anchor="middle" style="fill:var(--navy)">${h.failures}</text>`;
    }
    if (i % every === 0) {
      const label = hhmm(h.hour) + (i === 0 || h.hour.slice(11, 13) === "00" ? " " + h.hour.slice(5, 10) : "");
      svg += `<text x="${L + slot * i + slot / 2}" y="${H - B + 16}" text-anchor="middle">${esc(label)}</text>`;
    }
  });
  svg += `<line x1="${L}" x2="${W - R}" y1="${y(0)}" y2="${y(0)}" stroke="#c9d0dc"/></svg>`;
  box.innerHTML = svg;
}

// A fault Event's code (Xid 79, SXid 20034), or a device the kubelet reported (SPEC R14.2).
function faultLabel(fault) {
  if (fault.kind === "DEVICE_HEALTH") return "Device health";
  return `${fault.kind === "SXID" ? "SXid" : "Xid"} ${fault.code}`;
}

// With several clusters, a node is named with its cluster (gpu-17 of prod-a is not gpu-17 of prod-b).
let manyClusters = false;
function where(cluster, name) { return manyClusters ? `${cluster}/${name}` : name; }

function renderQuarantine(f) {
  $("q-note").textContent = `≥ ${f.threshold} critical in ${windowText(f.window_seconds)}`;
  const rows = f.quarantine;
  if (!rows.length) { $("quarantine").innerHTML = `<div class="empty">No node or GPU is a candidate.</div>`; return; }
  $("quarantine").innerHTML = rows.map((c) => `
    <div class="cand">
      <div><span class="chip scope">${esc(c.scope)}</span> <span class="who mono">${esc(where(c.cluster, c.node))}${c.gpu ? " / " + esc(c.gpu) : ""}</span></div>
      <div class="sub">${esc(c.faults)} critical faults in the window · candidate since ${esc(when(c.since))}</div>
      ${c.action && c.action !== "UNKNOWN" ? `<div class="sub">NVIDIA recommends <span class="chip action" title="the strongest recommended action among its faults (NVIDIA's Xid catalogue)">${esc(c.action)}</span></div>` : ""}
      <div>${c.codes.map((code) => `<span class="chip code">${esc(code)}</span>`).join("")}</div>
    </div>`).join("");
}

function renderNodes(nodes) {
  if (!nodes.length) { $("nodes").innerHTML = `<div class="empty">No faults in the history kept.</div>`; return; }
  const max = Math.max(...nodes.map((n) => n.faults));
  $("nodes").innerHTML = nodes.map((n) => {
    const seg = SEV.map(([name, color]) => n[name] ? `<span style="width:${(n[name] / max) * 100}%;background:${color}" title="${n[name]} ${name}"></span>` : "").join("");
    const flag = n.candidate ? ` <span class="flag" title="quarantine candidate">●</span>` : "";
    return `<div class="row"><div class="name mono" title="${esc(n.key)}">${esc(where(n.cluster, n.node))}${flag}</div><div class="track">${seg}</div><div class="n">${n.faults}</div>
      <div class="note">${n.critical} critical · top ${esc(n.top)} · ${n.gpus} GPU${n.gpus === 1 ? "" : "s"} · last ${esc(hhmm(n.last_fault_at))}</div></div>`;
  }).join("");
}

function renderGpus(gpus) {
  if (!gpus.length) { $("gpus").innerHTML = `<div class="empty">No GPU faults in the history kept.</div>`; return; }
  $("gpus").innerHTML = `<table><thead><tr><th>node</th><th>GPU</th><th class="num">faults</th><th class="num">critical</th><th class="num">user</th><th class="num">warn</th><th>top</th><th>last fault</th></tr></thead><tbody>` +
    gpus.map((g) => `<tr><td class="mono">${esc(where(g.cluster, g.node))}${g.candidate ? ' <span class="flag" title="quarantine candidate">●</span>' : ""}</td>
      <td class="mono">${esc(g.gpu)}${g.gpu_index != null ? ` <span class="muted">#${g.gpu_index}</span>` : ""}</td>
      <td class="num"><b>${g.faults}</b></td><td class="num">${g.critical}</td><td class="num">${g.user}</td><td class="num">${g.warn}</td>
      <td><span class="chip code">${esc(g.top)}</span></td><td>${esc(when(g.last_fault_at))}</td></tr>`).join("") + `</tbody></table>`;
}

function renderVerdicts(rows) {
  if (!rows.length) { $("verdicts").innerHTML = `<div class="empty">No failed attempt yet.</div>`; return; }
  $("verdicts").innerHTML = `<table><thead><tr><th>failed at</th><th>attempt</th><th>code</th><th>kind</th><th class="num" title="GPU-hours the failure burned">GPU-h</th><th>GPU fault</th><th>node</th></tr></thead><tbody>` +
    rows.map((v) => `<tr class="click" data-key="${esc(v.key)}" title="${esc(v.message)}">
      <td>${esc(hhmm(v.failed_at))} <span class="muted">${esc(v.failed_at.slice(5, 10))}</span></td>
      <td class="mono ellip" title="${esc(v.key)}">${esc(v.attempt || v.key)}${v.terminal ? "" : ` <span class="muted" title="generation ${v.generation}: not the attempt's end, it went on">restarted</span>`}${v.revision ? ` <span class="muted">r${v.revision}</span>` : ""}</td>
      <td><b>${esc(v.code)}</b></td><td><span class="kind ${esc(v.kind)}">${esc(v.kind)}</span></td>
      <td class="num">${esc(gpuh(v.gpu_seconds))}</td>
      <td>${v.fault ? `<span class="chip ${esc(v.fault.split(" ").pop())}">${esc(v.fault.split(" ").slice(0, 2).join(" "))}</span>` : '<span class="muted">—</span>'}</td>
      <td class="mono">${esc(v.node || "—")}</td></tr>`).join("") + `</tbody></table>`;
  for (const tr of $("verdicts").querySelectorAll("tr.click")) tr.addEventListener("click", () => openEvidence(tr.dataset.key));
}

// Every row (api/failures), never a silent top 10; past FAILURE_ROWS the rest fold away, counted.
const FAILURE_ROWS = 25;
function renderFailures(rows) {
  $("failures-note").textContent = rows.length ? `${rows.length} row${rows.length === 1 ? "" : "s"}` : "";
  if (!rows.length) { $("failures").innerHTML = `<div class="empty">No failures in the history kept.</div>`; return; }
  const max = Math.max(...rows.map((r) => r.failures));
  const clusters = new Set(rows.map((r) => r.cluster)).size > 1;
  const row = (r) => `<div class="row" style="grid-template-columns:minmax(0, 3fr) minmax(60px, 2fr) 30px">
      <div class="name" title="${esc(r.cluster + "/" + r.namespace)}${r.gpu_faults ? ` · ${r.gpu_faults} with a GPU fault` : ""}"><span class="kind ${esc(r.kind)}">${esc(r.kind[0])}</span> <b>${esc(r.code)}</b> <span class="muted">${esc(clusters ? r.cluster + "/" + r.namespace : r.namespace)}</span></div>
      <div class="track"><span style="width:${(r.failures / max) * 100}%;background:${r.kind === "SYSTEM" ? "var(--system)" : "var(--accent)"}"></span></div>
      <div class="n">${r.failures}</div></div>`;
  const rest = rows.slice(FAILURE_ROWS);
  $("failures").innerHTML = rows.slice(0, FAILURE_ROWS).map(row).join("") +
    (rest.length ? `<details class="more"><summary>${rest.length} more</summary>${rest.map(row).join("")}</details>` : "");
}

// Where the GPU-hours went (SPEC R17): per cluster, its figures, its hours, its namespaces and queues.
function pct(share) { return share == null ? "—" : Math.round(100 * share) + "%"; }
function renderGoodputChart(box, hours) {
  const shown = hours.filter((h) => h.reserved_gpu_seconds + h.running_gpu_seconds > 0);
  if (!shown.length) { box.innerHTML = `<div class="empty">No GPU time counted in the history kept.</div>`; return; }
  const W = Math.max(box.clientWidth, 240), H = 140, L = 40, B = 22, T = 8, innerH = H - T - B;
  const parts = (h) => [[h.useful_gpu_seconds, "var(--ok)", "useful"], [h.lost_system_gpu_seconds, "var(--system)", "lost (system)"],
    [h.lost_user_gpu_seconds, "var(--accent)", "lost (user)"], [h.idle_gpu_seconds, "#c9d0dc", "idle"]];
  const max = niceMax(Math.max(...hours.map((h) => parts(h).reduce((sum, [v]) => sum + v, 0) / 3600)));
  const slot = (W - L) / hours.length, bar = Math.max(2, Math.min(40, slot * 0.7));
  const y = (v) => T + innerH - (v / max) * innerH;
  let svg = `<svg width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="GPU-hours per hour, by where they went">`;
  svg += `<text x="${L - 6}" y="${y(max) + 4}" text-anchor="end">${max} h</text><text x="${L - 6}" y="${y(0) + 4}" text-anchor="end">0</text>`;
  hours.forEach((h, i) => {
    const x = L + slot * i + (slot - bar) / 2;
    let base = 0;
    for (const [seconds, color, name] of parts(h)) {
      const v = seconds / 3600;
      if (v > 0) svg += `<rect x="${x}" y="${y(base + v)}" width="${bar}" height="${y(base) - y(base + v)}" fill="${color}"><title>${esc(hhmm(h.hour))}: ${v.toFixed(1)} GPU-h ${name} (goodput ${pct(h.goodput)})</title></rect>`;
      base += v;
    }
  });
  svg += `<text x="${L}" y="${H - 6}">${esc(hhmm(hours[0].hour))}</text><text x="${W}" y="${H - 6}" text-anchor="end">${esc(hhmm(hours[hours.length - 1].hour))}</text>`;
  box.innerHTML = svg + `<line x1="${L}" x2="${W}" y1="${y(0)}" y2="${y(0)}" stroke="#c9d0dc"/></svg>`;
}

function renderGoodput(clusters, idle) {
  if (!clusters.length) {
    $("goodput").innerHTML = `<div class="empty">No GPU time counted yet: a pod's run counts once it ended, a hold once released.</div>`;
  } else {
    $("goodput").innerHTML = `<div class="goodput">` + clusters.map((c, i) => {
      const t = c.totals, lost = t.lost_system_gpu_seconds + t.lost_user_gpu_seconds;
      const kpi = (value, label, cls) => `<div class="${cls || ""}"><b>${esc(value)}</b>${esc(label)}</div>`;
      return `<div class="gp"><h3><b>${esc(c.cluster)}</b> · stream time ${esc(when(c.stream_time))}</h3>
        <div class="gp-kpis">${kpi(pct(t.goodput), t.reserved_gpu_seconds ? "goodput (useful ÷ reserved)" : "goodput (useful ÷ running)", "good")}
          ${kpi(gpuh(t.reserved_gpu_seconds), "GPU-h reserved")}${kpi(gpuh(t.running_gpu_seconds), "running")}${kpi(gpuh(t.useful_gpu_seconds), "useful")}
          ${kpi(gpuh(lost), `lost (${gpuh(t.lost_system_gpu_seconds)} system)`)}${kpi(gpuh(t.idle_gpu_seconds), "idle")}${kpi(t.waits ? duration(t.wait_seconds) : "—", `waited (${t.waits} readmission${t.waits === 1 ? "" : "s"})`)}</div>
        <div id="gp-chart-${i}"></div>
        <table><thead><tr><th>namespace</th><th>queue</th><th class="num">reserved</th><th class="num">running</th><th class="num">useful</th><th class="num">lost</th><th class="num">idle</th><th class="num">goodput</th></tr></thead><tbody>` +
        c.rows.map((r) => `<tr><td class="mono">${esc(r.namespace)}</td><td class="mono">${esc(r.queue || "—")}</td><td class="num">${gpuh(r.reserved_gpu_seconds)}</td><td class="num">${gpuh(r.running_gpu_seconds)}</td>
          <td class="num">${gpuh(r.useful_gpu_seconds)}</td><td class="num">${gpuh(r.lost_system_gpu_seconds + r.lost_user_gpu_seconds)}</td><td class="num">${gpuh(r.idle_gpu_seconds)}</td><td class="num"><b>${pct(r.goodput)}</b></td></tr>`).join("") +
        `</tbody></table></div>`;
    }).join("") + `</div>`;
    clusters.forEach((c, i) => renderGoodputChart($(`gp-chart-${i}`), c.hours));
  }
  $("idle").innerHTML = idle.length ? `<h3>Idle quota now <small class="muted">held past max_idle_quota with nothing running, or evicted and still held</small></h3><table><thead><tr><th>attempt</th><th>queue</th><th>workload</th><th class="num">GPUs</th><th>since</th><th>why</th></tr></thead><tbody>` +
    idle.map((r) => `<tr><td class="mono ellip" title="${esc(r.key)}">${esc(r.attempt)}</td><td class="mono">${esc(r.cluster)}/${esc(r.queue)}</td><td class="mono">${esc(r.workload)}</td>
      <td class="num">${r.gpus}</td><td>${esc(when(r.since))}</td><td title="${esc(r.reason)}">${esc(r.why)}</td></tr>`).join("") + `</tbody></table>` : "";
}

// GPU-hours lost (issue 30): stacked system/user bars per hour, then bars by code, node, namespace.
function costBars(id, rows, empty) {
  if (!rows.length) { $(id).innerHTML = `<div class="empty">${esc(empty)}</div>`; return; }
  const max = Math.max(...rows.map((r) => r.gpu_seconds), 1);
  $(id).innerHTML = rows.map((r) => `<div class="row" style="grid-template-columns:120px 1fr 44px">
      <div class="name mono" title="${esc(r.key)} · ${r.failures} failure${r.failures === 1 ? "" : "s"}">${esc(r.key)}</div>
      <div class="track"><span style="width:${(r.system_gpu_seconds / max) * 100}%;background:var(--system)" title="${gpuh(r.system_gpu_seconds)} GPU-h system"></span><span style="width:${(r.user_gpu_seconds / max) * 100}%;background:var(--accent)" title="${gpuh(r.user_gpu_seconds)} GPU-h user"></span></div>
      <div class="n">${gpuh(r.gpu_seconds)}</div></div>`).join("");
}

function renderCostChart(box, hours) {
  const shown = hours.filter((h) => h.system_gpu_seconds + h.user_gpu_seconds > 0);
  if (!shown.length) { box.innerHTML = `<div class="empty">No GPU time lost in the history kept.</div>`; return; }
  const W = Math.max(box.clientWidth, 240), H = 150, L = 34, B = 22, T = 8, innerH = H - T - B;
  const max = niceMax(Math.max(...hours.map((h) => (h.system_gpu_seconds + h.user_gpu_seconds) / 3600)));
  const slot = (W - L) / hours.length, bar = Math.max(2, Math.min(40, slot * 0.7));
  const y = (v) => T + innerH - (v / max) * innerH;
  let svg = `<svg width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="GPU-hours lost per hour">`;
  svg += `<text x="${L - 6}" y="${y(max) + 4}" text-anchor="end">${max}</text><text x="${L - 6}" y="${y(0) + 4}" text-anchor="end">0</text>`;
  hours.forEach((h, i) => {
    const x = L + slot * i + (slot - bar) / 2, sys = h.system_gpu_seconds / 3600, usr = h.user_gpu_seconds / 3600;
    if (sys > 0) svg += `<rect x="${x}" y="${y(sys)}" width="${bar}" height="${y(0) - y(sys)}" fill="var(--system)"><title>${esc(hhmm(h.hour))}: ${sys.toFixed(1)} GPU-h system</title></rect>`;
    if (usr > 0) svg += `<rect x="${x}" y="${y(sys + usr)}" width="${bar}" height="${y(sys) - y(sys + usr)}" fill="var(--accent)"><title>${esc(hhmm(h.hour))}: ${usr.toFixed(1)} GPU-h user</title></rect>`;
  });
  svg += `<text x="${L}" y="${H - 6}">${esc(hhmm(hours[0].hour))}</text><text x="${W}" y="${H - 6}" text-anchor="end">${esc(hhmm(hours[hours.length - 1].hour))}</text>`;
  box.innerHTML = svg + `<line x1="${L}" x2="${W}" y1="${y(0)}" y2="${y(0)}" stroke="#c9d0dc"/></svg>`;
}

function renderCost(f) {
  const t = f.totals;
  $("cost-note").textContent = `${gpuh(t.gpu_seconds)} GPU-h in the history kept: ${gpuh(t.system_gpu_seconds)} system, ${gpuh(t.user_gpu_seconds)} user` +
    (t.gpu_seconds_unknown ? ` (${t.gpu_seconds_unknown} failure${t.gpu_seconds_unknown === 1 ? "" : "s"} with no known start)` : "");
  perCluster("cost-chart", f, renderCostChart);
  costBars("cost-codes", f.cost.by_code, "No failures in the history kept.");
  costBars("cost-nodes", f.cost.by_node, "No GPU time lost on any node.");
  costBars("cost-namespaces", f.cost.by_namespace, "No failures in the history kept.");
}

function renderStuck(rows) {
  $("stuck").innerHTML = rows.length ? `<h3>Waiting for readmission past the limit</h3><table><thead><tr><th>attempt</th><th>queue</th><th>since</th><th class="num">waited</th><th>why</th></tr></thead><tbody>` +
    rows.map((r) => `<tr><td class="mono">${esc(r.attempt)}</td><td class="mono">${esc(r.cluster)}/${esc(r.queue)}</td><td>${esc(when(r.since))}</td>
      <td class="num">${esc(duration(r.waited_seconds))}</td><td>${esc(r.reason)}</td></tr>`).join("") + `</tbody></table>` : "";
}

function renderQueues(rows, stuck) {
  $("queues-card").style.display = rows.length || stuck.length ? "" : "none";
  renderStuck(stuck);
  if (!rows.length) return;
  $("queues").innerHTML = `<table><thead><tr><th>queue</th><th class="num">preemptions</th><th class="num">evictions</th><th class="num">readmitted</th><th class="num">waiting now</th><th class="num">avg wait</th><th class="num">max wait</th></tr></thead><tbody>` +
    rows.map((q) => `<tr><td class="mono">${esc(q.cluster)}/${esc(q.queue)}${q.queue_source === "namespace" ? ' <span class="muted">(namespace)</span>' : ""}</td>
      <td class="num">${q.preemptions}</td><td class="num">${q.evictions}</td><td class="num">${q.readmissions}</td><td class="num">${q.waiting}</td>
      <td class="num">${esc(duration(q.wait_seconds_avg))}</td><td class="num">${esc(duration(q.wait_seconds_max))}</td></tr>`).join("") + `</tbody></table>`;
}

async function openEvidence(key) {
  const drawer = $("drawer");
  drawer.innerHTML = `<button class="close" onclick="closeEvidence()">close</button><h3 class="mono">${esc(key)}</h3><div class="muted">loading…</div>`;
  drawer.classList.add("open");
  history.replaceState(null, "", "#attempt=" + key);
  try {
    const e = await getJSON("api/attempts/" + key.split("/").map(encodeURIComponent).join("/"));
    const v = e.current;
    let html = `<button class="close" onclick="closeEvidence()">close</button><h3 class="mono">${esc(e.key)}</h3>`;
    if (v && v.identity === "workload") html += `<div class="muted">${esc(v.tracked.kind)} <span class="mono">${esc(v.tracked.name)}</span> · uid <span class="mono">${esc(v.tracked.uid)}</span></div>`;
    if (v) html += `<div><b>${esc(v.code)}</b> <span class="kind ${esc(v.kind)}">${esc(v.kind)}</span> <span class="muted">failed ${esc(when(v.failed_at))} · ${esc(gpuh(v.gpu_seconds))} GPU-hours lost</span></div><p>${esc(v.message)}</p>` +
      (v.reasons.length ? `<ul>${v.reasons.map((r) => `<li>${esc(r)}</li>`).join("")}</ul>` : "");
    html += `<h4>Faults in time order</h4>` + (e.faults.length ? `<div class="timeline">` + e.faults.map((f) => `<div class="ev ${esc(f.fault.severity)}">
        <div><b>${esc(faultLabel(f.fault))}</b> ${esc(f.fault.name)} ${sevChip(f.fault.severity)}${f.fault.action && f.fault.action !== "UNKNOWN" ? ` <span class="chip action" title="NVIDIA's recommended action">${esc(f.fault.action)}</span>` : ""}</div>
        <div class="muted">${esc(when(f.fault.first_seen))}${f.fault.count > 1 ? ` · ×${f.fault.count} until ${esc(hhmm(f.fault.last_seen))}` : ""}${f.fault.kind === "DEVICE_HEALTH" ? ` · seen until ${esc(hhmm(f.fault.last_seen))}` : ""} · pod <span class="mono">${esc(f.fault.pod.name)}</span> · ${esc(f.fault.node)} ${esc(f.fault.gpu_uuid)}${f.fault.message ? ` · ${esc(f.fault.message)}` : ""}</div></div>`).join("") + `</div>`
      : `<div class="muted">No GPU fault recorded on its pods.</div>`);
    html += `<h4>Pods</h4><table><thead><tr><th>pod</th><th>node</th><th>phase</th><th class="num">faults</th></tr></thead><tbody>` +
      e.pods.map((p) => `<tr><td class="mono">${esc(p.name)}</td><td class="mono">${esc(p.node || "—")}</td><td>${esc(p.phase || "—")}</td><td class="num">${p.faults}</td></tr>`).join("") + `</tbody></table>`;
    html += `<h4>Verdict revisions</h4><table><thead><tr><th>rev</th><th>code</th><th>kind</th><th>gen</th><th>failed at</th></tr></thead><tbody>` +
      e.verdicts.map((r) => `<tr><td>${r.revision}</td><td><b>${esc(r.code)}</b></td><td><span class="kind ${esc(r.kind)}">${esc(r.kind)}</span></td><td>${r.generation}${r.terminal ? "" : " (restarted)"}</td><td>${esc(when(r.failed_at))}</td></tr>`).join("") + `</tbody></table>`;
    drawer.innerHTML = html;
  } catch (err) {
    drawer.innerHTML = `<button class="close" onclick="closeEvidence()">close</button><h3 class="mono">${esc(key)}</h3><p>${esc(err.message)}</p>`;
  }
}
function closeEvidence() { $("drawer").classList.remove("open"); history.replaceState(null, "", location.pathname + location.search); }
document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeEvidence(); });

let last = null;
async function refresh() {
  try {
    const [fleet, verdicts, marks, failures] = await Promise.all([getJSON("api/fleet"), getJSON("api/verdicts?limit=10"), getJSON("api/progress"), getJSON("api/failures")]);
    last = fleet;
    $("asof").textContent = "stream time " + when(fleet.stream_time);
    const least = {};
    for (const m of marks) if (!(m.cluster in least) || m.at < least[m.cluster]) least[m.cluster] = m.at;
    $("watermarks").textContent = Object.keys(least).sort().map((c) => `${c} watermark ${least[c].startsWith("9999") ? "end of input" : when(least[c])}`).join(" · ");
    $("window").textContent = `history ${fleet.history_hours} h`;
    $("hours-note").textContent = (fleet.clusters || []).length > 1 ? "per cluster, each on its own stream time"
      : fleet.hours.length ? `${when(fleet.hours[0].hour)} → ${hhmm(fleet.hours[fleet.hours.length - 1].hour)}` : "";
    manyClusters = (fleet.clusters || []).length > 1;
    renderKpis(fleet);
    perCluster("chart", fleet, renderChart);
    renderQuarantine(fleet);
    renderNodes(fleet.nodes);
    renderGpus(fleet.gpus);
    renderVerdicts(verdicts);
    renderFailures(failures);
    renderCost(fleet);
    renderGoodput(fleet.goodput || [], fleet.idle_quota || []);
    renderQueues(fleet.queues, fleet.stuck || []);
    $("dot").className = "dot live";
    $("status").textContent = "live · updated " + new Date().toLocaleTimeString();
    $("error").style.display = "none";
  } catch (err) {
    $("dot").className = "dot down";
    $("status").textContent = "disconnected";
    $("error").style.display = "block";
    $("error").textContent = "Cannot load the fleet views (" + err.message + "); retrying every " + POLL_MS / 1000 + " s.";
  }
}
window.addEventListener("resize", () => { if (last) { perCluster("chart", last, renderChart); perCluster("cost-chart", last, renderCostChart); renderGoodput(last.goodput || [], last.idle_quota || []); } });
refresh().then(() => {
  const linked = decodeURIComponent(location.hash).match(/^#attempt=(.+)$/);
  if (linked) openEvidence(linked[1]);
});
setInterval(refresh, POLL_MS);
</script>
</body>
</html>
"""
