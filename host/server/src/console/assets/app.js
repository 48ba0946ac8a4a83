// Setpoint web console: one page, hash routes, no framework, no build step.
//
// Sections, in order:
//   1. DOM helpers        small element builders (no innerHTML with data)
//   2. formatting         numbers, times, YAML, badges
//   3. api client         token, fetch with Authorization, errors, discovery
//   4. watch              streamed watches with re-list on 410 / dropped streams
//   5. router             hash routes, page lifetimes (abort on leave), sign-in
//   6. pages: overview, objects, object (tree), plugins, plan
//   7. tree               ownership tree rendering and keyboard navigation
//   8. plan               cascade tree, field diffs, writes, apply
//   9. start
//
// Rules kept throughout: never fetch a whole collection (tables are paged
// with `limit`), render only what is on screen, text for every state (colour
// is decoration), one <h1> per page, live regions for live updates.

// ---------------------------------------------------------------------------
// 1. DOM helpers
// ---------------------------------------------------------------------------

/** Create an element: h('td', {class: 'num', dataset: {x: 1}}, 'text', child). */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') el.className = value;
      else if (key === 'dataset') {
        for (const [k, v] of Object.entries(value)) if (v !== undefined && v !== null) el.dataset[k] = String(v);
      } else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
      else if (key === 'text') el.textContent = value;
      else if (value === true) el.setAttribute(key, '');
      else el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
  return el;
}

/** Replace the children of `el`. */
function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

const $ = (sel, root = document) => root.querySelector(sel);

/** Say something to screen readers (polite). */
function announce(text) {
  const region = $('#announcer');
  if (!region) return;
  region.textContent = '';
  // A fresh text node after a tick so repeated messages are read again.
  setTimeout(() => { region.textContent = text; }, 30);
}

/** An error shown in place (403 and friends). */
function errorBox(err, what) {
  const message = err instanceof ApiError ? err.message : String(err && err.message || err);
  return h('p', { class: 'error', role: 'alert' }, what ? `${what}: ${message}` : message);
}

/** A table with a caption and column headers (scope="col"). */
function table(attrs, caption, headers, rows) {
  const thead = h('thead', null, h('tr', null, headers.map((col) => {
    const label = typeof col === 'string' ? col : col.label;
    return h('th', { scope: 'col', class: typeof col === 'string' ? null : col.class }, label);
  })));
  return h('table', attrs, caption ? h('caption', null, caption) : null, thead, h('tbody', null, rows));
}

// ---------------------------------------------------------------------------
// 2. formatting
// ---------------------------------------------------------------------------

const numberFormat = new Intl.NumberFormat('en-US');
const fmtNum = (n) => (n === null || n === undefined ? '—' : numberFormat.format(n));

function fmtSeconds(s) {
  if (s === null || s === undefined) return '—';
  if (s < 0.001) return `${(s * 1e6).toFixed(0)} µs`;
  if (s < 1) return `${(s * 1000).toFixed(s < 0.01 ? 2 : 1)} ms`;
  return `${s.toFixed(2)} s`;
}

function fmtDuration(seconds) {
  seconds = Math.max(0, Math.round(seconds));
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m${seconds % 60 ? `${seconds % 60}s` : ''}`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h${Math.floor((seconds % 3600) / 60)}m`;
  return `${Math.floor(seconds / 86400)}d${Math.floor((seconds % 86400) / 3600)}h`;
}

/** A <time> element: absolute in the attribute, "12s ago" as text. */
function timeEl(ms) {
  if (!Number.isFinite(ms)) return h('span', { class: 'muted' }, '—');
  const date = new Date(ms);
  const ago = (Date.now() - ms) / 1000;
  const text = ago >= 0 && ago < 86400 * 2 ? `${fmtDuration(ago)} ago` : date.toISOString().replace('T', ' ').slice(0, 19);
  return h('time', { datetime: date.toISOString(), title: date.toISOString() }, text);
}

function plural(n, word) {
  return `${fmtNum(n)} ${word}${n === 1 ? '' : 's'}`;
}

/** State badges: text always says the state; the colour repeats it. */
function readyBadge(ready) {
  if (ready === 'True' || ready === true) return h('span', { class: 'badge ok' }, 'Ready');
  if (ready === 'False' || ready === false) return h('span', { class: 'badge bad' }, 'Not Ready');
  if (ready === 'Unknown') return h('span', { class: 'badge unknown' }, 'Unknown');
  return null;
}

function stateBadge(text) {
  const t = String(text ?? 'Unknown');
  const cls = /^(Running|Success|closed|True|Ready|Succeeded|Active|InSync)$/i.test(t) ? 'ok'
    : /^(Failed|PermanentError|open|False|Error|Refused|CrashLoop)$/i.test(t) ? 'bad'
      : /^(TransientError|half-open|Pending|InProgress|Deleting|Terminating|pending)$/i.test(t) ? 'warn'
        : 'unknown';
  return h('span', { class: `badge ${cls}` }, t);
}

function conditionBadge(status) {
  if (status === 'True') return h('span', { class: 'badge ok' }, 'True');
  if (status === 'False') return h('span', { class: 'badge bad' }, 'False');
  return h('span', { class: 'badge unknown' }, status || 'Unknown');
}

/** A JSON value as YAML (block style; strings quoted when YAML would misread them). */
function toYaml(value, indent = '') {
  const scalar = (v) => {
    if (v === null || v === undefined) return 'null';
    if (typeof v === 'number' || typeof v === 'boolean') return String(v);
    const s = String(v);
    if (s === '' || /^[\s\-?:,[\]{}#&*!|>'"%@`]|[:#]\s|\s$|\n/.test(s)
      || /^(true|false|null|yes|no|on|off|~|[-+]?(\d[\d_]*(\.\d*)?|\.\d+)([eE][-+]?\d+)?|0x[0-9a-f]+)$/i.test(s)) {
      return JSON.stringify(s);
    }
    return s;
  };
  const isEmpty = (v) => (Array.isArray(v) ? v.length === 0 : v && typeof v === 'object' && Object.keys(v).length === 0);
  if (Array.isArray(value)) {
    if (!value.length) return `${indent}[]\n`;
    return value.map((item) => {
      if (item && typeof item === 'object' && !isEmpty(item)) {
        const inner = toYaml(item, `${indent}  `);
        return `${indent}- ${inner.slice(indent.length + 2)}`;
      }
      return `${indent}- ${isEmpty(item) ? (Array.isArray(item) ? '[]' : '{}') : scalar(item)}\n`;
    }).join('');
  }
  if (value && typeof value === 'object') {
    const keys = Object.keys(value);
    if (!keys.length) return `${indent}{}\n`;
    return keys.map((k) => {
      const v = value[k];
      const key = scalar(k);
      if (v && typeof v === 'object' && !isEmpty(v)) {
        return Array.isArray(v) ? `${indent}${key}:\n${toYaml(v, indent)}` : `${indent}${key}:\n${toYaml(v, `${indent}  `)}`;
      }
      return `${indent}${key}: ${isEmpty(v) ? (Array.isArray(v) ? '[]' : '{}') : scalar(v)}\n`;
    }).join('');
  }
  return `${indent}${scalar(value)}\n`;
}

/** "Pod" → "Pods", "Policy" → "Policies". */
function kindPlural(kind) {
  if (/[^aeiou]y$/.test(kind)) return `${kind.slice(0, -1)}ies`;
  if (/(s|x|ch|sh)$/.test(kind)) return `${kind}es`;
  return `${kind}s`;
}

// ---------------------------------------------------------------------------
// 3. api client
// ---------------------------------------------------------------------------

const TOKEN_KEY = 'setpoint.token';
const TABLE_ACCEPT = 'application/json;as=Table;v=v1;g=meta.k8s.io';
const PAGE_SIZE = 100;

class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

const session = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  whoami: null,
};

function authHeaders(extra) {
  const headers = { ...extra };
  if (session.token) headers.Authorization = `Bearer ${session.token}`;
  return headers;
}

/**
 * Call the API. Returns parsed JSON (or null for an empty body). Throws
 * ApiError with the Kubernetes Status message; a 401 also sends the user
 * back to the sign-in form.
 */
async function api(path, { method = 'GET', body, headers, accept = 'application/json', signal, raw = false } = {}) {
  const init = { method, headers: authHeaders({ Accept: accept, ...headers }), signal };
  if (body !== undefined) {
    if (typeof body === 'string') init.body = body;
    else {
      init.body = JSON.stringify(body);
      if (!init.headers['Content-Type']) init.headers['Content-Type'] = 'application/json';
    }
  }
  const response = await fetch(path, init);
  if (raw && response.ok) return response;
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = text; }
  }
  if (!response.ok) {
    const message = (data && typeof data === 'object' && data.message) || (typeof data === 'string' && data) || `${response.status} ${response.statusText}`;
    const err = new ApiError(response.status, message, data);
    if (response.status === 401) router.signIn(message);
    throw err;
  }
  return data;
}

const isAbort = (err) => err && (err.name === 'AbortError' || err instanceof DOMException && err.code === 20);

/** URL-path pieces of a kind: {group, version, plural, namespaced, kind}. */
function groupVersionPath(group, version) {
  return !group || group === 'core' ? `/api/${version}` : `/apis/${group}/${version}`;
}

function collectionPath(kind, namespace) {
  const base = groupVersionPath(kind.group, kind.version);
  return kind.namespaced && namespace ? `${base}/namespaces/${encodeURIComponent(namespace)}/${kind.plural}` : `${base}/${kind.plural}`;
}

function objectPath(kind, namespace, name) {
  return `${collectionPath(kind, namespace)}/${encodeURIComponent(name)}`;
}

/** The console route of an object. */
function objectHref(ref) {
  const group = ref.group || (ref.apiVersion && ref.apiVersion.includes('/') ? ref.apiVersion.split('/')[0] : 'core');
  const version = ref.version || (ref.apiVersion ? ref.apiVersion.split('/').pop() : 'v1');
  return `#/object/${group || 'core'}/${version}/${ref.plural}/${ref.namespace ? encodeURIComponent(ref.namespace) : '_'}/${encodeURIComponent(ref.name)}`;
}

