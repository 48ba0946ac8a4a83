// Scenario "tree": the Deployment `shop` (4 replicas, demo plugins) shows
// Deployment → ReplicaSet → 4 Pods with their states; a Pod deleted through
// the API (from Node, not the page) leaves the tree and its replacement
// appears within 2 s, without a reload.
//
// Env: SETPOINT_URL, SETPOINT_TOKEN; optional SETPOINT_SCREENSHOTS (a
// directory for console-tree.png), SETPOINT_NAMESPACE (default "default").

import { run, env, step, check, signIn, open, apiCall, screenshot, waitInPage, fail } from './lib.mjs';

const namespace = process.env.SETPOINT_NAMESPACE || 'default';

await run('tree', async ({ page }) => {
  step('sign in with the admin token');
  await signIn(page, env('SETPOINT_TOKEN'));

  step(`open the object page of Deployment ${namespace}/shop`);
  await open(page, `#/object/demo.setpoint.dev/v1/deployments/${namespace}/shop`);
  const podsSelector = 'section#tree li[role="treeitem"][data-kind="Deployment"][data-name="shop"]'
    + ' > ul > li[role="treeitem"][data-kind="ReplicaSet"] > ul > li[role="treeitem"][data-kind="Pod"]';
  const pods = await waitInPage(page, (sel) => {
    const items = [...document.querySelectorAll(sel)];
    const ready = items.filter((li) => li.dataset.ready === 'True' && li.dataset.phase === 'Running');
    return items.length === 4 && ready.length === 4 ? items.map((li) => ({ name: li.dataset.name, uid: li.dataset.uid })) : null;
  }, podsSelector, { timeout: 15000, what: 'Deployment → ReplicaSet → 4 Running, Ready Pods in section#tree' });
  check(pods.length === 4, `the tree shows Deployment shop → ReplicaSet → 4 Pods, all Ready and Running: ${pods.map((p) => p.name).join(', ')}`);

  const root = await page.getAttribute('section#tree li[aria-current="page"]', 'data-kind');
  check(root === 'Deployment', 'the Deployment is the tree\'s current node (aria-current="page")');
  const badges = await page.$$eval(`${podsSelector} .badge.ok`, (els) => els.map((e) => e.textContent));
  check(badges.filter((t) => t === 'Ready').length === 4, 'each Pod\'s state is shown as text ("Ready" badges)');
  const rsName = await page.getAttribute('section#tree li[data-kind="ReplicaSet"]', 'data-name');
  check(/^shop-/.test(rsName), `the ReplicaSet is ${rsName}`);

  await screenshot(page, 'console-tree.png');

  const victim = pods[0];
  step(`delete Pod ${victim.name} (uid ${victim.uid}) through the API`);
  const marker = await page.evaluate(() => { window.__notReloaded = true; return true; });
  const started = Date.now();
  const deleted = await apiCall(`/apis/demo.setpoint.dev/v1/namespaces/${namespace}/pods/${victim.name}`, { method: 'DELETE' });
  if (deleted.status !== 200 && deleted.status !== 202) fail(`deleting the Pod answered ${deleted.status}: ${JSON.stringify(deleted.data)}`);
  const before = pods.map((p) => p.uid);
  const after = await waitInPage(page, ({ sel, gone, known }) => {
    const items = [...document.querySelectorAll(sel)].map((li) => ({ name: li.dataset.name, uid: li.dataset.uid }));
    if (items.some((p) => p.uid === gone)) return null;
    const fresh = items.filter((p) => !known.includes(p.uid));
    return fresh.length ? { items, fresh } : null;
  }, { sel: podsSelector, gone: victim.uid, known: before }, { timeout: 2000, what: 'the deleted Pod gone from the tree and its replacement shown' });
  const elapsed = Date.now() - started;
  check(true, `within ${elapsed} ms the deleted Pod (uid ${victim.uid}) is gone and a new Pod appears: ${after.fresh.map((p) => `${p.name} (uid ${p.uid})`).join(', ')}`);
  check(await page.evaluate(() => window.__notReloaded === true) && marker, 'the page was not reloaded (live update through the watch)');
});
