// The console page: plain browser JavaScript, no build step. Talks to /console/api with fetch; the
// session travels in an HttpOnly cookie, state-changing calls add the session's CSRF token. User data
// is only ever inserted with textContent.

const state = { csrf: '', revokeArmed: null };

const $ = (id) => document.getElementById(id);

class ApiFailure extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const headers = {};
  const init = { method, headers, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  if (method !== 'GET' && state.csrf) headers['x-csrf-token'] = state.csrf;
  let response;
  try {
    response = await fetch(`/console/api/${path}`, init);
  } catch {
    throw new ApiFailure(0, 0, 'The console cannot reach the server. Check your connection and retry.');
  }
  let payload = null;
  try {
    payload = await response.json();
  } catch {
    payload = null;
  }
  if (!response.ok || !payload || payload.code !== 0) {
    const message = payload?.message ?? `Request failed (HTTP ${response.status})`;
    const retry = response.headers.get('retry-after');
    const suffix = response.status === 429 && retry ? ` (retry in ${retry} s)` : '';
    throw new ApiFailure(response.status, payload?.code ?? 0, message + suffix);
  }
  return payload.data;
}

function show(el, visible) {
  el.hidden = !visible;
}

function formError(form, message) {
  const el = form.querySelector('.form-error');
  el.textContent = message ?? '';
  show(el, Boolean(message));
}

function globalError(message) {
  $('global-error').textContent = message ?? '';
  show($('global-error'), Boolean(message));
}

function formatTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return `${d.toISOString().slice(0, 10)} ${d.toISOString().slice(11, 16)} UTC`;
}

function secondsUntil(unixSeconds) {
  return Math.max(0, Math.round(unixSeconds - Date.now() / 1000));
}

function duration(seconds) {
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  return h > 0 ? `${h} h ${m} min` : `${m} min`;
}

// ---- views -------------------------------------------------------------------------------------------

function showAuth() {
  state.csrf = '';
  show($('who'), false);
  show($('dashboard-view'), false);
  show($('auth-view'), true);
}

async function showDashboard(session) {
  state.csrf = session.csrfToken;
  $('who-email').textContent = session.account.email;
  $('who-tier').textContent = session.account.tier;
  show($('who'), true);
  show($('auth-view'), false);
  show($('dashboard-view'), true);
  await Promise.all([loadUsage(), loadKeys(), loadHistory()]);
}

const utcTime = (unixSeconds) =>
  `${new Date(unixSeconds * 1000).toISOString().replace('T', ' ').slice(0, 19)} UTC`;

// The chart follows the page's colour scheme: uPlot draws on a canvas, so colours are read from CSS.
function chartColors() {
  const css = getComputedStyle(document.body);
  const read = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return {
    text: read('--text', '#222'),
    grid: read('--line', '#ddd'),
    served: '#2f81f7',
    refused: '#d1242f',
    limit: read('--muted', '#888'),
  };
}

let historyPlot = null;
let lastHistory = null;

function drawHistory(history) {
  lastHistory = history;
  const box = $('history-chart');
  const c = chartColors();
  const xs = history.days.map((d) => Date.parse(`${d.day}T00:00:00Z`) / 1000);
  const served = history.days.map((d) => d.served);
  const refused = history.days.map((d) => d.refused);
  // The scale follows the counts: a daily limit far above them would flatten every bar, so its line
  // is drawn only when it is near the counts, and otherwise named in the legend.
  const peak = Math.max(5, ...served, ...refused);
  const limitShown = history.dailyLimit <= peak * 1.5;
  const yMax = limitShown ? Math.max(peak, history.dailyLimit) : Math.ceil(peak * 1.15);
  const data = [xs, served, refused, xs.map(() => (limitShown ? history.dailyLimit : null))];
  const axis = { stroke: c.text, grid: { stroke: c.grid }, ticks: { stroke: c.grid } };
  const bars = uPlot.paths.bars({ size: [0.6, 40] });
  const opts = {
    width: Math.max(320, box.clientWidth || 640),
    height: 260,
    tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
    axes: [axis, axis],
    scales: { x: { time: true }, y: { range: () => [0, yMax] } },
    series: [
      {},
      { label: 'Served', stroke: c.served, fill: `${c.served}99`, paths: bars },
      { label: 'Refused (429)', stroke: c.refused, fill: `${c.refused}99`, paths: bars },
      {
        label: limitShown ? 'Daily limit' : `Daily limit ${history.dailyLimit} (above this scale)`,
        stroke: c.limit,
        dash: [6, 4],
        width: 1,
        points: { show: false },
      },
    ],
  };
  historyPlot?.destroy();
  historyPlot = new uPlot(opts, data, box);
  const body = $('history-body');
  body.replaceChildren(
    ...history.days
      .slice()
      .reverse()
      .map((d) => {
        const tr = document.createElement('tr');
        for (const v of [d.day, String(d.served), String(d.refused)]) {
          const td = document.createElement('td');
          td.textContent = v;
          tr.append(td);
        }
        return tr;
      }),
  );
}