function objectsHref(kind, query) {
  const q = query && Object.entries(query).filter(([, v]) => v).map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('&');
  return `#/objects/${kind.group || 'core'}/${kind.version}/${kind.plural}${q ? `?${q}` : ''}`;
}

/** Discovery, cached per group/version: the resources (no sub-resources). */
const discovery = {
  lists: new Map(),
  groups: null,

  async resources(group, version) {
    const key = `${group || 'core'}/${version}`;
    if (!this.lists.has(key)) {
      const promise = api(groupVersionPath(group, version)).then((list) => (list.resources || [])
        .filter((r) => !r.name.includes('/'))
        .map((r) => ({ group: group === 'core' ? '' : group, version, plural: r.name, kind: r.kind, namespaced: !!r.namespaced, verbs: r.verbs || [] })));
      promise.catch(() => this.lists.delete(key));
      this.lists.set(key, promise);
    }
    return this.lists.get(key);
  },

  async byPlural(group, version, pluralName) {
    const list = await this.resources(group, version);
    return list.find((r) => r.plural === pluralName) || null;
  },

  async byKind(apiVersion, kindName) {
    const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['core', apiVersion];
    const list = await this.resources(group, version);
    return list.find((r) => r.kind === kindName) || null;
  },

  /** Every kind the server serves (for the Objects index). */
  async all() {
    if (!this.groups) {
      this.groups = Promise.all([api('/api'), api('/apis')]).then(async ([core, groups]) => {
        const gvs = [...(core.versions || ['v1']).map((v) => ['core', v]),
          ...(groups.groups || []).map((g) => [g.name, (g.preferredVersion || g.versions[0]).version])];
        const lists = await Promise.all(gvs.map(([g, v]) => this.resources(g, v).catch(() => [])));
        return lists.flat();
      });
      this.groups.catch(() => { this.groups = null; });
    }
    return this.groups;
  },
};

// ---------------------------------------------------------------------------
// 4. watch
// ---------------------------------------------------------------------------

/**
 * Follow a collection from `resourceVersion` (or from now): calls
 * onChange(event) for every change, and onChange(null) after a gap (a
 * dropped stream or a 410 "too old", after which it takes a fresh version
 * with a one-item list and watches again), since changes may have been
 * missed. Stops when `signal` aborts.
 */
async function startWatch(path, { signal, labelSelector, onChange }, resourceVersion) {
  const sep = path.includes('?') ? '&' : '?';
  const selector = labelSelector ? `&labelSelector=${encodeURIComponent(labelSelector)}` : '';
  let version = resourceVersion || null;
  let delay = 250;
  let gap = false;
  while (!signal.aborted) {
    try {
      if (!version) {
        const list = await api(`${path}${sep}limit=1${selector}`, { signal });
        version = list && list.metadata && list.metadata.resourceVersion;
      }
      if (gap) onChange(null);
      gap = false;
      const response = await api(`${path}${sep}watch=1&allowWatchBookmarks=true&resourceVersion=${encodeURIComponent(version)}${selector}`,
        { signal, raw: true });
      delay = 250;
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = '';
      let expired = false;
      while (!expired) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let nl;
        while ((nl = buffer.indexOf('\n')) >= 0) {
          const line = buffer.slice(0, nl).trim();
          buffer = buffer.slice(nl + 1);
          if (!line) continue;
          let event;
          try { event = JSON.parse(line); } catch { continue; }
          if (event.type === 'ERROR') { expired = true; break; }
          const rv = event.object && event.object.metadata && event.object.metadata.resourceVersion;
          if (rv) version = rv;
          if (event.type !== 'BOOKMARK') onChange(event);
        }
      }
      reader.cancel().catch(() => {});
      if (expired) version = null; // 410 Gone (or another error): re-list
    } catch (err) {
      if (signal.aborted || isAbort(err)) return;
      if (err instanceof ApiError && (err.status === 401 || err.status === 403)) return;
      if (err instanceof ApiError && err.status === 410) version = null;
    }
    gap = true;
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 10000);
  }
}

/**
 * Coalesce calls: the first call of a burst runs `fn` `ms` later, calls in
 * between are merged into that run, and calls made while `fn` (async) runs
 * schedule one more run after it. So a steady stream of watch events
 * refreshes at most once per `ms`, never concurrently, and the last change
 * is always followed by a refresh.
 */
function coalesce(fn, ms) {
  let timer = null;
  let running = false;
  let again = false;
  const fire = async () => {
    timer = null;
    running = true;
    try { await fn(); } catch { /* the page shows its own errors */ }
    running = false;
    if (again) {
      again = false;
      schedule();
    }
  };
  const schedule = () => {
    if (running) { again = true; return; }
    if (!timer) timer = setTimeout(fire, ms);
  };
  return schedule;
}

// ---------------------------------------------------------------------------
// 5. router
// ---------------------------------------------------------------------------

/** What a page gets: its signal (aborted when the user leaves) and a parsed route. */
class PageContext {
  constructor(route) {
    this.route = route;
    this.controller = new AbortController();
    this.signal = this.controller.signal;
    this.timers = [];
  }

  every(ms, fn) {
    this.timers.push(setInterval(fn, ms));
  }

  close() {
    this.controller.abort();
    this.timers.forEach(clearInterval);
  }
}

function parseHash() {
  const hash = location.hash.replace(/^#/, '') || '/';
  const [pathPart, queryPart = ''] = hash.split('?');
  const segments = pathPart.split('/').filter(Boolean).map(decodeURIComponent);
  const query = Object.fromEntries(new URLSearchParams(queryPart));
  return { segments, query, hash };
}

const router = {
  current: null,
  signInMessage: null,

  routes: [
    { match: (s) => s.length === 0, nav: 'overview', page: (ctx) => overviewPage(ctx) },
    { match: (s) => s[0] === 'objects' && s.length === 1, nav: 'objects', page: (ctx) => kindsIndexPage(ctx) },
    { match: (s) => s[0] === 'objects' && s.length === 4, nav: 'objects', page: (ctx) => objectsPage(ctx) },
    { match: (s) => s[0] === 'object' && s.length === 6, nav: 'objects', page: (ctx) => objectPage(ctx) },
    { match: (s) => s[0] === 'plugins' && s.length === 1, nav: 'plugins', page: (ctx) => pluginsPage(ctx) },
    { match: (s) => s[0] === 'plan' && s.length === 1, nav: 'plan', page: (ctx) => planPage(ctx) },
  ],

  async start() {
    window.addEventListener('hashchange', () => this.render());
    $('#skip-link').addEventListener('click', (event) => {
      event.preventDefault();
      $('#main').focus();
    });
    await this.render();
  },

  async render() {
    if (this.current) this.current.close();
    const route = parseHash();
    const ctx = new PageContext(route);
    this.current = ctx;
    const main = $('#main');

    if (!session.whoami) {
      try {
        session.whoami = await api('/setpoint/v1/console/whoami', { signal: ctx.signal });
      } catch (err) {
        if (isAbort(err)) return;
        if (err instanceof ApiError && err.status === 401) return; // signIn() drew the form
        fill(main, h('h1', null, 'Setpoint console'), errorBox(err, 'The server did not answer'));
        return;
      }
      if (session.whoami.tokensRequired && !session.whoami.authenticated) {
        this.signIn('Sign in with a token to use the console.');
        return;
      }
      renderSession();
    }
    if (ctx !== this.current) return;

    const entry = this.routes.find((r) => r.match(route.segments)) || null;
    document.querySelectorAll('[data-nav]').forEach((a) => {
      if (entry && a.dataset.nav === entry.nav) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    });
    const focusAfter = this.navigated;
    this.navigated = true;
    if (!entry) {
      fill(main, h('h1', { tabindex: '-1' }, 'Not found'), h('p', null, 'No page here. ', h('a', { href: '#/' }, 'Go to the overview'), '.'));
      document.title = 'Not found · Setpoint';
      return;
    }
    try {
      await entry.page(ctx);
    } catch (err) {
      if (isAbort(err) || ctx.signal.aborted) return;
      if (err instanceof ApiError && err.status === 401) return;
      console.error(err);
      main.appendChild(errorBox(err));
    }
    // Move focus to the new page's heading on navigation (not on first load).
    if (focusAfter && ctx === this.current) {
      const heading = $('h1', main);
      if (heading) {
        heading.setAttribute('tabindex', '-1');
        heading.focus({ preventScroll: true });
      }
    }
  },

  /** Show the sign-in form (a 401, or no token yet). */
  signIn(message) {
    if (this.current) this.current.close();
    session.whoami = null;
    renderSession();
    document.querySelectorAll('[data-nav]').forEach((a) => a.removeAttribute('aria-current'));
    document.title = 'Sign in · Setpoint';
    const input = h('input', { id: 'token', type: 'password', name: 'token', autocomplete: 'current-password', required: true, 'aria-describedby': 'token-hint' });
    const status = h('p', { id: 'sign-in-status', role: 'status', class: message && session.token ? 'error' : 'muted' },
      message || 'Sign in with a token to use the console.');
    const form = h('form', { class: 'signin-form', 'aria-labelledby': 'sign-in-title' },
      h('div', { class: 'field' },
        h('label', { for: 'token' }, 'Bearer token'),
        input,
        h('span', { id: 'token-hint', class: 'hint' }, 'A token from the server\'s tokens file. It is kept for this browser tab only.')),
      h('div', null, h('button', { id: 'sign-in', type: 'submit' }, 'Sign in')));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      session.token = input.value.trim();
      sessionStorage.setItem(TOKEN_KEY, session.token);
      session.whoami = null;
      await this.render();
    });
    fill($('#main'), h('div', { class: 'signin' }, h('h1', { id: 'sign-in-title' }, 'Sign in'), status, form));
    input.focus();
  },
};

