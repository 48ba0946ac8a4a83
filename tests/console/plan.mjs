// Scenario "plan": web-scaled.yaml (ReplicaSet web scaled 3 → 5) pasted on
// the plan page shows exactly two Pods to create under the ReplicaSet's
// update, and nothing changes (checked through the API).
//
// Env: SETPOINT_URL, SETPOINT_TOKEN; optional SETPOINT_SCREENSHOTS,
// SETPOINT_MANIFEST (default: the repository's docs/examples/web-scaled.yaml).

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { run, env, step, check, signIn, open, apiCall, screenshot, waitInPage } from './lib.mjs';

const manifestPath = process.env.SETPOINT_MANIFEST
  || fileURLToPath(new URL('../../docs/examples/web-scaled.yaml', import.meta.url));

async function webState() {
  const rs = await apiCall('/apis/demo.setpoint.dev/v1/namespaces/default/replicasets/web');
  const pods = await apiCall('/apis/demo.setpoint.dev/v1/namespaces/default/pods?labelSelector=app%3Dweb');
  return { replicas: rs.data && rs.data.spec && rs.data.spec.replicas, generation: rs.data && rs.data.metadata && rs.data.metadata.generation, pods: (pods.data.items || []).map((p) => p.metadata.name).sort() };
}

await run('plan', async ({ page }) => {
  const before = await webState();
  check(before.replicas === 3 && before.pods.length === 3, `before: ReplicaSet web has spec.replicas 3 and 3 Pods (${before.pods.join(', ')})`);

  step('sign in with the admin token and open the plan page');
  await signIn(page, env('SETPOINT_TOKEN'));
  await open(page, '#/plan');

  step(`paste ${manifestPath} and plan it`);
  await page.fill('#manifest', readFileSync(manifestPath, 'utf8'));
  await page.click('#plan-button');
  await waitInPage(page, () => document.querySelector('section#plan-result li.change') || document.querySelector('section#plan-result .error'),
    null, { timeout: 10000, what: 'a plan result' });
  const error = await page.$eval('section#plan-result', (s) => (s.querySelector('.error') ? s.querySelector('.error').textContent : ''));
  check(!error, 'the plan has no errors', error);

  const creates = await page.$$eval('section#plan-result li.change[data-action="Create"][data-kind="Pod"]', (els) => els.map((e) => e.dataset.name));
  check(creates.length === 2, `exactly two Pods to create: ${creates.join(', ')}`);
  const updates = await page.$$('section#plan-result li.change[data-action="Update"][data-kind="ReplicaSet"][data-name="web"]');
  check(updates.length === 1, 'the ReplicaSet web is updated');
  const nested = await page.$$('section#plan-result li.change[data-kind="ReplicaSet"][data-name="web"] li.change[data-action="Create"][data-kind="Pod"]');
  check(nested.length === 2, 'the two Pods hang under the ReplicaSet in the cascade');
  const signs = await page.$$eval('section#plan-result li.change[data-action="Create"][data-kind="Pod"] > .line .sign', (els) => els.map((e) => e.textContent));
  check(signs.every((s) => s === '+'), 'creates are marked "+"');
  const diff = await page.$$eval('section#plan-result li.change[data-kind="ReplicaSet"][data-name="web"] > table.diff tbody tr',
    (rows) => rows.map((r) => [...r.children].map((c) => c.textContent)));
  const replicasRow = diff.find((r) => r[0] === 'spec.replicas');
  check(replicasRow && replicasRow[1] === '3' && replicasRow[2] === '5', `the ReplicaSet's diff shows spec.replicas 3 → 5 (${JSON.stringify(diff)})`);
  check(await page.$('section#plan-writes') !== null && await page.$('section#plan-pending') !== null, 'external writes and pending sections are shown');
  check(await page.isEnabled('#apply-button'), 'the admin may apply (the button is enabled)');

  await page.$eval('#manifest', (el) => { el.scrollTop = 0; el.setSelectionRange(0, 0); });
  await screenshot(page, 'console-plan.png', { fullPage: true });

  step('wait a moment, then check through the API that nothing changed');
  await page.waitForTimeout(1000);
  const after = await webState();
  check(after.replicas === 3, 'ReplicaSet web still has spec.replicas 3');
  check(after.generation === before.generation, `its generation is unchanged (${after.generation})`);
  check(JSON.stringify(after.pods) === JSON.stringify(before.pods), `still the same 3 Pods (${after.pods.join(', ')})`);
});
