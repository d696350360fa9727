// check_board.sh's browser: node check_board.mjs URL CHROMIUM SCREENSHOT_DIR. Exit 1 on a failed check.
// Environment: TFM_CHECK_BINARY (tfm) and TFM_CHECK_RESUME (a run killed past its last checkpoint, which
// this resumes while the page watches).
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
const require = createRequire(path.join(process.env.NODE_PATH, 'x.js'));
const puppeteer = require('puppeteer-core');

const [url, chromium, shots] = process.argv.slice(2);
const fail = (msg) => { console.error('check_board.mjs: FAILED: ' + msg); process.exitCode = 1; };
const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 1000 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const t0 = Date.now();
  await page.goto(url, { waitUntil: 'load' });
  console.log(`check_board.mjs: page loaded in ${Date.now() - t0} ms`);
  await page.waitForSelector('#runs-table tr[data-run="runs/small"]', { timeout: 10000 });
  await page.waitForSelector('#runs-table tr[data-run="runs/two_heads"]', { timeout: 10000 });
  console.log(`check_board.mjs: page and runs table in ${Date.now() - t0} ms`);
  // A run ticked for the charts, in the page in one step (a read, then a click, could straddle a poll
  // that ticks it, and untick it).
  const tick = (run) => page.$eval(`#runs-table tr[data-run="${run}"] input`, (b) => {
    if (!b.checked) {
      b.checked = true;
      b.dispatchEvent(new Event('change'));
    }
  });
  // The page ticks the first four runs it lists: these two must be among the ticked ones.
  for (const run of ['runs/small', 'runs/two_heads']) await tick(run);
  // The loss chart holds both runs' points (100 steps, logged every 5: 20 points each).
  await page.waitForFunction(() => window.tfmBoard.points('runs/small') === 20 &&
    window.tfmBoard.points('runs/two_heads') === 20, { timeout: 10000 });
  // The chart is drawn once the fetch has stored them (pollMetrics().then(drawCharts)): wait for it too.
  const drawnCounts = () => {
    const c = Chart.getChart('chart-loss');
    return ['runs/small', 'runs/two_heads'].map((run) =>
      (c.data.datasets.find((d) => d.label === run + ' train') || { data: [] }).data.length);
  };
  try {
    await page.waitForFunction(`(${drawnCounts})().every((n) => n === 20)`, { timeout: 10000 });
  } catch (e) {
    fail('the loss chart holds ' + JSON.stringify(await page.evaluate(drawnCounts)) + ' train loss points');
  }
  // The resumed run: the page holds its two dead steps (loss 99, steps 45 and 50); `tfm train --resume`
  // rewrites metrics.jsonl after its checkpoint (step 40) and trains to 50 again. The page must hold the
  // new points only: 10 of them, none of 99.
  const resumed = 'runs/resumed';
  const resumedPoints = () => {
    const d = (window.tfmBoard.state.series['runs/resumed'] || {}).train_loss_avg || { step: [], value: [] };
    return { steps: d.step.join(','), dead: d.value.filter((v) => v === 99).length };
  };
  await page.waitForSelector(`#runs-table tr[data-run="${resumed}"] input`, { timeout: 10000 });
  await tick(resumed);
  try {
    await page.waitForFunction(`(${resumedPoints})().dead === 2`, { timeout: 10000 });
  } catch (e) {
    fail('before the resume: ' + JSON.stringify(await page.evaluate(resumedPoints)));
  }
  execFileSync(process.env.TFM_CHECK_BINARY, ['train', '--resume', process.env.TFM_CHECK_RESUME,
    '--set', 'train.max_steps=50'], { stdio: 'ignore' });
  const wanted = '5,10,15,20,25,30,35,40,45,50';
  try {
    await page.waitForFunction(`(() => { const p = (${resumedPoints})(); return p.dead === 0 && p.steps === '${wanted}'; })()`,
      { timeout: 10000 });
    console.log('check_board.mjs: the resumed run\'s dead steps were replaced');
  } catch (e) {
    fail('after the resume the page holds ' + JSON.stringify(await page.evaluate(resumedPoints)) +
      ', not steps ' + wanted + ' without the dead ones');
  }
  // Its config diff follows the resume: train.max_steps 50, as the resume's --set made it.
  const diffMaxSteps = () => {
    const t = document.querySelector('#diff-table');
    if (!t) return null;
    const col = [...t.rows[0].cells].findIndex((c) => c.textContent.startsWith('runs/resumed'));
    const row = [...t.rows].find((r) => r.cells[0].textContent === 'train.max_steps');
    return row && col > 0 ? row.cells[col].textContent : null;
  };
  try {
    await page.waitForFunction(`(${diffMaxSteps})() === '50'`, { timeout: 10000 });
    console.log('check_board.mjs: the config diff shows the resumed run\'s new train.max_steps');
  } catch (e) {
    fail('the config diff shows train.max_steps ' + await page.evaluate(diffMaxSteps) + ' for the resumed run, not 50');
  }
  // The live run: its step in the table grows within a few seconds.
  await page.waitForSelector('#runs-table tr[data-run="runs/live"]', { timeout: 15000 });
  const stepOf = () => page.$eval('#runs-table tr[data-run="runs/live"] td.step', (td) => parseInt(td.textContent));
  const first = await stepOf();
  await page.waitForFunction((s) => {
    const td = document.querySelector('#runs-table tr[data-run="runs/live"] td.step');
    return td && parseInt(td.textContent) > s;
  }, { timeout: 15000 }, first);
  console.log(`check_board.mjs: live run went past step ${first}`);
  // A sample and an attention map of the first run.
  await page.select('#model-run', 'runs/small');
  await page.$eval('#model-text', (e) => { e.value = 'ROMEO:'; });
  await page.click('#run-model');
  await page.waitForFunction(() => document.querySelector('#model-output').dataset.done, { timeout: 20000 });
  const sample = await page.$eval('#model-output', (e) => e.textContent);
  if (!sample.startsWith('ROMEO:') || sample.length <= 6) fail('sample: ' + JSON.stringify(sample));
  await page.click('#run-attention');
  await page.waitForSelector('#attention canvas.heat', { timeout: 20000 });
  const maps = await page.$$eval('#attention canvas.heat', (c) => c.length);
  if (maps < 2) fail(`${maps} attention maps drawn`);
  console.log(`check_board.mjs: sample of ${sample.length} characters, ${maps} attention maps`);
  // Fill-mask on the masked-LM run with the form as it comes (top-k 0: every token, to sampling).
  await page.select('#model-run', 'runs/mlm');
  await page.$eval('#model-text', (e) => { e.value = 'To be, or not to b[MASK]'; });
  await page.$eval('#model-output', (e) => { delete e.dataset.done; });
  await page.click('#run-model');
  await page.waitForFunction(() => {
    const o = document.querySelector('#model-output');
    return o.dataset.done || o.className === 'error';
  }, { timeout: 20000 });
  const filled = await page.$eval('#model-output', (e) => e.textContent);
  if (!filled.startsWith('mask 1: ')) fail('fill-mask: ' + JSON.stringify(filled));
  console.log(`check_board.mjs: fill-mask: ${filled.slice(0, 40)}`);
  // No curve on a chart's top or bottom edge, where its line is half clipped (the learning rate's peak
  // was): every drawn value strictly inside the y axis, or on a zero that the axis starts at.
  const edges = await page.evaluate(() => [...document.querySelectorAll('#charts canvas')].flatMap((canvas) => {
    const c = Chart.getChart(canvas), y = c.scales.y;
    return c.data.datasets.flatMap((d) => {
      const ys = d.data.map((p) => p.y).filter((v) => v !== null);
      if (!ys.length) return [];
      const lo = Math.min(...ys), hi = Math.max(...ys);
      const inside = hi < y.max && (lo > y.min || (lo === 0 && y.min === 0));
      return inside ? [] : [`${canvas.id} ${d.label}: values ${lo}..${hi} on an axis of ${y.min}..${y.max}`];
    });
  }));
  if (edges.length) fail('curves on a chart\'s edge: ' + edges.join('; '));
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: path.join(shots, 'board.png'), fullPage: false });
  await page.screenshot({ path: path.join(shots, 'board_full.png'), fullPage: true });
  if (errors.length) fail('errors on the page: ' + errors.join('; '));
} finally {
  await browser.close();
}