function renderSession() {
  const box = $('#session');
  if (!box) return;
  const who = session.whoami;
  if (!who || !who.authenticated) {
    fill(box);
    return;
  }
  fill(box,
    h('span', null, 'Signed in as ', h('strong', null, who.user || 'anonymous'), who.mayWrite ? '' : ' (read-only)'),
    h('button', {
      type: 'button',
      onclick: () => {
        sessionStorage.removeItem(TOKEN_KEY);
        session.token = '';
        router.signIn('Signed out.');
      },
    }, 'Sign out'));
}

function setTitle(text) {
  document.title = `${text} · Setpoint`;
}

// ---------------------------------------------------------------------------
// 6a. page: overview
// ---------------------------------------------------------------------------

async function overviewPage(ctx) {
  const main = $('#main');
  setTitle('Overview');
  const attention = h('section', { id: 'attention', 'aria-labelledby': 'attention-title' });
  const kinds = h('section', { id: 'kinds-section', 'aria-labelledby': 'kinds-title' });
  const plugins = h('section', { id: 'plugins-section', 'aria-labelledby': 'plugins-title' });
  const updated = h('p', { class: 'live-status', id: 'overview-status' }, 'Loading…');
  fill(main, h('div', { class: 'page-head' }, h('h1', null, 'Overview'), updated), attention, h('div', { class: 'grid wide' }, kinds, plugins));

  const load = async () => {
    let data;
    try {
      data = await api('/setpoint/v1/console/overview', { signal: ctx.signal });
    } catch (err) {
      if (isAbort(err)) return;
      fill(attention, errorBox(err, 'Overview'));
      return;
    }
    renderAttention(attention, data.attention || {});
    renderKinds(kinds, data.kinds || []);
    renderPluginSummary(plugins, data.plugins || []);
    updated.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  };
  await load();
  ctx.every(5000, load);
}

function refLabel(ref) {
  return `${ref.kind} ${ref.namespace ? `${ref.namespace}/` : ''}${ref.name}`;
}

function refLink(ref) {
  if (ref.plural) return h('a', { href: objectHref(ref) }, refLabel(ref));
  return h('span', null, refLabel(ref));
}

function renderAttention(section, attention) {
  const hot = attention.hotLoops || [];
  const stalled = attention.stalled || [];
  const refused = attention.refusedEffects || [];
  const items = [
    ...hot.map((n) => h('li', null, h('span', { class: 'badge bad' }, 'Hot loop'), ' ', refLink(n), n.message ? ` — ${n.message}` : '')),
    ...stalled.map((n) => h('li', null, h('span', { class: 'badge warn' }, 'Stalled'), ' ', refLink(n),
      ` — ${n.reason || 'not Ready'}${n.message ? `: ${n.message}` : ''}${n.sinceSeconds != null ? ` (for ${fmtDuration(n.sinceSeconds)})` : ''}`)),
    ...refused.map((r) => h('li', null, h('span', { class: 'badge bad' }, 'Refused effects'), ' ',
      h('a', { href: '#/plugins' }, r.plugin), ` → ${r.destination}: ${r.reason} (${plural(r.count, 'time')})`)),
  ];
  fill(section, h('h2', { id: 'attention-title' }, 'Needs attention'),
    items.length ? h('ul', { class: 'attention-list' }, items) : h('p', { class: 'muted' }, 'Nothing needs attention: no hot loops, stalled objects or refused effects.'));
}

function renderKinds(section, kinds) {
  const rows = kinds.map((k) => h('tr', { dataset: { kind: k.kind, group: k.group } },
    h('th', { scope: 'row' }, h('a', { href: objectsHref(k) }, k.kind)),
    h('td', { class: 'mono' }, k.group ? `${k.group}/${k.version}` : k.version),
    h('td', { class: 'num' }, k.count === null || k.count === undefined ? h('span', { title: 'not kept in memory', 'aria-label': 'not counted' }, '—') : fmtNum(k.count)),
    h('td', { class: 'num' }, k.notReady === null || k.notReady === undefined ? '—'
      : k.notReady > 0 ? h('span', { class: 'badge bad' }, `${fmtNum(k.notReady)} not Ready`) : '0')));
  fill(section, h('h2', { id: 'kinds-title' }, 'Kinds'),
    h('div', { class: 'table-wrap' }, table({ id: 'kinds' }, null,
      ['Kind', 'API version', { label: 'Objects', class: 'num' }, { label: 'Not Ready', class: 'num' }], rows)));
}

function renderPluginSummary(section, plugins) {
  const rows = plugins.map((p) => h('tr', { dataset: { plugin: p.name } },
    h('th', { scope: 'row' }, h('a', { href: `#/plugins` }, p.name)),
    h('td', null, p.kind ? p.kind.split('/').pop() : '—'),
    h('td', null, p.version || '—'),
    h('td', null, stateBadge(p.state), p.reason ? h('span', { class: 'muted' }, ` ${p.reason}`) : null),
    h('td', { class: 'num' }, fmtNum(p.reconciles)),
    h('td', { class: 'num' }, p.errors ? h('span', { class: 'badge bad' }, fmtNum(p.errors)) : '0'),
    h('td', { class: 'num' }, fmtSeconds(p.p99Seconds)),
    h('td', { class: 'num' }, fmtNum(p.queueDepth))));
  fill(section, h('h2', { id: 'plugins-title' }, 'Plugins'),
    h('div', { class: 'table-wrap' }, table({ id: 'plugins' }, null,
      ['Plugin', 'Kind', 'Version', 'State', { label: 'Reconciles', class: 'num' }, { label: 'Errors', class: 'num' },
        { label: 'p99', class: 'num' }, { label: 'Queue', class: 'num' }], rows)));
}

// ---------------------------------------------------------------------------
// 6b. page: objects (the kinds index, and one kind's table)
// ---------------------------------------------------------------------------

async function kindsIndexPage(ctx) {
  const main = $('#main');
  setTitle('Objects');
  fill(main, h('h1', null, 'Objects'), h('p', { class: 'muted' }, 'Loading kinds…'));
  const kinds = await discovery.all();
  if (ctx.signal.aborted) return;
  const rows = kinds.slice().sort((a, b) => a.kind.localeCompare(b.kind)).map((k) => h('tr', { dataset: { kind: k.kind } },
    h('th', { scope: 'row' }, h('a', { href: objectsHref(k) }, k.kind)),
    h('td', { class: 'mono' }, k.group ? `${k.group}/${k.version}` : k.version),
    h('td', null, k.plural),
    h('td', null, k.namespaced ? 'Namespaced' : 'Cluster')));
  fill(main, h('h1', null, 'Objects'), h('p', { class: 'muted' }, 'Choose a kind.'),
    table({ id: 'kinds-index' }, null, ['Kind', 'API version', 'Resource', 'Scope'], rows));
}

async function objectsPage(ctx) {
  const [, group, version, pluralName] = ctx.route.segments;
  const query = ctx.route.query;
  const main = $('#main');
  const namespace = query.ns || '';
  const labels = query.labels || '';

  const guess = { group: group === 'core' ? '' : group, version, plural: pluralName, namespaced: true, kind: pluralName };
  const kindPromise = discovery.byPlural(group, version, pluralName);

  const heading = h('h1', null, pluralName);
  const status = h('p', { id: 'objects-status', role: 'status', 'aria-live': 'polite' }, 'Loading…');
  const nsInput = h('input', { id: 'namespace', type: 'text', value: namespace, placeholder: 'all namespaces', size: 16 });
  const labelInput = h('input', { id: 'labels', type: 'search', value: labels, placeholder: 'app=web,tier!=db', size: 28, 'aria-describedby': 'labels-hint' });
  const prev = h('button', { id: 'prev-page', type: 'button', class: 'secondary', disabled: true }, '‹ Previous');
  const next = h('button', { id: 'next-page', type: 'button', class: 'secondary', disabled: true }, 'Next ›');
  const tableWrap = h('div', { class: 'table-wrap' });
  const liveNote = h('p', { class: 'live-status', id: 'objects-live' });
  fill(main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/objects' }, 'Objects'), ' / ', `${group}/${version}`),
    h('div', { class: 'page-head' }, heading, liveNote),
    h('form', { class: 'toolbar', role: 'search', 'aria-label': 'Filter objects' },
      h('div', { class: 'field' }, h('label', { for: 'namespace' }, 'Namespace'), nsInput),
      h('div', { class: 'field' }, h('label', { for: 'labels' }, 'Label selector'), labelInput,
        h('span', { id: 'labels-hint', class: 'hint' }, 'Press Enter to apply.')),
      h('button', { type: 'submit', class: 'secondary' }, 'Filter')),
    status, tableWrap, h('nav', { class: 'pager', 'aria-label': 'Pages' }, prev, next));

  const applyFilter = (event) => {
    if (event) event.preventDefault();
    location.hash = objectsHref(kind || guess, { ns: nsInput.value.trim(), labels: labelInput.value.trim() });
  };
  $('form.toolbar', main).addEventListener('submit', applyFilter);

  let kind = null;
  // Continue tokens of the pages before the current one (paging is forward
  // with tokens; "previous" goes back along this stack).
  const tokens = [];
  let current = '';
  let nextToken = '';
  let lastNames = '';

  const listUrl = (k, token) => {
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (token) params.set('continue', token);
    if (labels) params.set('labelSelector', labels);
    return `${collectionPath(k, namespace)}?${params}`;
  };

  let sequence = 0;
  const load = async (token, { quiet = false } = {}) => {
    const k = kind || guess;
    const mine = ++sequence;
    let data;
    try {
      data = await api(listUrl(k, token), { signal: ctx.signal, accept: TABLE_ACCEPT });
      if (mine !== sequence) return null; // a newer load (paging, refresh) wins
    } catch (err) {
      if (isAbort(err) || mine !== sequence) return null;
      if (err instanceof ApiError && err.status === 410 && token) {
        // The continue token expired: start over from the first page.
        tokens.length = 0;
        return load('', { quiet });
      }
      fill(tableWrap, errorBox(err, 'Listing'));
      status.textContent = 'Could not list the objects.';
      return null;
    }
    current = token;
    nextToken = (data.metadata && data.metadata.continue) || '';
    renderObjectsTable(tableWrap, data, k, namespace);
    const names = (data.rows || []).map((r) => r.object && r.object.metadata && r.object.metadata.name).join(',');
    const start = tokens.length * PAGE_SIZE;
    const count = (data.rows || []).length;
    const remaining = data.metadata && data.metadata.remainingItemCount;
    let text;
    if (!count) text = start ? 'No more objects.' : 'No objects.';
    else if (remaining !== undefined && remaining !== null) text = `Showing ${fmtNum(start + 1)}–${fmtNum(start + count)} of about ${fmtNum(start + count + remaining)}`;
    else text = `Showing ${fmtNum(start + 1)}–${fmtNum(start + count)}${nextToken ? ' (more on the next pages)' : ''}`;
    if (!quiet || names !== lastNames || status.textContent !== text) status.textContent = text;
    lastNames = names;
    prev.disabled = tokens.length === 0;
    next.disabled = !nextToken;
    return data;
  };

  prev.addEventListener('click', () => {
    if (!tokens.length) return;
    const token = tokens.pop();
    load(token);
  });
  next.addEventListener('click', () => {
    if (!nextToken) return;
    tokens.push(current);
    load(nextToken);
  });

  // The first page does not wait for discovery: the collection's path is
  // known from the route (a cluster-scoped kind given a namespace lists again).
  const [first, resolved] = await Promise.all([
    load(''),
    kindPromise.catch((err) => { if (!isAbort(err)) status.textContent = `Discovery failed: ${err.message}`; return null; }),
  ]);
  if (ctx.signal.aborted || !resolved) return;
  kind = resolved;
  heading.textContent = kindPlural(kind.kind);
  setTitle(kindPlural(kind.kind));
  let data = first;
  if (!kind.namespaced && namespace) {
    nsInput.disabled = true;
    data = await load('');
  }

  // Live: one watch on the collection; every burst of events refetches the
  // page on screen (never rebuilt from events, never the whole collection).
  const refresh = coalesce(() => load(current, { quiet: true }), 150);
  liveNote.textContent = 'Live';
  startWatch(collectionPath(kind, namespace), { signal: ctx.signal, labelSelector: labels, onChange: refresh },
    data && data.metadata && data.metadata.resourceVersion);
}

