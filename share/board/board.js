// tfm board's page: polls /api/runs and, for the ticked runs, /api/metrics?since=STEP (only the new
// points), draws them with Chart.js, and asks /api/model/* for samples and attention maps.
'use strict';

const POLL_MS = 1500;
const CHARTS = [
  // train: the mean over each log interval, the loss the log line shows (train_loss is its last batch)
  { id: 'loss', title: 'loss (train: mean of each log interval; val)', keys: ['train_loss_avg', 'val_loss'],
    labels: { train_loss_avg: 'train', val_loss: 'val' } },
  { id: 'lr', title: 'learning rate', keys: ['lr'], beginAtZero: true },
  { id: 'grad_norm', title: 'grad norm', keys: ['grad_norm'] },
  { id: 'tokens_per_s', title: 'tokens/s', keys: ['tokens_per_s'] },
  { id: 'mfu', title: 'MFU', keys: ['mfu'] },
];
// Every other series a run logs gets a chart of its own once a ticked run has it (val accuracy and BLEU,
// the last batch's train loss, ms per step, ...); the clocks the x axis reads have none.
const DRAWN = new Set(CHARTS.flatMap((c) => c.keys).concat(['elapsed_s', 'training_s']));
const TITLES = {
  val_accuracy: 'val accuracy', val_bleu: 'val BLEU',
  train_loss: 'train loss (the last batch of each log interval)', ms_per_step: 'ms per step',
  train_mtp_loss: 'multi-token prediction loss', mtp_weight: 'multi-token prediction weight',
  seconds_to_target: 'seconds to the target loss',
};
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];

const state = {
  runs: [],              // the latest /api/runs listing
  selected: new Set(),   // run names ticked
  series: {},            // run -> key -> {step: [], time: [], value: []}
  lastStep: {},          // run -> the last step fetched
  lastId: {},            // run -> the server's identity of the record at that step (last_id)
  sortKey: 'name', sortDesc: false,
  charts: {},            // chart id -> Chart
  boxes: {},             // chart id -> its box on the page
  extra: [],             // the charts of the other series, in order of appearance
  polls: 0,
};

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, text) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
};

async function getJSON(url, options) {
  const res = await fetch(url, options);
  const body = await res.json().catch(() => ({ error: `HTTP ${res.status}` }));
  if (!res.ok) throw new Error(body.error || `HTTP ${res.status}`);
  return body;
}

