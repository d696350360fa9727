// bench_board.sh's browser: node bench_board.mjs URL CHROMIUM RUNS. Prints the milliseconds from the
// page's navigation to its runs table holding RUNS rows and the loss chart holding the first ticked run's
// points: what a user waits for.
import { createRequire } from 'node:module';
import path from 'node:path';
const require = createRequire(path.join(process.env.NODE_PATH, 'x.js'));
const puppeteer = require('puppeteer-core');

const [url, chromium, runs] = process.argv.slice(2);
const browser = await puppeteer.launch({ executablePath: chromium, headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 1000 });
  const t0 = Date.now();
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForFunction((n) => document.querySelectorAll('#runs-table tbody tr').length === n &&
    window.tfmBoard.state.selected.size > 0 &&
    window.tfmBoard.points([...window.tfmBoard.state.selected][0]) > 0, { timeout: 30000 }, Number(runs));
  console.log(Date.now() - t0);
} finally {
  await browser.close();
}