function renderObjectsTable(wrap, data, kind, namespace) {
  const columns = (data.columnDefinitions || []).map((c, i) => ({ ...c, index: i })).filter((c) => !c.priority);
  const showNamespace = kind.namespaced && !namespace && !columns.some((c) => c.name.toLowerCase() === 'namespace');
  const headers = [...(showNamespace ? ['Namespace'] : []), ...columns.map((c) => ({ label: c.name, class: c.type === 'integer' || c.type === 'number' ? 'num' : null }))];
  const rows = (data.rows || []).map((row) => {
    const meta = (row.object && row.object.metadata) || {};
    const cells = columns.map((c, i) => {
      const value = row.cells[c.index];
      const text = value === null || value === undefined ? '' : typeof value === 'object' ? JSON.stringify(value) : String(value);
      const isName = c.format === 'name' || (i === 0 && c.name === 'Name');
      if (isName) {
        return h('th', { scope: 'row' }, h('a', { href: objectHref({ ...kind, namespace: meta.namespace, name: meta.name || text }) }, text));
      }
      if (/^ready$/i.test(c.name) && /^(True|False|Unknown)$/.test(text)) return h('td', null, readyBadge(text));
      if (/^(phase|status|state)$/i.test(c.name) && text) return h('td', null, stateBadge(text));
      return h('td', { class: c.type === 'integer' || c.type === 'number' ? 'num' : null }, text);
    });
    if (showNamespace) cells.unshift(h('td', null, meta.namespace || ''));
    return h('tr', { dataset: { name: meta.name, namespace: meta.namespace, uid: meta.uid } }, cells);
  });
  const captionText = `${kindPlural(kind.kind)}${namespace ? ` in ${namespace}` : kind.namespaced ? ' in all namespaces' : ''}`;
  fill(wrap, table({ id: 'objects' }, h('span', { class: 'visually-hidden' }, captionText), headers, rows));
}

// ---------------------------------------------------------------------------
// 6c. page: object (tree, YAML, conditions, timeline, requests)
// ---------------------------------------------------------------------------

async function objectPage(ctx) {
  const [, group, version, pluralName, nsSeg, name] = ctx.route.segments;
  const namespace = nsSeg === '_' ? '' : nsSeg;
  const main = $('#main');
  setTitle(name);

  const heading = h('h1', null, name);
  const crumbs = h('p', { class: 'crumbs' }, h('a', { href: '#/objects' }, 'Objects'), ' / ', pluralName);
  const actions = h('div', { class: 'actions' });
  const treeStatus = h('p', { class: 'live-status', id: 'tree-status', 'aria-live': 'polite' });
  const treeBox = h('div', { class: 'tree-box' }, h('p', { class: 'muted' }, 'Loading the tree…'));
  const treeSection = h('section', { id: 'tree', 'aria-labelledby': 'tree-title' }, h('h2', { id: 'tree-title' }, 'Ownership tree'), treeStatus, treeBox);
  const conditions = h('section', { id: 'conditions', 'aria-labelledby': 'conditions-title' }, h('h2', { id: 'conditions-title' }, 'Conditions'));
  const requests = h('section', { id: 'requests', 'aria-labelledby': 'requests-title' }, h('h2', { id: 'requests-title' }, 'External requests'));
  const timeline = h('section', { id: 'timeline', 'aria-labelledby': 'timeline-title' }, h('h2', { id: 'timeline-title' }, 'Timeline'));
  const yaml = h('section', { id: 'yaml', 'aria-labelledby': 'yaml-title' }, h('h2', { id: 'yaml-title' }, 'YAML'));
  fill(main, crumbs, h('div', { class: 'page-head' }, heading, actions), treeSection,
    h('div', { class: 'grid' }, conditions, timeline), requests, yaml);

  const kind = await discovery.byPlural(group, version, pluralName).catch((err) => { if (!isAbort(err)) throw err; return null; });
  if (ctx.signal.aborted) return;
  if (!kind) {
    fill(treeBox, h('p', { class: 'error' }, `The server serves no resource ${pluralName} in ${group}/${version}.`));
    return;
  }
  const apiVersion = kind.group ? `${kind.group}/${kind.version}` : kind.version;
  fill(crumbs, h('a', { href: '#/objects' }, 'Objects'), ' / ', h('a', { href: objectsHref(kind, { ns: namespace }) }, kindPlural(kind.kind)), namespace ? ` / ${namespace}` : '');
  heading.textContent = `${kind.kind} ${name}`;
  setTitle(`${kind.kind} ${name}`);
  const ref = { apiVersion, group: kind.group, version: kind.version, kind: kind.kind, plural: kind.plural, namespace, name };
  const deleteRef = `${apiVersion}/${kind.kind}/${namespace || '_'}/${name}`;
  fill(actions, h('a', { class: 'button secondary', href: `#/plan?delete=${encodeURIComponent(deleteRef)}`, id: 'plan-deletion' }, 'Plan deletion'));

  const params = new URLSearchParams({ apiVersion, kind: kind.kind, name });
  if (namespace) params.set('namespace', namespace);

  // Everything but the tree: the object, its events, its reconcile history.
  const loadDetails = async () => {
    const eventsPath = `${namespace ? `/api/v1/namespaces/${encodeURIComponent(namespace)}` : '/api/v1'}/events?fieldSelector=${encodeURIComponent(`involvedObject.name=${name},involvedObject.kind=${kind.kind}`)}&limit=200`;
    const [object, events, history] = await Promise.all([
      api(objectPath(kind, namespace, name), { signal: ctx.signal }).catch((err) => err),
      api(eventsPath, { signal: ctx.signal }).catch((err) => err),
      api(`/setpoint/v1/history?${params}`, { signal: ctx.signal }).catch((err) => err),
    ]);
    if (ctx.signal.aborted) return;
    if (object instanceof Error) {
      if (object.status === 404) {
        fill(yaml, h('h2', { id: 'yaml-title' }, 'YAML'), h('p', { class: 'notice', role: 'status' }, `${kind.kind} ${name} does not exist (any more).`));
      } else fill(yaml, h('h2', { id: 'yaml-title' }, 'YAML'), errorBox(object, 'Reading the object'));
      fill(conditions, h('h2', { id: 'conditions-title' }, 'Conditions'), h('p', { class: 'muted' }, '—'));
    } else {
      renderYaml(yaml, object);
      renderConditions(conditions, object);
    }
    renderTimeline(timeline, events, history);
    if (!treeHasRequests) renderRequests(requests, history instanceof Error ? history : (history && history.externalRequests) || []);
  };

  // The tree: owners up, dependents down; refetched on any change to a kind in it.
  let treeHasRequests = false;
  const watched = new Set();
  let previousNodes = null;
  const loadTree = async () => {
    let data;
    try {
      data = await api(`/setpoint/v1/console/tree?${params}`, { signal: ctx.signal });
    } catch (err) {
      if (isAbort(err)) return;
      if (err.status === 404) {
        fill(treeBox, h('p', { class: 'notice' }, `${kind.kind} ${name} does not exist (any more).`));
        treeStatus.textContent = '';
        return;
      }
      fill(treeBox, errorBox(err, 'Tree'));
      return;
    }
    const nodes = renderTree(treeBox, data);
    if (Array.isArray(data.root && data.root.requests)) {
      treeHasRequests = true;
      renderRequests(requests, data.root.requests);
    }
    if (previousNodes) {
      const gone = [...previousNodes.keys()].filter((k) => !nodes.has(k)).map((k) => previousNodes.get(k));
      const added = [...nodes.keys()].filter((k) => !previousNodes.has(k)).map((k) => nodes.get(k));
      const replaced = gone.filter((n) => added.includes(n));
      const parts = [...replaced.map((n) => `${n} replaced`), ...gone.filter((n) => !replaced.includes(n)).map((n) => `${n} removed`),
        ...added.filter((n) => !replaced.includes(n)).map((n) => `${n} added`)];
      if (parts.length) announce(parts.slice(0, 6).join('; '));
    }
    previousNodes = nodes;
    treeStatus.textContent = `Live · updated ${new Date().toLocaleTimeString()}`;
    // Watch every kind (in its namespace) that appears in the tree.
    for (const node of walkTree(data)) {
      if (!node.plural || node.hidden) continue;
      const key = `${node.group}/${node.version}/${node.plural}/${node.namespace || ''}`;
      if (watched.has(key)) continue;
      watched.add(key);
      startWatch(collectionPath({ group: node.group, version: node.version, plural: node.plural, namespaced: !!node.namespace }, node.namespace),
        { signal: ctx.signal, onChange: refreshAll });
    }
  };

  const refreshTree = coalesce(loadTree, 200);
  const refreshDetails = coalesce(loadDetails, 1000);
  const refreshAll = () => { refreshTree(); refreshDetails(); };
  await Promise.all([loadTree(), loadDetails()]);
}

