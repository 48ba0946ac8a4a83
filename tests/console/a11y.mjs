// Scenario "a11y": axe-core on the sign-in form and the Overview, Objects,
// Object (tree), Plugins and Plan pages (with a plan shown): no serious or
// critical violations; each page has one <h1>, main and nav landmarks and a
// skip link.
//
// Env: SETPOINT_URL, SETPOINT_TOKEN; optional SETPOINT_MANIFEST.

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { run, env, step, check, axe, open, waitInPage } from './lib.mjs';

const manifestPath = process.env.SETPOINT_MANIFEST
  || fileURLToPath(new URL('../../docs/examples/web-scaled.yaml', import.meta.url));

async function structure(page, label) {
  const facts = await page.evaluate(() => ({
    h1: document.querySelectorAll('h1').length,
    main: document.querySelectorAll('main').length,
    nav: document.querySelectorAll('nav').length > 0,
    skip: !!document.querySelector('a.skip-link[href="#main"]'),
    lang: document.documentElement.lang,
  }));
  check(facts.h1 === 1 && facts.main === 1 && facts.nav && facts.skip && facts.lang === 'en',
    `${label}: one h1, a main and a nav landmark, a skip link, lang="en"`, JSON.stringify(facts));
}

await run('a11y', async ({ page }) => {
  const base = env('SETPOINT_URL').replace(/\/$/, '');
  step('the sign-in form');
  await page.goto(`${base}/`);
  await page.waitForSelector('#token');
  await structure(page, 'sign-in');
  await axe(page, 'sign-in');
  await page.fill('#token', env('SETPOINT_TOKEN'));
  await page.click('#sign-in');
  await page.waitForSelector('nav a[aria-current="page"]');

  const pages = [
    ['Overview', '#/', 'table#kinds tbody tr'],
    ['Objects', '#/objects/demo.setpoint.dev/v1/pods?ns=default', 'table#objects tbody tr'],
    ['Object (tree)', '#/object/demo.setpoint.dev/v1/deployments/default/shop', 'section#tree li[role="treeitem"] li[role="treeitem"]'],
    ['Plugins', '#/plugins', 'section.plugin'],
    ['Plan', '#/plan', '#manifest'],
  ];
  for (const [label, route, ready] of pages) {
    step(label);
    await open(page, route);
    await page.waitForSelector(ready, { timeout: 10000 });
    await page.waitForTimeout(200);
    await structure(page, label);
    await axe(page, label);
  }

  step('Plan with a plan shown');
  await page.fill('#manifest', readFileSync(manifestPath, 'utf8'));
  await page.click('#plan-button');
  await waitInPage(page, () => document.querySelector('section#plan-result li.change'), null, { timeout: 10000, what: 'a plan result' });
  await axe(page, 'Plan (result)');

  step('keyboard: the skip link moves focus to the main content');
  await page.goto('about:blank');
  await page.goto(`${base}/#/`);
  await page.waitForSelector('table#kinds');
  await page.keyboard.press('Tab');
  const focused = await page.evaluate(() => document.activeElement && document.activeElement.textContent);
  check(focused === 'Skip to content', 'the first Tab reaches the skip link');
  await page.keyboard.press('Enter');
  const inMain = await page.evaluate(() => document.activeElement && document.activeElement.id);
  check(inMain === 'main', 'Enter on it focuses <main>');
});