async function loadHistory() {
  try {
    const key = $('history-key').value;
    const history = await api('GET', `usage/history${key ? `?key=${encodeURIComponent(key)}` : ''}`);
    drawHistory(history);
  } catch (err) {
    handleFailure(err);
  }
}

// ---- Try it: the public API, called with the user's key like any client -------------------------
const shellQuote = (s) => `'${String(s).replace(/'/g, "'\\''")}'`;

async function tryImage(file) {
  const key = $('try-key').value.trim();
  const error = $('try-error');
  show(error, false);
  if (!key) {
    error.textContent = 'Paste one of your API keys first (a new key is filled in for you).';
    show(error, true);
    return;
  }
  const form = new FormData();
  form.append('file', file, file.name);
  const started = performance.now();
  let response;
  try {
    response = await fetch('/api/open/detect', {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
      body: form,
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch {
    error.textContent = 'The API cannot be reached. Check your connection and retry.';
    show(error, true);
    return;
  }
  const text = await response.text();
  const roundTrip = performance.now() - started;
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  $('try-status').textContent = String(response.status);
  $('try-json').textContent = body ? JSON.stringify(body, null, 2) : text;
  const data = body?.code === 0 ? body.data : null;
  $('try-decision').textContent = data
    ? data.decision
    : `refused (${body?.code ?? response.status}: ${body?.message ?? ''})`;
  $('try-nsfw').textContent = data ? data.scores.nsfw.toFixed(4) : '–';
  $('try-sfw').textContent = data ? data.scores.sfw.toFixed(4) : '–';
  $('try-allow').textContent = data ? String(data.thresholds.allow) : '–';
  $('try-block').textContent = data ? String(data.thresholds.block) : '–';
  $('try-facts').textContent = data
    ? `${data.image.format} · ${data.image.width}×${data.image.height} · ${data.image.bytes} bytes · ${data.image.frames} frame(s) · ` +
      `server ${data.timing_ms} ms, round trip ${roundTrip.toFixed(0)} ms`
    : `round trip ${roundTrip.toFixed(0)} ms`;
  const name = file.name || 'image';
  $('try-curl').textContent =
    `curl -s ${location.origin}/api/open/detect \\\n  -H ${shellQuote(`Authorization: Bearer ${key}`)} \\\n  -F file=@${shellQuote(name)}`;
  $('try-cli').textContent =
    `NSFWDETECTOR_API_KEY=${shellQuote(key)} python3 nsfwdetector.py detect --base-url ${location.origin} --json ${shellQuote(name)}`;
  show($('try-result'), true);
  // The keys table too: its "Last used" changes with this call.
  await Promise.all([loadUsage(), loadHistory(), loadKeys()]);
}

async function loadUsage() {
  try {
    const usage = await api('GET', 'usage');
    const { day, minute } = usage;
    $('usage-used').textContent = String(day.used);
    $('usage-remaining').textContent = String(day.remaining);
    $('usage-limit').textContent = String(day.limit);
    $('window-minute-used').textContent = String(minute.used);
    $('window-minute-limit').textContent = String(minute.limit);
    $('window-minute-reset').textContent = utcTime(minute.resetAt);
    $('window-day-used').textContent = String(day.used);
    $('window-day-limit').textContent = String(day.limit);
    $('window-day-reset').textContent = utcTime(day.resetAt);
    const pct = day.limit > 0 ? Math.min(100, (day.used / day.limit) * 100) : 100;
    $('usage-meter').style.width = `${pct}%`;
    $('usage-meter').classList.toggle('full', day.remaining === 0);
    $('usage-detail').textContent =
      `${usage.tier} tier · resets at 00:00 UTC (in ${duration(secondsUntil(day.resetAt))}) · ` +
      `this minute: ${minute.used} of ${minute.limit}`;
  } catch (err) {
    handleFailure(err);
  }
}

function keyRow(key) {
  const tr = document.createElement('tr');
  tr.dataset.keyId = key.id;
  const revoked = Boolean(key.revokedAt);
  if (revoked) tr.classList.add('revoked');
  const cells = [key.name || '—', null, formatTime(key.createdAt), formatTime(key.lastUsedAt), null];
  // Each cell names its column: a phone-width screen shows a key as a card of labelled lines.
  const labels = ['Name', 'Key', 'Created', 'Last used', 'Status'];
  cells.forEach((text, i) => {
    const td = document.createElement('td');
    td.dataset.label = labels[i];
    if (text !== null) td.textContent = text;
    tr.append(td);
  });
  const code = document.createElement('code');
  code.textContent = key.masked;
  tr.children[1].append(code);
  const badge = document.createElement('span');
  badge.className = `badge ${revoked ? 'revoked' : 'active'}`;
  badge.textContent = revoked ? 'revoked' : 'active';
  tr.children[4].append(badge);

  const actions = document.createElement('td');
  actions.className = 'actions';
  if (!revoked) {
    const button = document.createElement('button');
    button.type = 'button';
    button.className = 'danger revoke';
    button.textContent = 'Revoke';
    button.addEventListener('click', () => revoke(key.id, button));
    actions.append(button);
  }
  tr.append(actions);
  return tr;
}

async function loadKeys() {
  try {
    const { keys } = await api('GET', 'keys');
    const body = $('keys-body');
    body.replaceChildren(...keys.map(keyRow));
    const select = $('history-key');
    const chosen = select.value;
    select.replaceChildren(
      new Option('the whole account', ''),
      ...keys.map((k) => new Option(`key ${k.name || k.id} (${k.masked ?? k.id})`, k.id)),
    );
    select.value = keys.some((k) => k.id === chosen) ? chosen : '';
    show($('keys-table'), keys.length > 0);
    show($('keys-empty'), keys.length === 0);
  } catch (err) {
    handleFailure(err);
  }
}

// Two clicks revoke a key: the first arms the button for a few seconds, the second revokes.
async function revoke(keyId, button) {
  if (state.revokeArmed !== keyId) {
    state.revokeArmed = keyId;
    button.textContent = 'Confirm revoke';
    button.classList.add('confirm');
    setTimeout(() => {
      if (state.revokeArmed === keyId) {
        state.revokeArmed = null;
        button.textContent = 'Revoke';
        button.classList.remove('confirm');
      }
    }, 5000);
    return;
  }
  state.revokeArmed = null;
  button.disabled = true;
  try {
    await api('POST', `keys/${encodeURIComponent(keyId)}/revoke`);
    show($('keys-error'), false);
    await loadKeys();
  } catch (err) {
    button.disabled = false;
    handleFailure(err, $('keys-error'));
  }
}

function handleFailure(err, target) {
  if (err instanceof ApiFailure && err.status === 401) {
    showAuth();
    globalError('Your session has ended. Please log in again.');
    return;
  }
  const message = err instanceof Error ? err.message : String(err);
  if (target) {
    target.textContent = message;
    show(target, true);
  } else {
    globalError(message);
  }
}

// ---- forms ---------------------------------------------------------------------------------------------

function credentialsForm(form, path) {
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    formError(form, '');
    globalError('');
    const data = new FormData(form);
    const button = form.querySelector('button[type=submit]');
    button.disabled = true;
    const credentials = {
      email: String(data.get('email') ?? ''),
      password: String(data.get('password') ?? ''),
    };
    try {
      // A sign-up answers alike whether the email was free or not (so it tells nobody who has an
      // account) and logs nobody in: the login that follows does, with the password just typed.
      if (path === 'signup') await api('POST', 'signup', credentials);
      let session;
      try {
        session = await api('POST', 'login', credentials);
      } catch (err) {
        if (path === 'signup' && err instanceof ApiFailure && err.status === 401)
          throw new Error(
            'Could not sign you in with this password. If you already have an account with this email, log in with its password; an account an operator made without one needs a password first (ask your operator: npm run admin -- set-password).',
          );
        throw err;
      }
      form.reset();
      await showDashboard(session);
    } catch (err) {
      formError(form, err instanceof Error ? err.message : String(err));
    } finally {
      button.disabled = false;
    }
  });
}

function setup() {
  credentialsForm($('signup-form'), 'signup');
  credentialsForm($('login-form'), 'login');

  $('create-key-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const form = event.currentTarget;
    const errorEl = $('keys-error');
    show(errorEl, false);
    const button = form.querySelector('button[type=submit]');
    button.disabled = true;
    try {
      const name = String(new FormData(form).get('name') ?? '');
      const created = await api('POST', 'keys', { name });
      form.reset();
      $('new-key-secret').textContent = created.secret;
      $('try-key').value = created.secret;
      show($('new-key-copied'), false);
      show($('new-key'), true);
      await loadKeys();
    } catch (err) {
      handleFailure(err, errorEl);
    } finally {
      button.disabled = false;
    }
  });

  $('password-form').addEventListener('submit', async (event) => {
    event.preventDefault();
    const form = event.currentTarget;
    formError(form, '');
    show($('password-changed'), false);
    const data = new FormData(form);
    const button = form.querySelector('button[type=submit]');
    button.disabled = true;
    try {
      await api('POST', 'password', {
        current: String(data.get('current') ?? ''),
        password: String(data.get('password') ?? ''),
      });
      form.reset();
      show($('password-changed'), true);
    } catch (err) {
      if (err instanceof ApiFailure && err.status === 401) handleFailure(err);
      else formError(form, err instanceof Error ? err.message : String(err));
    } finally {
      button.disabled = false;
    }
  });

  $('new-key-copy').addEventListener('click', async () => {
    const secret = $('new-key-secret').textContent;
    try {
      await navigator.clipboard.writeText(secret);
      $('new-key-copied').textContent = 'Copied to the clipboard.';
    } catch {
      // Clipboard API refused (permissions, insecure context): select the text for a manual copy.
      const range = document.createRange();
      range.selectNodeContents($('new-key-secret'));
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      $('new-key-copied').textContent = 'Selected: press Ctrl+C (⌘C) to copy.';
    }
    show($('new-key-copied'), true);
  });

  $('new-key-done').addEventListener('click', () => {
    // The secret leaves the page for good.
    $('new-key-secret').textContent = '';
    show($('new-key'), false);
  });

  $('usage-refresh').addEventListener('click', () => Promise.all([loadUsage(), loadHistory()]));
  $('history-key').addEventListener('change', () => loadHistory());
  $('try-file').addEventListener('change', (e) => {
    const file = e.target.files?.[0];
    if (file) tryImage(file);
  });
  const drop = $('try-drop');
  drop.addEventListener('dragover', (e) => {
    e.preventDefault();
    drop.classList.add('over');
  });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (e) => {
    e.preventDefault();
    drop.classList.remove('over');
    const file = e.dataTransfer?.files?.[0];
    if (file) tryImage(file);
  });
  matchMedia('(prefers-color-scheme: dark)').addEventListener(
    'change',
    () => lastHistory && drawHistory(lastHistory),
  );
  // The chart is drawn at its box's width: drawn again when the window narrows or widens (a phone
  // turned, a window resized), or it would stick out sideways.
  let resizing = 0;
  window.addEventListener('resize', () => {
    cancelAnimationFrame(resizing);
    resizing = requestAnimationFrame(() => lastHistory && drawHistory(lastHistory));
  });

  $('logout').addEventListener('click', async () => {
    try {
      await api('POST', 'logout');
    } catch {
      // Logged out either way from the page's point of view.
    }
    $('new-key-secret').textContent = '';
    show($('new-key'), false);
    showAuth();
  });
}

async function start() {
  setup();
  try {
    const session = await api('GET', 'session');
    await showDashboard(session);
  } catch (err) {
    if (err instanceof ApiFailure && err.status === 401) showAuth();
    else {
      showAuth();
      globalError(err instanceof Error ? err.message : String(err));
    }
  }
}

start();