function renderYaml(section, object) {
  const shown = JSON.parse(JSON.stringify(object));
  if (shown.metadata) delete shown.metadata.managedFields;
  fill(section, h('h2', { id: 'yaml-title' }, 'YAML'), h('pre', { class: 'yaml', tabindex: '0', 'aria-label': 'The object as YAML' }, toYaml(shown)));
}

function renderConditions(section, object) {
  const conditions = (object.status && object.status.conditions) || [];
  fill(section, h('h2', { id: 'conditions-title' }, 'Conditions'),
    conditions.length ? table(null, null, ['Type', 'Status', 'Reason', 'Message', 'Last change'],
      conditions.map((c) => h('tr', { dataset: { type: c.type } },
        h('th', { scope: 'row' }, c.type),
        h('td', null, conditionBadge(c.status)),
        h('td', null, c.reason || ''),
        h('td', { class: 'msg' }, c.message || ''),
        h('td', null, c.lastTransitionTime ? timeEl(Date.parse(c.lastTransitionTime)) : '—'))))
      : h('p', { class: 'muted' }, 'No conditions.'));
}

function renderTimeline(section, events, history) {
  const items = [];
  const problems = [];
  if (events instanceof Error) problems.push(errorBox(events, 'Events'));
  else {
    for (const e of (events && events.items) || []) {
      const t = Date.parse(e.lastTimestamp || e.eventTime || e.firstTimestamp || (e.metadata && e.metadata.creationTimestamp));
      items.push({
        time: t,
        el: h('li', { dataset: { source: 'event' } }, timeEl(t),
          h('span', { class: `badge ${e.type === 'Warning' ? 'warn' : 'unknown'}` }, e.type === 'Warning' ? 'Warning' : 'Event'),
          h('strong', null, e.reason || ''), h('span', null, e.message || ''),
          e.count > 1 ? h('span', { class: 'muted' }, `×${e.count}`) : null),
      });
    }
  }
  if (history instanceof Error) problems.push(errorBox(history, 'Reconcile history'));
  else {
    for (const r of (history && history.records) || []) {
      const t = r.started * 1000;
      items.push({
        time: t,
        el: h('li', { dataset: { source: 'reconcile' } }, timeEl(t),
          h('span', { class: 'badge kind' }, 'Reconcile'), stateBadge(r.outcome),
          h('span', { class: 'muted' }, `took ${fmtSeconds(r.durationSeconds)}${r.version ? ` · v${r.version}` : ''}${r.nextInSeconds != null ? ` · next in ${fmtDuration(r.nextInSeconds)}` : ''}`),
          r.error ? h('span', null, r.error) : null),
      });
    }
  }
  items.sort((a, b) => (b.time || 0) - (a.time || 0));
  fill(section, h('h2', { id: 'timeline-title' }, 'Timeline'), problems,
    items.length ? h('ol', { class: 'timeline', tabindex: '0', 'aria-label': 'Events and reconciles, newest first' }, items.slice(0, 100).map((i) => i.el))
      : h('p', { class: 'muted' }, history && history.reconciler === false ? 'No events. No plugin reconciles this kind.' : 'No events or reconciles yet.'));
}

function renderRequests(section, requests) {
  if (requests instanceof Error) {
    fill(section, h('h2', { id: 'requests-title' }, 'External requests'), errorBox(requests, 'External requests'));
    return;
  }
  const sorted = requests.slice().sort((a, b) => Date.parse(b.time) - Date.parse(a.time));
  fill(section, h('h2', { id: 'requests-title' }, 'External requests'),
    sorted.length ? h('div', { class: 'table-wrap' }, table(null, h('span', { class: 'hint' }, 'Secrets in URLs are masked by the host.'),
      ['Time', 'Plugin', 'Role', 'Method', 'URL', 'Result', { label: 'Latency', class: 'num' }],
      sorted.map((r) => h('tr', { dataset: { method: r.method } },
        h('td', null, timeEl(Date.parse(r.time))),
        h('td', null, r.plugin || ''),
        h('td', null, r.role || ''),
        h('td', { class: 'mono' }, r.method || ''),
        h('td', { class: 'url' }, r.url || ''),
        h('td', null, resultBadge(r.result)),
        h('td', { class: 'num' }, r.latencyMs != null ? `${fmtNum(Math.round(r.latencyMs * 10) / 10)} ms` : '—')))))
      : h('p', { class: 'muted' }, 'No external requests recorded for this object.'));
}

function resultBadge(result) {
  const text = result === null || result === undefined ? '—' : String(result);
  const cls = /^(2\d\d|ok)/i.test(text) ? 'ok' : /^(4\d\d|5\d\d|error|refused|timeout|failed)/i.test(text) ? 'bad' : 'unknown';
  return h('span', { class: `badge ${cls}` }, text);
}

// ---------------------------------------------------------------------------
// 6d. page: plugins and grants
// ---------------------------------------------------------------------------

async function pluginsPage(ctx) {
  const main = $('#main');
  setTitle('Plugins');
  const list = h('div', { id: 'plugin-list' }, h('p', { class: 'muted' }, 'Loading…'));
  const status = h('p', { class: 'live-status' });
  fill(main, h('div', { class: 'page-head' }, h('h1', null, 'Plugins and grants'), status), list);
  const load = async () => {
    let data;
    try {
      data = await api('/setpoint/v1/console/plugins', { signal: ctx.signal });
    } catch (err) {
      if (isAbort(err)) return;
      fill(list, errorBox(err, 'Plugins'));
      return;
    }
    const focused = document.activeElement && list.contains(document.activeElement);
    if (focused) return; // don't yank content from under the keyboard
    fill(list, (data.plugins || []).length ? data.plugins.map(renderPlugin) : h('p', null, 'No plugins are loaded.'));
    status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  };
  await load();
  ctx.every(5000, load);
}

function renderPlugin(p) {
  const id = `plugin-${p.name.replace(/[^a-zA-Z0-9_-]/g, '-')}`;
  const declares = p.declares || {};
  const grant = p.grant || {};
  const pending = grant.pending || [];
  const effects = p.effects || {};
  const destinations = p.destinations || [];
  const requests = effects.requests || [];
  const refused = effects.refused || [];
  const refusals = p.recentRefusals || [];
  const needsGrant = (declares.destinations || []).length || (declares.secrets || []).length;
  const listOr = (items, empty) => (items && items.length
    ? h('ul', { class: 'plain' }, items.map((x) => h('li', { class: 'mono' }, x))) : h('span', { class: 'muted' }, empty));

  let grantBody;
  if (!grant.exists && !needsGrant) grantBody = h('p', { class: 'muted' }, 'Needs none: it declares no destinations or secrets.');
  else if (!grant.exists) grantBody = h('p', null, h('span', { class: 'badge warn' }, 'No grant'), ' No PluginGrant: it may reach no destination and read no secret.');
  else {
    grantBody = h('dl', { class: 'facts' },
      h('dt', null, 'Destinations'), h('dd', null, listOr(grant.spec && grant.spec.destinations, 'none')),
      h('dt', null, 'Secrets'), h('dd', null, listOr(grant.spec && grant.spec.secrets, 'none')),
      ...Object.entries(grant.spec || {}).filter(([k]) => k !== 'destinations' && k !== 'secrets').flatMap(([k, v]) => [
        h('dt', null, k), h('dd', { class: 'mono' }, typeof v === 'object' ? JSON.stringify(v) : String(v))]));
  }

  const effectsPart = destinations.length || requests.length || refused.length || refusals.length
    ? [
      destinations.length ? table({ class: 'destinations' }, 'Destinations', ['Destination', 'Breaker', { label: 'In flight', class: 'num' },
        { label: 'Waiting', class: 'num' }, { label: 'Concurrency', class: 'num' }, { label: 'Rate', class: 'num' }, { label: 'Failures in a row', class: 'num' }],
        destinations.map((d) => h('tr', { dataset: { destination: d.destination, breaker: d.breaker } }, h('th', { scope: 'row', class: 'mono' }, d.destination),
          h('td', null, stateBadge(d.breaker)), h('td', { class: 'num' }, fmtNum(d.inFlight)), h('td', { class: 'num' }, fmtNum(d.waiting)),
          h('td', { class: 'num' }, fmtNum(d.concurrency)), h('td', { class: 'num' }, d.ratePerSecond == null ? '—' : `${fmtNum(d.ratePerSecond)}/s`),
          h('td', { class: 'num' }, fmtNum(d.consecutiveFailures))))) : null,
      requests.length ? table({ class: 'effects' }, 'Requests made', ['Destination', 'Class', { label: 'Count', class: 'num' }],
        requests.map((r) => h('tr', null, h('th', { scope: 'row', class: 'mono' }, r.destination), h('td', null, r.class), h('td', { class: 'num' }, fmtNum(r.count))))) : null,
      refused.length ? table({ class: 'refused' }, 'Requests refused', ['Destination', 'Reason', { label: 'Count', class: 'num' }],
        refused.map((r) => h('tr', null, h('th', { scope: 'row', class: 'mono' }, r.destination), h('td', null, r.reason), h('td', { class: 'num' }, fmtNum(r.count))))) : null,
      refusals.length ? table({ class: 'refusals' }, `Recent refusals${refusals.length > 10 ? ` (latest 10 of ${refusals.length})` : ''}`, ['Time', 'Object', 'Destination', 'Reason'],
        refusals.slice().sort((a, b) => Date.parse(b.time) - Date.parse(a.time)).slice(0, 10).map((r) => h('tr', null, h('td', null, timeEl(Date.parse(r.time))),
          h('td', null, r.object && typeof r.object === 'object' ? refLink(r.object) : String(r.object || '')),
          h('td', { class: 'mono' }, r.destination), h('td', null, r.reason)))) : null,
    ]
    : h('p', { class: 'muted' }, 'No external effects: no destinations in use, no requests, no refusals.');

  return h('section', { class: 'plugin', id, dataset: { plugin: p.name }, 'aria-labelledby': `${id}-title` },
    h('h2', { id: `${id}-title` }, p.name, stateBadge(p.state), p.version ? h('span', { class: 'muted' }, `v${p.version}`) : null,
      h('span', { class: 'muted counters' }, `${plural(p.reconciles || 0, 'reconcile')} · ${plural(p.errors || 0, 'error')} · p99 ${fmtSeconds(p.p99Seconds)}`)),
    p.reason ? h('p', { class: 'error' }, p.reason) : null,
    p.lastError ? h('p', { class: 'notice' }, `Last error: ${p.lastError}`) : null,
    h('div', { class: 'grid' },
      h('div', { class: 'declares' },
        h('h3', null, 'Declares'),
        h('dl', { class: 'facts' },
          h('dt', null, 'Reconciles'), h('dd', { class: 'mono' }, declares.reconciles || p.kind || '—'),
          h('dt', null, 'Owns'), h('dd', null, listOr(declares.owns, 'nothing')),
          h('dt', null, 'Destinations'), h('dd', null, listOr(declares.destinations, 'none')),
          h('dt', null, 'Secrets'), h('dd', null, listOr(declares.secrets, 'none')))),
      h('div', { class: 'grant' },
        h('h3', null, 'Grant'),
        grantBody,
        pending.length ? h('div', { class: 'pending' },
          h('p', null, h('span', { class: 'badge warn' }, 'Pending'), ' Declared but not granted:'),
          h('ul', { class: 'plain' }, pending.map((x) => h('li', { dataset: { pending: x } }, h('span', { class: 'mono' }, x), ' ', h('span', { class: 'badge warn' }, 'pending')))))
          : grant.exists ? h('p', { class: 'muted' }, 'Every declared right is granted.') : null)),
    p.limits ? [h('h3', null, 'Limits'), limitsList(p.limits)] : null,
    h('h3', null, 'Effects'),
    effectsPart);
}

