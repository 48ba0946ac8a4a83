// Shared helpers of the console's browser tests: the environment, Debian's
// Chromium through playwright-core (never a downloaded browser), sign-in,
// axe-core, API calls from Node, screenshots, and a runner that prints each
// check and exits non-zero with a clear message on the first failure.

import { createRequire } from 'node:module';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const require = createRequire(import.meta.url);

/** A required environment variable. */
export function env(name, fallback) {
  const value = process.env[name] ?? fallback;
  if (value === undefined || value === '') fail(`the environment variable ${name} is not set`);
  return value;
}

export const URL_BASE = () => env('SETPOINT_URL').replace(/\/$/, '');

export class CheckFailed extends Error {}

export function fail(message) {
  throw new CheckFailed(message);
}

/** Print what is being checked. */
export function step(message) {
  console.log(`• ${message}`);
}

/** Assert, printing "ok" with the message. */
export function check(condition, message, detail) {
  if (!condition) fail(detail ? `${message}\n  ${detail}` : message);
  console.log(`  ok: ${message}`);
}

/** Launch Debian's Chromium headless and open a page; page errors fail the test. */
export async function launch() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox'],
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error' && !/the server responded with a status of (400|401|403|404|409|410)/.test(msg.text())) {
      problems.push(`console error: ${msg.text()}`);
    }
  });
  page.problems = problems;
  return { browser, context, page };
}

/** Open the console and sign in with `token` through its form. */
export async function signIn(page, token) {
  await page.goto(`${URL_BASE()}/`);
  await page.waitForSelector('#token', { timeout: 10000 });
  await page.fill('#token', token);
  await page.click('#sign-in');
  await page.waitForSelector('nav a[aria-current="page"]', { timeout: 10000 });
}

/** Go to a console route (`#/…`) and wait for its <h1>. */
export async function open(page, route) {
  await page.goto(`${URL_BASE()}/${route}`);
  await page.waitForSelector('main h1');
}

/**
 * Run axe-core on the page; fail on any serious or critical violation,
 * printing each with its nodes. axe is evaluated through the DevTools
 * protocol rather than `page.addScriptTag`: the console's
 * Content-Security-Policy (script-src 'self') rightly refuses the inline
 * <script> that addScriptTag would add, and turning the policy off
 * (bypassCSP) would hide the page's own violations.
 */
let axeSource = null;
export async function axe(page, label) {
  axeSource ??= readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
  const loaded = await page.evaluate(() => typeof window.axe !== 'undefined');
  if (!loaded) await page.evaluate(axeSource);
  const results = await page.evaluate(() => window.axe.run());
  const bad = results.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  for (const v of results.violations) {
    console.log(`  axe (${label}): ${v.impact} ${v.id}: ${v.help} (${v.nodes.length} nodes)`);
    if (v.impact === 'serious' || v.impact === 'critical') {
      for (const node of v.nodes.slice(0, 5)) console.log(`      ${node.target.join(' ')}: ${node.failureSummary.replace(/\n/g, ' ')}`);
    }
  }
  check(bad.length === 0, `${label}: no serious or critical accessibility violations (axe ${results.testEngine.version}, ${results.passes.length} rules passed)`,
    bad.map((v) => `${v.impact} ${v.id}: ${v.help}`).join('\n  '));
}

/** Call the API from Node (not the page) with a token. */
export async function apiCall(path, { method = 'GET', body, token = env('SETPOINT_TOKEN'), contentType = 'application/json' } = {}) {
  const response = await fetch(`${URL_BASE()}${path}`, {
    method,
    headers: {
      Authorization: `Bearer ${token}`,
      Accept: 'application/json',
      ...(body !== undefined ? { 'Content-Type': contentType } : {}),
    },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  let data = text;
  try { data = JSON.parse(text); } catch { /* not JSON */ }
  return { status: response.status, data };
}

/** Save a screenshot to $SETPOINT_SCREENSHOTS/name, when that is set. */
export async function screenshot(page, name, options = {}) {
  const dir = process.env.SETPOINT_SCREENSHOTS;
  if (!dir) {
    step(`screenshot ${name} skipped (SETPOINT_SCREENSHOTS not set)`);
    return;
  }
  mkdirSync(dir, { recursive: true });
  const path = join(dir, name);
  await page.screenshot({ path, ...options });
  step(`screenshot saved to ${path}`);
}

/** Wait until `fn` (run in the page) returns a truthy value, or fail. */
export async function waitInPage(page, fn, arg, { timeout = 5000, what = 'the condition' } = {}) {
  try {
    const handle = await page.waitForFunction(fn, arg, { timeout, polling: 50 });
    return await handle.jsonValue();
  } catch (err) {
    fail(`${what}: not reached within ${timeout} ms (${err.message.split('\n')[0]})`);
  }
}

/**
 * Run a scenario: fn({browser, context, page}); prints a closing line and
 * exits 0, or prints the failure and exits 1. The browser always closes.
 */
export async function run(name, fn) {
  console.log(`console test: ${name}`);
  let browser;
  let code = 0;
  try {
    const launched = await launch();
    browser = launched.browser;
    await fn(launched);
    const problems = launched.page.problems;
    check(problems.length === 0, 'no script errors in the page', problems.join('\n  '));
    console.log(`console test ${name}: passed`);
  } catch (err) {
    code = 1;
    console.error(`console test ${name}: FAILED: ${err instanceof CheckFailed ? err.message : err.stack || err}`);
  } finally {
    if (browser) await browser.close().catch(() => {});
  }
  process.exit(code);
}