function fmtNumber(v, digits = 4) { return v === null || v === undefined ? '-' : Number(v).toFixed(digits); }
function fmtCount(n) {
  if (n === null || n === undefined) return '-';
  if (n >= 1e6) return (n / 1e6).toFixed(1) + 'M';
  if (n >= 1e3) return (n / 1e3).toFixed(1) + 'k';
  return String(Math.round(n));
}
function fmtAge(t) {
  const s = Math.max(0, Date.now() / 1000 - t);
  if (!t) return '-';
  if (s < 120) return `${Math.round(s)}s ago`;
  if (s < 7200) return `${Math.round(s / 60)}m ago`;
  if (s < 172800) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

// ---- runs table ----
function sortedRuns() {
  const k = state.sortKey;
  const runs = [...state.runs];
  runs.sort((a, b) => {
    const x = a[k], y = b[k];
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    const c = typeof x === 'string' ? x.localeCompare(y) : x - y;
    return state.sortDesc ? -c : c;
  });
  return runs;
}

function renderRuns() {
  const body = $('#runs-table tbody');
  body.replaceChildren();
  for (const r of sortedRuns()) {
    const tr = el('tr', { 'data-run': r.name });
    if (r.problems.length) { tr.classList.add('problem'); tr.title = r.problems.join('\n'); }
    const box = el('input', { type: 'checkbox' });
    box.checked = state.selected.has(r.name);
    box.addEventListener('change', () => toggleRun(r.name, box.checked));
    const td0 = el('td'); td0.append(box); tr.append(td0);
    const status = el('td', { class: 'status status-' + r.status.split(':')[0] }, r.status);
    if (r.status_detail) status.title = r.status_detail;
    tr.append(el('td', { class: 'name' }, r.name), el('td', {}, r.objective || '-'),
      el('td', {}, fmtCount(r.parameters)), status,
      el('td', { class: 'step' }, `${r.step}/${r.max_steps > 0 ? r.max_steps : '?'}`), el('td', {}, fmtNumber(r.best_val_loss)),
      el('td', { class: 'score' }, fmtNumber(r.best_val_accuracy, 3)), el('td', { class: 'score' }, fmtNumber(r.best_val_bleu, 1)),
      el('td', {}, r.seconds_to_target === null ? '-' : r.seconds_to_target.toFixed(1) + 's'),
      el('td', {}, fmtCount(r.tokens_per_s)), el('td', {}, fmtAge(r.last_update)));
    body.append(tr);
  }
  // Accuracy and BLEU columns only when a run logs them (masked_lm, seq2seq).
  const scores = state.runs.some((r) => r.best_val_accuracy !== null || r.best_val_bleu !== null);
  $('#runs-table').classList.toggle('no-scores', !scores);
  // The run pickers of the config and model panels.
  for (const id of ['#config-run', '#model-run']) {
    const sel = $(id), keep = sel.value;
    sel.replaceChildren(...state.runs.map((r) => el('option', { value: r.name }, r.name)));
    if (keep && state.runs.some((r) => r.name === keep)) sel.value = keep;
  }
  updateModelControls();
}

function toggleRun(name, on) {
  if (on) state.selected.add(name); else state.selected.delete(name);
  if (!on) { delete state.series[name]; delete state.lastStep[name]; delete state.lastId[name]; }
  pollMetrics().then(drawCharts);
  renderDiff();
}

// ---- curves ----
function smooth(values, alpha) {
  if (!alpha) return values;
  let s = null; const out = [];
  for (const v of values) {
    if (v === null) { out.push(null); continue; }
    s = s === null ? v : alpha * s + (1 - alpha) * v;
    out.push(s);
  }
  return out;
}

function makeChart(c) {
  const box = el('div', { class: 'chart' });
  const canvas = el('canvas', { id: 'chart-' + c.id });
  box.append(canvas);
  $('#charts').append(box);
  state.boxes[c.id] = box;
  state.charts[c.id] = new Chart(canvas, {
    type: 'line',
    data: { datasets: [] },
    options: {
      animation: false, parsing: false, normalized: true, maintainAspectRatio: false,
      plugins: { title: { display: true, text: c.title }, legend: { labels: { boxWidth: 12 } } },
      elements: { point: { radius: 0 }, line: { borderWidth: 1.5 } },
      // grace: room above and below the data, so that no curve runs along the chart's edge, where
      // half its line is clipped (a schedule's peak learning rate did).
      scales: {
        x: { type: 'linear', title: { display: true, text: 'step' } },
        y: { type: 'linear', grace: '5%', beginAtZero: Boolean(c.beginAtZero) },
      },
    },
  });
}

function makeCharts() {
  if (!window.Chart) {
    $('#chart-note').textContent = window.TFM_NO_CHARTS || 'Chart.js did not load.';
    return;
  }
  for (const c of CHARTS) makeChart(c);
}

// A chart for each series of a ticked run that none has yet: evaluation figures first.
function addSeriesCharts() {
  if (!window.Chart) return;
  const known = new Set(state.extra.map((c) => c.keys[0]));
  const keys = new Set();
  for (const run of state.selected)
    for (const key of Object.keys(state.series[run] || {})) if (!DRAWN.has(key) && !known.has(key)) keys.add(key);
  const order = (k) => (k.startsWith('val_') ? '0' : '1') + k;
  for (const key of [...keys].sort((a, b) => order(a).localeCompare(order(b)))) {
    const c = { id: 'series-' + key, title: TITLES[key] || key.replace(/_/g, ' '), keys: [key] };
    state.extra.push(c);
    makeChart(c);
  }
}

function drawCharts() {
  const xKey = $('#x-axis').value;
  const alpha = Number($('#smoothing').value);
  const logY = $('#log-scale').checked;
  [...state.selected].forEach((run, i) => { state.colors = state.colors || {}; state.colors[run] = COLORS[i % COLORS.length]; });
  addSeriesCharts();
  for (const c of CHARTS.concat(state.extra)) {
    const chart = state.charts[c.id];
    if (!chart) continue;
    const datasets = [];
    for (const run of state.selected) {
      const s = state.series[run] || {};
      c.keys.forEach((key, k) => {
        const d = s[key];
        if (!d || !d.value.length) return;
        const evaluation = key.startsWith('val_');  // a point per evaluation: dots, never smoothed
        const ys = evaluation ? d.value : smooth(d.value, alpha);
        const xs = d[xKey];
        datasets.push({
          label: c.keys.length > 1 ? `${run} ${c.labels[key]}` : run,
          data: xs.map((x, j) => ({ x, y: ys[j] })),
          borderColor: state.colors[run], backgroundColor: state.colors[run],
          borderDash: k === 1 ? [5, 3] : [], pointRadius: evaluation ? 2 : 0,
        });
      });
    }
    // A series' own chart shows while a ticked run has it.
    if (c.id.startsWith('series-')) state.boxes[c.id].hidden = !datasets.length;
    chart.data.datasets = datasets;
    chart.options.scales.x.title.text = xKey === 'step' ? 'step' : 'wall time (s)';
    chart.options.scales.y.type = logY ? 'logarithmic' : 'linear';
    chart.update('none');
  }
}

// Only the points past the last step fetched. With them goes the identity of the record the page holds
// last (since_id): a run resumed from an earlier checkpoint rewrote its log past that checkpoint, the
// server answers with the whole series again ("reset"), and the page drops what it held.
// One metrics fetch at a time: two at once (the poll's, and a tick's meanwhile) would both ask from the
// same step and append the same points twice; queued, the second asks from where the first ended.
let metricsQueue = Promise.resolve();
function pollMetrics() {
  metricsQueue = metricsQueue.then(fetchMetrics, fetchMetrics);
  return metricsQueue;
}

async function fetchMetrics() {
  await Promise.all([...state.selected].map(async (run) => {
    const since = state.lastStep[run] ?? -1;
    const id = state.lastId[run];
    let m;
    try {
      m = await getJSON(`/api/metrics?run=${encodeURIComponent(run)}&since=${since}` +
        (since >= 0 && id ? `&since_id=${encodeURIComponent(id)}` : ''));
    } catch (e) { return; }
    if (!state.selected.has(run)) return;  // unticked meanwhile
    if (m.reset) state.series[run] = {};
    const s = state.series[run] || (state.series[run] = {});
    for (const [key, d] of Object.entries(m.series)) {
      const t = s[key] || (s[key] = { step: [], time: [], value: [] });
      t.step.push(...d.step); t.time.push(...d.time); t.value.push(...d.value);
    }
    state.lastStep[run] = m.last_step;
    state.lastId[run] = m.last_id;
  }));
}

// ---- config diff ----
async function renderDiff() {
  const runs = [...state.selected];
  const box = $('#diff');
  if (runs.length < 2) { box.replaceChildren(el('p', { class: 'note' }, 'Tick two or more runs.')); return; }
  try {
    const q = runs.map((r) => 'run=' + encodeURIComponent(r)).join('&');
    const d = await getJSON('/api/diff?' + q);
    const without = d.runs.filter((r, i) => d.missing_config[i]);
    const note = without.length ? ` (${without.join(', ')}: no readable config.json)` : '';
    if (!d.keys.length) { box.replaceChildren(el('p', {}, 'Their configs are the same.' + note)); return; }
    const table = el('table', { id: 'diff-table' });
    const head = el('tr');
    head.append(el('th', {}, 'key'), ...d.runs.map((r, i) => el('th', {}, r + (d.missing_config[i] ? ' (no config.json)' : ''))));
    table.append(head);
    for (const row of d.keys) {
      const tr = el('tr'); tr.append(el('td', {}, row.key));
      row.values.forEach((v, i) => tr.append(el('td', {},
        d.missing_config[i] ? '-' : v === null ? '(absent)' : JSON.stringify(v))));
      table.append(tr);
    }
    box.replaceChildren(table);
  } catch (e) { box.replaceChildren(el('p', { class: 'error' }, e.message)); }
}

// ---- inside the model ----
function runByName(name) { return state.runs.find((r) => r.name === name); }
function updateModelControls() {
  const r = runByName($('#model-run').value);
  const objective = r ? r.objective : '';
  const label = { causal_lm: 'sample', masked_lm: 'fill mask', seq2seq: 'translate' }[objective] || 'sample';
  $('#run-model').textContent = label;
  $('#model-objective').textContent = objective ? `${objective}` +
    (objective === 'masked_lm' ? ': write [MASK] where a token is missing' : '') : '';
}

async function runModel(kind) {
  const run = $('#model-run').value;
  const out = $('#model-output');
  const r = runByName(run);
  const text = $('#model-text').value;
  const body = { run, text, prompt: text, target: $('#model-target').value || undefined };
  if (kind === 'model') {
    kind = { masked_lm: 'fill_mask', seq2seq: 'translate' }[r && r.objective] || 'sample';
    // top-k 0 is every token to sampling; fill-mask lists k >= 1 candidates (the server's 5 when unset).
    const topK = Number($('#top-k').value);
    Object.assign(body, { temperature: Number($('#temperature').value),
      top_k: kind === 'fill_mask' && topK < 1 ? undefined : topK, max_tokens: Number($('#max-tokens').value) });
  }
  out.textContent = '…'; out.className = '';
  try {
    const res = await getJSON('/api/model/' + kind, { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body) });
    if (kind === 'sample') out.textContent = res.prompt + res.text;
    else if (kind === 'translate') out.textContent = res.translation + (res.warnings || []).map((w) => `\n(${w})`).join('');
    else if (kind === 'fill_mask') out.textContent = res.masks.map((m, i) => `mask ${i + 1}: ` +
      m.candidates.map((c) => `${JSON.stringify(c.token)} ${(100 * c.probability).toFixed(1)}%`).join(', ')).join('\n');
    else { out.textContent = ''; drawAttention(res); }
    out.dataset.done = String(Date.now());
  } catch (e) { out.textContent = e.message; out.className = 'error'; }
}