/** What a plugin may spend: per call, and its paced share of the host. */
function limitsList(limits) {
  const bytes = (n) => {
    if (n === null || n === undefined) return null;
    const units = ['B', 'KiB', 'MiB', 'GiB'];
    let i = 0;
    let v = n;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return `${Number.isInteger(v) ? v : v.toFixed(1)} ${units[i]}`;
  };
  const items = [
    ['Deadline per call', limits.deadlineSeconds != null ? fmtSeconds(limits.deadlineSeconds) : null],
    ['Memory', bytes(limits.memoryBytes)],
    ['Response size', bytes(limits.responseBytes)],
    ['Fuel per call', limits.fuel != null ? fmtNum(limits.fuel) : null],
    ['Logs', limits.logBytesPerSecond != null ? `${bytes(limits.logBytesPerSecond)}/s` : null],
    ['Cores (paced)', limits.cores != null ? fmtNum(limits.cores) : null],
    ['Writes (paced)', limits.writeBytesPerSecond != null ? `${bytes(limits.writeBytesPerSecond)}/s` : null],
  ].filter(([, v]) => v !== null);
  if (!items.length) return h('p', { class: 'muted' }, 'No limits reported.');
  return h('dl', { class: 'facts limits' }, items.flatMap(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

// ---------------------------------------------------------------------------
// 6e. page: plan
// ---------------------------------------------------------------------------

async function planPage(ctx) {
  const main = $('#main');
  setTitle('Plan');
  const who = session.whoami || {};
  const textarea = h('textarea', { id: 'manifest', name: 'manifest', spellcheck: 'false', 'aria-describedby': 'manifest-hint' });
  const fileInput = h('input', { id: 'manifest-file', type: 'file', accept: '.yaml,.yml,.json,application/json,application/yaml,text/yaml' });
  const planButton = h('button', { id: 'plan-button', type: 'submit' }, 'Plan');
  const planStatus = h('p', { id: 'plan-status', role: 'status', 'aria-live': 'polite' });
  const result = h('section', { id: 'plan-result', 'aria-labelledby': 'plan-result-title', hidden: true });
  const applyButton = h('button', { id: 'apply-button', type: 'button', disabled: true, 'aria-describedby': 'apply-disabled-reason' }, 'Apply');
  const reason = h('span', { id: 'apply-disabled-reason' });
  const applyResult = h('div', { id: 'apply-result', role: 'status', 'aria-live': 'polite' });

  const form = h('form', { id: 'plan-form', 'aria-label': 'Manifest to plan' },
    h('div', { class: 'field' },
      h('label', { for: 'manifest' }, 'Manifest (YAML or JSON)'),
      h('span', { id: 'manifest-hint', class: 'hint' }, 'Several documents separated by --- are fine. Nothing is written until you apply.'),
      textarea),
    h('div', { class: 'toolbar' },
      h('div', { class: 'field' }, h('label', { for: 'manifest-file' }, 'Or load a file'), fileInput),
      planButton));

  // A deletion planned from an object page: #/plan?delete=apiVersion/Kind/ns/name
  let deletion = null;
  if (ctx.route.query.delete) {
    const parts = ctx.route.query.delete.split('/');
    if (parts.length === 4 || parts.length === 5) {
      const [name, ns, kindName] = [parts.pop(), parts.pop(), parts.pop()];
      deletion = { apiVersion: parts.join('/'), kind: kindName, namespace: ns === '_' ? undefined : ns, name };
    }
  }
  const policy = h('select', { id: 'propagation-policy' },
    ['Background', 'Foreground', 'Orphan'].map((p) => h('option', { value: p }, p)));
  const deleteForm = deletion ? h('form', { id: 'delete-form', class: 'notice', 'aria-label': 'Deletion to plan' },
    h('p', null, 'Deleting ', h('strong', null, refLabel(deletion)), '.'),
    h('div', { class: 'toolbar' },
      h('div', { class: 'field' }, h('label', { for: 'propagation-policy' }, 'Propagation policy'), policy),
      h('button', { id: 'plan-delete-button', type: 'submit' }, 'Plan deletion'),
      h('a', { href: '#/plan' }, 'Plan a manifest instead'))) : null;

  fill(main, h('h1', null, deletion ? 'Plan a deletion' : 'Plan'),
    h('p', { class: 'muted' }, 'See what applying a manifest (or deleting an object) would do: the objects, what the plugins would do in reaction, and the external writes they would make. Nothing is changed or sent.'),
    deleteForm || form, planStatus, result,
    h('div', { class: 'apply-bar' }, applyButton, reason), applyResult);

  // What "Apply" would do: {kind: 'apply', objects} or {kind: 'delete', target}.
  let pending = null;
  let mayApply = false;
  const setApply = () => {
    let why = '';
    if (!who.mayWrite) why = `Read-only: ${who.user ? `user ${who.user}` : 'this token'} may plan but not write objects.`;
    else if (!pending) why = 'Plan first; apply is offered for the plan shown.';
    else if (!mayApply) why = 'Your token may not write every object of this plan.';
    applyButton.disabled = !!why;
    reason.textContent = why;
    reason.hidden = !why;
    return !why;
  };
  setApply();

  fileInput.addEventListener('change', async () => {
    const file = fileInput.files && fileInput.files[0];
    if (!file) return;
    textarea.value = await file.text();
    planStatus.textContent = `Loaded ${file.name}.`;
  });

  const runPlan = async (request, next) => {
    pending = null;
    mayApply = false;
    setApply();
    fill(applyResult);
    planStatus.classList.remove('visually-hidden');
    planStatus.textContent = 'Planning…';
    let plan;
    try {
      plan = await api('/setpoint/v1/plan', { method: 'POST', body: request, signal: ctx.signal });
    } catch (err) {
      if (isAbort(err)) return;
      planStatus.textContent = '';
      result.hidden = false;
      fill(result, h('h2', { id: 'plan-result-title' }, 'Plan'), errorBox(err, 'Planning failed'));
      return;
    }
    renderPlan(result, plan);
    result.hidden = false;
    const errors = (plan.errors || []).length;
    // The summary is on screen in the result; the status line only tells
    // screen readers that the plan arrived.
    planStatus.classList.add('visually-hidden');
    planStatus.textContent = `Planned: ${summarise(plan)}${errors ? `, ${plural(errors, 'error')}` : ''}.`;
    pending = errors ? null : next.pending;
    mayApply = next.mayApply;
    setApply();
  };

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const text = textarea.value;
    if (!text.trim()) {
      planStatus.textContent = 'Paste a manifest first.';
      textarea.focus();
      return;
    }
    planStatus.classList.remove('visually-hidden');
    planStatus.textContent = 'Reading the manifest…';
    let manifests;
    try {
      manifests = await api('/setpoint/v1/manifests', { method: 'POST', body: text, headers: { 'Content-Type': 'application/yaml' }, signal: ctx.signal });
    } catch (err) {
      if (isAbort(err)) return;
      planStatus.textContent = '';
      result.hidden = false;
      fill(result, h('h2', { id: 'plan-result-title' }, 'Plan'), errorBox(err, 'The manifest'));
      pending = null;
      setApply();
      return;
    }
    const objects = manifests.objects || [];
    await runPlan({ apply: objects }, { pending: { kind: 'apply', objects }, mayApply: manifests.mayApply !== false });
  });

  if (deleteForm) {
    const planDeletion = async (event) => {
      if (event) event.preventDefault();
      const target = { ...deletion, propagationPolicy: policy.value };
      if (!target.namespace) delete target.namespace;
      await runPlan({ delete: target }, { pending: { kind: 'delete', target }, mayApply: true });
    };
    deleteForm.addEventListener('submit', planDeletion);
    planDeletion();
  }

  applyButton.addEventListener('click', async () => {
    // The button is disabled when applying is not allowed; a forced click
    // still gets here, so check again (and the server refuses anyway).
    if (!setApply()) {
      announce(reason.textContent);
      return;
    }
    const job = pending;
    applyButton.disabled = true;
    fill(applyResult, h('p', null, 'Applying…'));
    const lines = job.kind === 'apply' ? await applyObjects(job.objects, ctx.signal) : [await applyDelete(job.target, ctx.signal)];
    fill(applyResult, h('h2', null, 'Applied'), h('ul', { class: 'plain', id: 'apply-lines' }, lines));
    pending = null;
    setApply();
    reason.textContent = 'Applied. Plan again to apply more.';
    reason.hidden = false;
  });
}

/** Server-side apply of each object in order; one <li> per object. */
async function applyObjects(objects, signal) {
  const lines = [];
  for (const { object, origin } of objects) {
    const meta = object.metadata || {};
    const label = `${object.kind} ${meta.namespace ? `${meta.namespace}/` : ''}${meta.name}`;
    try {
      const kind = await discovery.byKind(object.apiVersion, object.kind);
      if (!kind) throw new Error(`the server serves no kind ${object.kind} in ${object.apiVersion}`);
      const namespace = kind.namespaced ? meta.namespace || 'default' : '';
      const path = `${objectPath(kind, namespace, meta.name)}?fieldManager=setpoint-console&force=true`;
      const response = await fetch(path, {
        method: 'PATCH',
        signal,
        headers: authHeaders({ 'Content-Type': 'application/apply-patch+yaml', Accept: 'application/json' }),
        body: JSON.stringify(object),
      });
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        throw new ApiError(response.status, body.message || `${response.status} ${response.statusText}`, body);
      }
      const word = response.status === 201 ? 'created' : 'configured';
      lines.push(h('li', { dataset: { result: word } }, h('span', { class: 'badge ok' }, word), ' ', label));
    } catch (err) {
      if (isAbort(err)) break;
      lines.push(h('li', { dataset: { result: 'error' } }, h('span', { class: 'badge bad' }, 'error'), ` ${label}${origin ? ` (${origin})` : ''}: ${err.message}`));
    }
  }
  return lines;
}

