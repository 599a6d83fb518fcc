// The live page's HTML, script and style (dashboard.h). The script polls /api/topology and /api/curves
// once a second and draws with Chart.js (served from Debian's libjs-chart.js at /chart.js).
namespace troupe::launch::dashboard_page {

extern const char* const kHtml;
extern const char* const kScript;
extern const char* const kStyle;

const char* const kHtml = R"PAGE(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>troupe run</title>
<link rel="stylesheet" href="app.css">
<script src="chart.js"></script>
<script src="app.js" defer></script>
</head>
<body>
<header>
  <h1>troupe run</h1>
  <span id="summary">connecting&hellip;</span>
  <span id="status"></span>
</header>
<main>
  <section>
    <h2>Topology</h2>
    <div id="topology"></div>
  </section>
  <section>
    <h2>Training curves</h2>
    <div id="curves"><p class="muted">no scalars yet (metrics::SummaryWriter writes them)</p></div>
  </section>
  <section>
    <h2>Parameter placement</h2>
    <div id="models"><p class="muted">no model watched (launch::watch_model)</p></div>
  </section>
  <section>
    <h2>Collectives</h2>
    <div id="collectives"><p class="muted">none yet</p></div>
  </section>
</main>
</body>
</html>
)PAGE";

const char* const kStyle = R"PAGE(
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f5f6f8; }
header { display: flex; gap: 1.5em; align-items: baseline; padding: 0.6em 1.2em; background: #1d2330; color: #fff; }
header h1 { font-size: 1.2em; margin: 0; }
#status { margin-left: auto; color: #9fb3c8; }
#status.bad { color: #ff8a80; }
main { padding: 0.5em 1.2em 2em; }
h2 { font-size: 1.05em; margin: 1.2em 0 0.4em; }
.hosts { display: flex; flex-wrap: wrap; gap: 1em; }
.host { background: #fff; border: 1px solid #d5d9e0; border-radius: 6px; padding: 0.5em 0.8em; }
.host h3 { font-size: 1em; margin: 0.2em 0 0.4em; }
.rank { margin: 0.4em 0 0.8em; }
.rank h4 { font-size: 0.95em; margin: 0 0 0.2em; color: #3d4a5c; }
table { border-collapse: collapse; background: #fff; }
th, td { padding: 0.15em 0.6em; border-bottom: 1px solid #e3e6eb; text-align: left; white-space: nowrap; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
th { font-weight: 600; color: #3d4a5c; }
.busy { color: #c77700; font-weight: 600; }
.err { color: #c62828; white-space: normal; max-width: 32em; }
.modules { margin: 0.1em 0 0.3em 1em; padding: 0; list-style: none; color: #3d4a5c; font-family: ui-monospace, monospace; font-size: 0.9em; }
.muted { color: #7a8596; }
#curves { display: flex; flex-wrap: wrap; gap: 1em; }
.curve { background: #fff; border: 1px solid #d5d9e0; border-radius: 6px; padding: 0.4em 0.6em; width: 420px; }
.curve h3 { font-size: 0.95em; margin: 0 0 0.2em; font-family: ui-monospace, monospace; }
.curve canvas { width: 400px; height: 220px; }
.points { color: #7a8596; font-size: 0.85em; }
)PAGE";

const char* const kScript = R"PAGE(
'use strict';
// The token: from the address (?token=...), else the cookie the page was served with.
const token = new URLSearchParams(location.search).get('token');
const q = (path, params) => {
  const p = new URLSearchParams(params || {});
  if (token) p.set('token', token);
  const s = p.toString();
  return s ? path + '?' + s : path;
};
const $ = (id) => document.getElementById(id);
const el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
};
const fmt = (x, d) => (x === null || x === undefined) ? '\u2013' : Number(x).toFixed(d === undefined ? 2 : d);
const table = (head, rows) => {
  const t = el('table', {}, el('tr', {}, ...head.map((h) => el('th', {}, h))));
  for (const r of rows) t.append(r);
  return t;
};

function renderTopology(t) {
  const run = t.run;
  const up = Math.max(0, run.now - run.started_at);
  $('summary').textContent = `${run.size} rank${run.size === 1 ? '' : 's'} \u00b7 backend ${run.backend} \u00b7 launched on ${run.host} \u00b7 up ${up.toFixed(0)} s`;
  const hosts = new Map();
  for (const r of t.ranks) {
    if (!hosts.has(r.host)) hosts.set(r.host, []);
    hosts.get(r.host).push(r);
  }
  const box = el('div', {class: 'hosts'});
  for (const [host, ranks] of hosts) {
    const h = el('div', {class: 'host', 'data-host': host}, el('h3', {}, 'host ' + host));
    for (const r of ranks) {
      const div = el('div', {class: 'rank', 'data-rank': r.rank}, el('h4', {}, `rank ${r.rank} \u00b7 pid ${r.pid}`));
      if (r.actors.length === 0) {
        div.append(el('p', {class: 'muted'}, run.actors ? 'no named actors' : 'actors off'));
      } else {
        const rows = [];
        for (const a of r.actors) {
          const name = el('td', {}, el('b', {}, a.id));
          if (a.modules.length) {
            const ul = el('ul', {class: 'modules'});
            for (const m of a.modules) ul.append(el('li', {class: 'module'}, m));
            name.append(ul);
          }
          rows.push(el('tr', {class: 'actor', 'data-actor': a.id}, name, el('td', {}, a.factory),
                       el('td', {class: 'n'}, a.messages), el('td', {class: 'n rate'}, fmt(a.rate, 1)),
                       el('td', {class: 'n queued'}, a.queued),
                       el('td', {class: 'n'}, fmt(100 * a.busy_fraction, 1) + ' %'),
                       el('td', {class: a.busy ? 'busy' : 'muted'}, a.busy ? 'in ' + a.method : 'idle'),
                       el('td', {class: 'n'}, a.errors), el('td', {class: 'err'}, a.last_error)));
        }
        div.append(table(['actor', 'factory', 'messages', 'msg/s', 'queued', 'busy', 'now', 'errors', 'last error'], rows));
      }
      h.append(div);
    }
    box.append(h);
  }
  if (t.error) box.append(el('p', {class: 'err'}, t.error));
  $('topology').replaceChildren(box);

  if (t.models.length) {
    const out = [];
    for (const m of t.models) {
      const rows = m.params.map((p) => el('tr', {class: 'param'}, el('td', {}, p.name), el('td', {}, p.shape),
                                          el('td', {class: 'n'}, p.numel), el('td', {}, p.placement)));
      out.push(el('h3', {}, m.name), table(['parameter', 'shape', 'elements', 'placement'], rows));
    }
    $('models').replaceChildren(...out);
  }
  if (t.collectives.length) {
    const rows = t.collectives.map((c) => el('tr', {class: 'collective'},
      el('td', {}, c.group), el('td', {class: 'n'}, `${c.rank}/${c.size}`), el('td', {}, c.backend), el('td', {}, c.op),
      el('td', {class: 'n'}, c.count), el('td', {class: 'n'}, fmt(c.bytes / 1e6, 3)),
      el('td', {class: 'n'}, c.completed ? fmt(1e3 * c.total_seconds / c.completed, 3) : '\u2013'),
      el('td', {class: 'n'}, fmt(1e3 * c.last_seconds, 3)), el('td', {class: 'n'}, fmt(1e3 * c.max_seconds, 3)),
      el('td', {}, `${c.host} pid ${c.pid}`)));
    $('collectives').replaceChildren(table(['group', 'rank', 'backend', 'op', 'count', 'MB', 'mean ms', 'last ms',
                                             'max ms', 'process'], rows));
  }
}

// Curves: one chart per tag, x = step; points arrive incrementally (cursor, generation).
const curves = {cursor: 0, generation: 0, charts: new Map()};
function chartFor(tag) {
  let c = curves.charts.get(tag);
  if (c) return c;
  const box = $('curves');
  if (curves.charts.size === 0) box.replaceChildren();
  const canvas = el('canvas', {width: 400, height: 220});
  const count = el('span', {class: 'points', 'data-tag': tag}, '0 points');
  const div = el('div', {class: 'curve', 'data-tag': tag}, el('h3', {}, tag, ' ', count), canvas);
  box.append(div);
  c = {points: [], count, div, chart: null};
  if (window.Chart) {
    c.chart = new Chart(canvas, {
      type: 'line',
      data: {datasets: [{label: tag, data: c.points, borderColor: '#1565c0', backgroundColor: '#1565c0',
                         borderWidth: 1.5, pointRadius: 0, tension: 0}]},
      options: {animation: false, responsive: false, parsing: false, normalized: true,
                scales: {x: {type: 'linear', title: {display: true, text: 'step'}}},
                plugins: {legend: {display: false}}},
    });
    div.dataset.chart = 'chartjs';
  } else {
    div.append(el('p', {class: 'err'}, 'Chart.js is not installed (apt-get install libjs-chart.js)'));
  }
  curves.charts.set(tag, c);
  return c;
}
function renderCurves(d) {
  if (d.reset) for (const c of curves.charts.values()) c.points.length = 0;
  for (const [tag, rows] of Object.entries(d.tags)) {
    const c = chartFor(tag);
    for (const [step, value] of rows) c.points.push({x: step, y: value});
  }
  for (const c of curves.charts.values()) {
    c.count.textContent = `${c.points.length} points`;
    c.div.dataset.points = c.points.length;
    if (c.chart) c.chart.update('none');
  }
  curves.cursor = d.cursor;
  curves.generation = d.generation;
}

async function poll() {
  try {
    const [t, c] = await Promise.all([
      fetch(q('api/topology'), {credentials: 'same-origin'}),
      fetch(q('api/curves', {cursor: curves.cursor, generation: curves.generation}), {credentials: 'same-origin'}),
    ]);
    if (!t.ok || !c.ok) throw new Error(`HTTP ${t.ok ? c.status : t.status}`);
    renderTopology(await t.json());
    renderCurves(await c.json());
    $('status').textContent = 'updated ' + new Date().toLocaleTimeString();
    $('status').className = '';
  } catch (e) {
    $('status').textContent = 'run not reachable (' + e.message + '); retrying';
    $('status').className = 'bad';
  }
  setTimeout(poll, 1000);
}
poll();
)PAGE";

}  // namespace troupe::launch::dashboard_page