// A (rows, cols) matrix as a heat map, one cell per value (0 white .. max dark).
function heatmap(matrix, caption, cell = 10) {
  const rows = matrix.length, cols = rows ? matrix[0].length : 0;
  const canvas = el('canvas', { class: 'heat', width: cols * cell, height: rows * cell });
  const ctx = canvas.getContext('2d');
  let max = 0;
  for (const row of matrix) for (const v of row) max = Math.max(max, Math.abs(v));
  matrix.forEach((row, i) => row.forEach((v, j) => {
    const a = max > 0 ? Math.abs(v) / max : 0;
    ctx.fillStyle = `rgba(20, 60, 160, ${a})`;
    ctx.fillRect(j * cell, i * cell, cell, cell);
  }));
  const fig = el('figure'); fig.append(canvas, el('figcaption', {}, caption));
  return fig;
}

function drawAttention(report) {
  const box = $('#attention');
  box.replaceChildren();
  const groups = report.layers ? [['', report.layers]] :
    ['encoder', 'decoder_self', 'cross'].map((k) => [k + ' ', report[k] || []]);
  const tokens = report.tokens || report.target_tokens || [];
  box.append(el('p', { class: 'note' }, 'tokens: ' + tokens.map((t) => JSON.stringify(t)).join(' ')));
  for (const [prefix, layers] of groups) {
    for (const layer of layers) {
      layer.probabilities.forEach((head, h) => box.append(heatmap(head, `${prefix}layer ${layer.layer} head ${h}`)));
      const sim = layer.output_similarity || layer.pattern_similarity;
      const what = layer.output_similarity ? 'output' : 'pattern';
      box.append(heatmap(sim, `${prefix}layer ${layer.layer}: head similarity (${what}), mean ` +
        fmtNumber(layer.mean_output_similarity ?? layer.mean_pattern_similarity, 2), 24));
    }
  }
}