async function applyDelete(target, signal) {
  const label = refLabel(target);
  try {
    const kind = await discovery.byKind(target.apiVersion, target.kind);
    if (!kind) throw new Error(`the server serves no kind ${target.kind} in ${target.apiVersion}`);
    await api(objectPath(kind, target.namespace, target.name), {
      method: 'DELETE', signal,
      body: { apiVersion: 'v1', kind: 'DeleteOptions', propagationPolicy: target.propagationPolicy },
    });
    return h('li', { dataset: { result: 'deleted' } }, h('span', { class: 'badge ok' }, 'deleted'), ` ${label}`);
  } catch (err) {
    return h('li', { dataset: { result: 'error' } }, h('span', { class: 'badge bad' }, 'error'), ` ${label}: ${err.message}`);
  }
}

// ---------------------------------------------------------------------------
// 7. tree
// ---------------------------------------------------------------------------

function* walkTree(data) {
  for (const a of data.ancestors || []) yield a;
  const stack = data.root ? [data.root] : [];
  while (stack.length) {
    const node = stack.pop();
    yield node;
    for (const child of node.children || []) stack.push(child);
  }
}

/** A node's identity for "removed/added" announcements. */
const nodeKey = (n) => `${n.kind}/${n.namespace || ''}/${n.name}/${n.uid || ''}`;

/**
 * Draw the tree: ancestors (top owner first) each nest the next, the root
 * (aria-current) nests its dependents. Returns key → label of every node.
 */
function renderTree(box, data) {
  const labels = new Map();
  const homeNamespace = data.root && data.root.namespace;
  const focusedKey = document.activeElement && document.activeElement.dataset && box.contains(document.activeElement)
    ? document.activeElement.dataset.key : null;

  const nodeItem = (node, { isRoot = false } = {}) => {
    labels.set(nodeKey(node), `${node.kind} ${node.name}`);
    const li = h('li', {
      role: 'treeitem',
      tabindex: '-1',
      'aria-current': isRoot ? 'page' : null,
      dataset: { kind: node.kind, name: node.name, namespace: node.namespace || '', uid: node.uid || '', ready: node.ready || '', phase: node.phase || '', deleting: node.deleting ? 'true' : null, key: nodeKey(node), href: node.hidden ? '' : objectHref(node) },
    },
    h('div', { class: 'node' },
      h('span', { class: 'badge kind' }, node.kind),
      node.hidden || isRoot ? h('span', { class: 'name' }, node.hidden ? `${node.name} (hidden from you)` : node.name)
        : h('a', { class: 'name', href: objectHref(node), tabindex: '-1' }, node.name),
      node.namespace && node.namespace !== homeNamespace ? h('span', { class: 'detail' }, `in ${node.namespace}`) : null,
      readyBadge(node.ready),
      node.summary ? h('span', { class: 'detail summary' }, node.summary) : null,
      node.phase ? h('span', { class: 'detail phase' }, node.phase) : null,
      node.deleting ? h('span', { class: 'badge warn' }, 'Deleting') : null,
      node.ready !== 'True' && (node.reason || node.message) ? h('span', { class: 'detail' }, [node.reason, node.message].filter(Boolean).join(': ')) : null,
      !isRoot && (node.requests || []).length ? h('span', { class: 'detail' }, plural(node.requests.length, 'external request')) : null));
    return li;
  };

  const childrenGroup = (node) => {
    const children = node.children || [];
    const items = children.map((child) => {
      const li = nodeItem(child);
      const group = childrenGroup(child);
      if (group) {
        li.appendChild(group);
        li.setAttribute('aria-expanded', 'true');
      }
      return li;
    });
    if (node.folded && node.folded.count) {
      const f = node.folded;
      const childKind = children.length ? children[0].kind : 'object';
      const parts = [];
      if (f.ready) parts.push(`${fmtNum(f.ready)} Ready`);
      if (f.notReady) parts.push(`${fmtNum(f.notReady)} not Ready`);
      if (f.unknown) parts.push(`${fmtNum(f.unknown)} Unknown`);
      items.push(h('li', { role: 'treeitem', tabindex: '-1', class: 'folded', dataset: { key: `folded/${nodeKey(node)}` } },
        h('div', { class: 'node' }, `… and ${fmtNum(f.count)} more ${f.count === 1 ? childKind : kindPlural(childKind)}${parts.length ? ` (${parts.join(', ')})` : ''}`)));
    }
    const shownRequests = node === data.root ? (node.requests || []).slice(-5).reverse() : [];
    for (const r of shownRequests) {
      items.push(h('li', { role: 'treeitem', tabindex: '-1', class: 'request', dataset: { kind: 'request', key: `request/${r.time}/${r.url}` } },
        h('div', { class: 'node' }, `${r.method} ${r.url} → `, resultBadge(r.result), r.latencyMs != null ? ` ${Math.round(r.latencyMs)} ms` : '')));
    }
    if (!items.length) return null;
    return h('ul', { role: 'group' }, items);
  };

  // Build from the root up: root with its dependents, wrapped by each ancestor.
  let top = null;
  if (data.root) {
    top = nodeItem(data.root, { isRoot: true });
    const group = childrenGroup(data.root);
    if (group) {
      top.appendChild(group);
      top.setAttribute('aria-expanded', 'true');
    }
    for (const ancestor of (data.ancestors || []).slice().reverse()) {
      const li = nodeItem(ancestor);
      li.appendChild(h('ul', { role: 'group' }, top));
      li.setAttribute('aria-expanded', 'true');
      top = li;
    }
  }
  const tree = h('ul', { role: 'tree', class: 'tree', 'aria-label': 'Owners and dependents' }, top);
  tree.addEventListener('keydown', treeKeys);
  tree.addEventListener('click', (event) => {
    const li = event.target.closest('li[role="treeitem"]');
    if (li) setRoving(tree, li);
  });
  fill(box, tree, data.truncated ? h('p', { class: 'notice' }, 'The tree is cut short here: it is too large to draw whole.') : null);
  // Keep one item tabbable (roving tabindex), the focused one if any.
  const focusedAgain = focusedKey && [...tree.querySelectorAll('li[role="treeitem"]')].find((li) => li.dataset.key === focusedKey);
  setRoving(tree, focusedAgain || tree.querySelector('li[aria-current="page"]') || tree.querySelector('li[role="treeitem"]'), !!focusedAgain);
  return labels;
}

function setRoving(tree, item, focus = false) {
  if (!item) return;
  tree.querySelectorAll('li[role="treeitem"][tabindex="0"]').forEach((li) => li.setAttribute('tabindex', '-1'));
  item.setAttribute('tabindex', '0');
  if (focus) item.focus({ preventScroll: true });
}

/** Keyboard: Up/Down move, Home/End jump, Left goes to the parent, Enter opens. */
function treeKeys(event) {
  const tree = event.currentTarget;
  const items = [...tree.querySelectorAll('li[role="treeitem"]')];
  const current = event.target.closest('li[role="treeitem"]');
  const index = items.indexOf(current);
  if (index < 0) return;
  let target = null;
  switch (event.key) {
    case 'ArrowDown': target = items[index + 1]; break;
    case 'ArrowUp': target = items[index - 1]; break;
    case 'Home': target = items[0]; break;
    case 'End': target = items[items.length - 1]; break;
    case 'ArrowLeft': target = current.parentElement.closest('li[role="treeitem"]'); break;
    case 'ArrowRight': target = current.querySelector('li[role="treeitem"]'); break;
    case 'Enter':
      if (current.dataset.href && current.getAttribute('aria-current') !== 'page') location.hash = current.dataset.href;
      event.preventDefault();
      return;
    default: return;
  }
  event.preventDefault();
  if (target) setRoving(tree, target, true);
}

