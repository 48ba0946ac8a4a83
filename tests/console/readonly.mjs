// Scenario "readonly": signed in with a token that may read and plan but not
// write, the plan page's apply button is disabled with a reason; a forced
// click, a re-enabled button and a direct API call from the page change
// nothing (checked through the API with the admin token).
//
// Env: SETPOINT_URL, SETPOINT_TOKEN (admin, for the checks),
// SETPOINT_VIEWER_TOKEN; optional SETPOINT_READONLY_NAME (default
// "console-readonly"), the ReplicaSet the manifest would create.

import { run, env, step, check, signIn, open, apiCall, waitInPage } from './lib.mjs';

const name = process.env.SETPOINT_READONLY_NAME || 'console-readonly';
const manifest = `apiVersion: demo.setpoint.dev/v1
kind: ReplicaSet
metadata:
  name: ${name}
  namespace: default
spec:
  replicas: 2
  selector:
    matchLabels:
      app: ${name}
  template:
    metadata:
      labels:
        app: ${name}
    spec:
      image: nginx:1.27
      startupDelayMs: 100
`;

const path = `/apis/demo.setpoint.dev/v1/namespaces/default/replicasets/${name}`;

await run('readonly', async ({ page }) => {
  check((await apiCall(path)).status === 404, `ReplicaSet ${name} does not exist before`);

  step('sign in with the viewer token');
  await signIn(page, env('SETPOINT_VIEWER_TOKEN'));
  const who = await page.textContent('#session');
  check(/read-only/.test(who), `the header says the session is read-only ("${who.trim()}")`);

  step('plan a new ReplicaSet');
  await open(page, '#/plan');
  check(await page.isDisabled('#apply-button'), 'before planning, the apply button is disabled');
  await page.fill('#manifest', manifest);
  await page.click('#plan-button');
  await waitInPage(page, () => document.querySelector('section#plan-result li.change') || document.querySelector('section#plan-result .error'),
    null, { timeout: 10000, what: 'a plan result' });
  const creates = await page.$$('section#plan-result li.change[data-action="Create"][data-kind="ReplicaSet"]');
  check(creates.length === 1, 'the viewer may plan: the plan shows the ReplicaSet to create');
  check(await page.isDisabled('#apply-button'), 'the apply button is disabled');
  const reason = (await page.textContent('#apply-disabled-reason')).trim();
  check(reason.length > 0 && await page.isVisible('#apply-disabled-reason'), `with a visible reason: "${reason}"`);
  const described = await page.getAttribute('#apply-button', 'aria-describedby');
  check(described && described.includes('apply-disabled-reason'), 'the reason describes the button (aria-describedby)');

  step('force a click on the disabled button');
  await page.click('#apply-button', { force: true });
  step('re-enable the button in the DOM and click it');
  await page.evaluate(() => { const b = document.getElementById('apply-button'); b.disabled = false; b.click(); });
  await page.waitForTimeout(500);
  const applied = (await page.textContent('#apply-result')).trim();
  check(!/created|configured/.test(applied), `the page applied nothing (apply result: "${applied || 'empty'}")`);

  step('call the API directly from the page with the viewer\'s token');
  const direct = await page.evaluate(async ({ path, body }) => {
    const token = sessionStorage.getItem('setpoint.token');
    const response = await fetch(`${path}?fieldManager=setpoint-console&force=true`, {
      method: 'PATCH',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/apply-patch+yaml' },
      body,
    });
    return { status: response.status, body: await response.text() };
  }, { path, body: manifest });
  check(direct.status === 403, `the server refuses the write: ${direct.status} ${direct.body.slice(0, 160)}`);

  step('check through the API (admin token) that nothing was created');
  const after = await apiCall(path);
  check(after.status === 404, `ReplicaSet ${name} still does not exist (GET answered ${after.status})`);
  const pods = await apiCall(`/apis/demo.setpoint.dev/v1/namespaces/default/pods?labelSelector=app%3D${name}`);
  check((pods.data.items || []).length === 0, 'and no Pods of it exist');
});