// ---- results ----
function renderResults(sets) {
  const box = $('#results');
  if (!sets.length) { box.replaceChildren(el('p', { class: 'note' }, 'None under these directories.')); return; }
  box.replaceChildren(...sets.map((s) => {
    const p = el('p'); p.append(el('b', {}, `${s.kind}: ${s.name} `));
    for (const f of s.files) {
      const a = el('a', { href: `/api/file?run=${encodeURIComponent(s.name)}&path=${encodeURIComponent(f)}`, target: '_blank' }, f);
      p.append(a, ' ');
    }
    return p;
  }));
}

// ---- polling ----
async function poll() {
  try {
    const listing = await getJSON('/api/runs');
    state.runs = listing.runs;
    $('#roots').textContent = 'runs under ' + listing.roots.join(', ');
    if (state.polls === 0 && state.selected.size === 0)  // the first time: tick up to four runs
      listing.runs.slice(0, 4).forEach((r) => state.selected.add(r.name));
    for (const name of [...state.selected]) if (!runByName(name)) state.selected.delete(name);
    renderRuns();
    renderResults(listing.results);
    await pollMetrics();
    drawCharts();
    // The config diff again when a ticked run's config may have changed: a resume takes --set values
    // (train.max_steps, ...) into its config.json, and a new run's appears once it starts.
    const configs = JSON.stringify([...state.selected].map((n) => { const r = runByName(n);
      return r ? [n, r.status, r.max_steps, r.problems.length] : [n]; }));
    if (state.polls === 0 || configs !== state.diffConfigs) renderDiff();
    state.diffConfigs = configs;
    state.polls++;
    $('#status-line').textContent = `${listing.runs.length} runs; updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    $('#status-line').textContent = 'the board is unreachable: ' + e.message;
  }
  setTimeout(poll, POLL_MS);
}

// For checks: how many points of `key` the page holds for `run`.
window.tfmBoard = { state, points: (run, key = 'train_loss_avg') => ((state.series[run] || {})[key] || { value: [] }).value.length };

document.querySelectorAll('#runs-table th[data-sort]').forEach((th) => th.addEventListener('click', () => {
  const k = th.dataset.sort;
  state.sortDesc = state.sortKey === k ? !state.sortDesc : false;
  state.sortKey = k;
  renderRuns();
}));
$('#x-axis').addEventListener('change', drawCharts);
$('#log-scale').addEventListener('change', drawCharts);
$('#smoothing').addEventListener('input', () => { $('#smoothing-value').textContent = $('#smoothing').value; drawCharts(); });
$('#model-run').addEventListener('change', updateModelControls);
$('#run-model').addEventListener('click', () => runModel('model'));
$('#run-attention').addEventListener('click', () => runModel('attention'));
$('#show-config').addEventListener('click', async () => {
  try {
    const c = await getJSON('/api/config?run=' + encodeURIComponent($('#config-run').value));
    $('#full-config').textContent = JSON.stringify(c.config, null, 2);
  } catch (e) { $('#full-config').textContent = e.message; }
});
makeCharts();
poll();
