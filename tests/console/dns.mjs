// Scenario "dns": a DnsRecord's object page lists the PowerDNS requests it
// made, and the PowerDNS API key appears nowhere in the page.
//
// Env: SETPOINT_URL, SETPOINT_TOKEN, SETPOINT_SECRET (the API key);
// optional SETPOINT_DNS_RECORD (default "www"), SETPOINT_NAMESPACE.

import { run, env, step, check, signIn, open, waitInPage } from './lib.mjs';

const name = process.env.SETPOINT_DNS_RECORD || 'www';
const namespace = process.env.SETPOINT_NAMESPACE || 'default';

await run('dns', async ({ page }) => {
  const secret = env('SETPOINT_SECRET');
  step('sign in with the admin token');
  await signIn(page, env('SETPOINT_TOKEN'));

  step(`open the object page of DnsRecord ${namespace}/${name}`);
  await open(page, `#/object/dns.setpoint.dev/v1/dnsrecords/${namespace}/${name}`);
  await waitInPage(page, () => document.querySelectorAll('section#requests tbody tr').length > 0, null,
    { timeout: 10000, what: 'rows in section#requests' });
  const rows = await page.$$eval('section#requests tbody tr', (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent.trim())));
  for (const r of rows.slice(0, 8)) console.log(`    ${r.join(' | ')}`);
  check(rows.length > 0, `section#requests lists ${rows.length} external requests`);
  const urls = rows.map((r) => r[4]);
  check(urls.some((u) => u.includes('/api/v1/servers/')), 'they are PowerDNS API requests (/api/v1/servers/…)');
  check(rows.every((r) => /^[A-Z]+$/.test(r[3]) && r[5] && r[5] !== '—' && /ms$/.test(r[6])), 'each row has a method, a result and a latency');
  const root = await page.getAttribute('section#tree li[aria-current="page"]', 'data-kind');
  check(root === 'DnsRecord', 'the tree\'s current node is the DnsRecord');

  step('the API key is nowhere in the page');
  const text = await page.evaluate(() => document.body.innerText);
  const html = await page.content();
  check(!text.includes(secret), 'the page\'s text does not contain the PowerDNS API key');
  check(!html.includes(secret), 'nor does its HTML (attributes included)');
});