// ---------------------------------------------------------------------------
// 8. plan
// ---------------------------------------------------------------------------

const SIGNS = { Create: '+', Update: '~', Status: '~', Delete: '−', Deleting: '−' };
const VERBS = { Create: 'create', Update: 'update', Status: 'status', Delete: 'delete', Deleting: 'deleting' };
const refKey = (r) => (r ? `${r.apiVersion}/${r.kind}/${r.namespace || ''}/${r.name}` : '');

function summarise(plan) {
  const count = (actions) => (plan.changes || []).filter((c) => actions.includes(c.action)).length;
  const parts = [
    `${fmtNum(count(['Create']))} to create`,
    `${fmtNum(count(['Update', 'Status']))} to change`,
    `${fmtNum(count(['Delete', 'Deleting']))} to delete`,
  ];
  const writes = (plan.writes || []).length;
  if (writes) parts.push(`${plural(writes, 'external write')} (not sent)`);
  return parts.join(', ');
}

/**
 * The cascade: a change caused by a plugin reconciling X hangs under X's
 * change (the first one for X that is not itself); requested changes are
 * roots; the garbage collector's under their owner's deletion.
 */
function cascade(changes) {
  const nodes = changes.map((change, i) => ({ change, i, children: [] }));
  const firstFor = new Map();
  nodes.forEach((n) => { const k = refKey(n.change.object); if (!firstFor.has(k)) firstFor.set(k, n); });
  const byUid = new Map();
  nodes.forEach((n) => {
    const o = n.change.before || n.change.after;
    const uid = o && o.metadata && o.metadata.uid;
    if (uid && !byUid.has(uid)) byUid.set(uid, n);
  });
  const roots = [];
  for (const n of nodes) {
    const cause = n.change.cause || {};
    let parent = null;
    if (cause.by === 'plugin' && cause.reconciling) {
      parent = firstFor.get(refKey(cause.reconciling)) || null;
    } else if (cause.by === 'garbageCollector') {
      const o = n.change.before || n.change.after;
      const owners = (o && o.metadata && o.metadata.ownerReferences) || [];
      for (const owner of owners) {
        parent = byUid.get(owner.uid) || firstFor.get(refKey({ apiVersion: owner.apiVersion, kind: owner.kind, namespace: n.change.object.namespace, name: owner.name }));
        if (parent) break;
      }
    }
    // Never hang a change under itself or under a later change (no cycles).
    if (parent && parent.i < n.i) parent.children.push(n);
    else roots.push(n);
  }
  return roots;
}

const IGNORED_PATHS = new Set(['metadata.resourceVersion', 'metadata.managedFields', 'metadata.generation', 'metadata.creationTimestamp', 'metadata.uid']);

/** Changed leaf paths between two objects: [{path, before, after}]. */
function diffObjects(before, after) {
  const out = [];
  const walk = (a, b, path) => {
    if (IGNORED_PATHS.has(path)) return;
    const aObj = a && typeof a === 'object';
    const bObj = b && typeof b === 'object';
    if (aObj && bObj && Array.isArray(a) === Array.isArray(b)) {
      const keys = Array.isArray(a) ? [...Array(Math.max(a.length, b.length)).keys()] : [...new Set([...Object.keys(a), ...Object.keys(b)])];
      for (const k of keys) walk(a[k], b[k], Array.isArray(a) ? `${path}[${k}]` : path ? `${path}.${k}` : k);
      return;
    }
    if (JSON.stringify(a) !== JSON.stringify(b)) out.push({ path, before: a, after: b });
  };
  walk(before || {}, after || {}, '');
  return out;
}

const showValue = (v) => (v === undefined ? '—' : typeof v === 'string' ? v : JSON.stringify(v));

function causeText(cause) {
  if (!cause) return '';
  if (cause.by === 'request') return 'requested';
  if (cause.by === 'garbageCollector') return 'by the garbage collector';
  if (cause.by === 'plugin') return `by ${cause.plugin}${cause.reconciling ? ` reconciling ${refLabel(cause.reconciling)}` : ''}`;
  return cause.by || '';
}

function renderPlan(section, plan) {
  const changes = plan.changes || [];
  const writesFor = new Map();
  for (const w of plan.writes || []) {
    const k = refKey(w.object);
    if (!writesFor.has(k)) writesFor.set(k, []);
    writesFor.get(k).push(w);
  }

  const changeItem = (n) => {
    const c = n.change;
    const o = c.object || {};
    const label = `${o.kind} ${o.namespace ? `${o.namespace}/` : ''}${o.name}`;
    const diff = (c.action === 'Update' || c.action === 'Status') && !c.hidden ? diffObjects(c.before, c.after) : [];
    const writes = writesFor.get(refKey(o)) || [];
    const li = h('li', { class: 'change', dataset: { action: c.action, kind: o.kind, name: o.name, namespace: o.namespace || '' } },
      h('div', { class: 'line' },
        h('span', { class: 'sign', 'aria-hidden': 'true' }, SIGNS[c.action] || '?'),
        h('span', { class: 'visually-hidden' }, `${VERBS[c.action] || c.action}:`),
        h('span', { class: 'badge kind' }, o.kind),
        h('strong', null, o.namespace ? `${o.namespace}/${o.name}` : o.name),
        h('span', { class: 'muted' }, c.action === 'Status' ? 'status' : VERBS[c.action] || c.action),
        h('span', { class: 'cause' }, causeText(c.cause)),
        c.hidden ? h('span', { class: 'badge unknown' }, 'hidden from you') : null,
        writes.length ? h('span', { class: 'badge warn' }, `${plural(writes.length, 'external write')}, not sent`) : null),
      diff.length ? table({ class: 'diff' }, h('span', { class: 'visually-hidden' }, `Field changes of ${label}`), ['Field', 'Before', 'After'],
        diff.map((d) => h('tr', null, h('th', { scope: 'row', class: 'mono' }, d.path), h('td', { class: 'old' }, showValue(d.before)), h('td', { class: 'new' }, showValue(d.after)))))
        : null,
      c.action === 'Create' && c.after && !c.hidden ? h('details', null, h('summary', null, `The new ${o.kind}`), h('pre', { class: 'yaml' }, toYaml(stripMeta(c.after)))) : null);
    if (n.children.length) li.appendChild(h('ul', null, n.children.map(changeItem)));
    return li;
  };

  const roots = cascade(changes);
  const writes = plan.writes || [];
  const observations = plan.observations || [];
  const pendingList = plan.pending || [];
  const errors = plan.errors || [];
  const events = plan.events || [];
  const cycles = plan.cycles || [];

  fill(section,
    h('h2', { id: 'plan-result-title' }, 'Plan'),
    h('p', { class: 'plan-summary' }, `${summarise(plan)}. ${plural(plan.reconciles || 0, 'reconcile')} simulated.`),
    errors.length ? h('div', { class: 'error', role: 'alert', id: 'plan-errors' }, h('strong', null, 'Errors'),
      h('ul', { class: 'plain' }, errors.map((e) => h('li', null, `${e.origin || ''}${e.object ? ` ${refLabel(e.object)}` : ''}: ${e.message}`)))) : null,
    cycles.length ? h('p', { class: 'error' }, `Ownership cycles: ${cycles.map(refLabel).join(', ')}`) : null,
    h('h3', null, 'Changes'),
    roots.length ? h('ul', { class: 'cascade', 'aria-label': 'Changes, each under the change that causes it' }, roots.map(changeItem))
      : h('p', { class: 'muted' }, 'No changes: the objects are already as the manifest says.'),
    h('section', { id: 'plan-writes', 'aria-labelledby': 'plan-writes-title' },
      h('h3', { id: 'plan-writes-title' }, 'External writes (not sent)'),
      writes.length ? externalTable(writes, 'plan-writes-table') : h('p', { class: 'muted' }, 'None.')),
    observations.length ? h('section', { id: 'plan-observations', 'aria-labelledby': 'plan-observations-title' },
      h('h3', { id: 'plan-observations-title' }, 'External reads made while planning'), externalTable(observations)) : null,
    h('section', { id: 'plan-pending', 'aria-labelledby': 'plan-pending-title' },
      h('h3', { id: 'plan-pending-title' }, 'Still pending after the plan'),
      pendingList.length ? h('ul', { class: 'plain' }, pendingList.map((p) => h('li', null, refLabel(p.object), ` — ${p.plugin}: ${p.reason}`)))
        : h('p', { class: 'muted' }, 'Nothing: every reconcile settles.')),
    events.length ? h('section', { id: 'plan-events', 'aria-labelledby': 'plan-events-title' },
      h('h3', { id: 'plan-events-title' }, 'Events'),
      h('ul', { class: 'plain' }, events.map((e) => h('li', null, h('span', { class: `badge ${e.type === 'Warning' ? 'warn' : 'unknown'}` }, e.type), ' ',
        refLabel(e.object), ` ${e.reason}: ${e.message}`)))) : null);
}

function externalTable(rows, id) {
  return h('div', { class: 'table-wrap' }, table({ id }, null, ['Plugin', 'Object', 'Method', 'URL', 'Body', 'Result'],
    rows.map((w) => h('tr', { dataset: { method: w.method } },
      h('td', null, w.plugin || ''),
      h('td', null, w.object ? refLabel(w.object) : ''),
      h('td', { class: 'mono' }, w.hidden ? '—' : w.method || ''),
      h('td', { class: 'url' }, w.hidden ? 'hidden from you' : w.url || ''),
      h('td', { class: 'url' }, w.body === undefined || w.body === null ? '' : typeof w.body === 'string' ? w.body : JSON.stringify(w.body)),
      h('td', null, w.result === undefined || w.result === null ? h('span', { class: 'badge unknown' }, 'not sent') : resultBadge(w.result))))));
}

function stripMeta(object) {
  const copy = JSON.parse(JSON.stringify(object));
  if (copy.metadata) for (const k of ['resourceVersion', 'managedFields', 'generation', 'creationTimestamp', 'uid']) delete copy.metadata[k];
  return copy;
}

// ---------------------------------------------------------------------------
// 9. start
// ---------------------------------------------------------------------------

router.start();
