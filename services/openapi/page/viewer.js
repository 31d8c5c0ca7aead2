// Renders /openapi.json as a plain reference page: operations, request bodies, headers, responses with
// their error codes and headers. Builds DOM nodes only (never innerHTML), so nothing in the document
// can run as markup; served from our own origin under a CSP that allows only same-origin scripts.

const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  for (const child of children.flat()) {
    if (child !== undefined && child !== null) node.append(child instanceof Node ? child : String(child));
  }
  return node;
};

const resolve = (doc, value) => {
  if (!value || typeof value.$ref !== 'string') return value;
  return value.$ref
    .replace(/^#\//, '')
    .split('/')
    .reduce((node, key) => node?.[key.replace(/~1/g, '/').replace(/~0/g, '~')], doc);
};

const schemaBlock = (schema) =>
  el('details', {}, el('summary', {}, 'schema'), el('pre', {}, JSON.stringify(schema, null, 2)));

function parameters(doc, op) {
  const params = (op.parameters ?? []).map((p) => resolve(doc, p));
  if (params.length === 0) return [];
  return [
    el('h4', {}, 'Parameters'),
    el(
      'table',
      {},
      el(
        'tr',
        {},
        el('th', {}, 'Name'),
        el('th', {}, 'In'),
        el('th', {}, 'Required'),
        el('th', {}, 'Description'),
      ),
      params.map((p) =>
        el(
          'tr',
          {},
          el('td', {}, el('code', {}, p.name)),
          el('td', {}, p.in),
          el('td', {}, p.required ? 'yes' : 'no'),
          el('td', { class: 'desc' }, p.description ?? p.schema?.description ?? ''),
        ),
      ),
    ),
  ];
}

function requestBody(doc, op) {
  const body = resolve(doc, op.requestBody);
  if (!body?.content) return [];
  return [
    el('h4', {}, `Request body${body.required ? ' (required)' : ''}`),
    el(
      'ul',
      {},
      Object.entries(body.content).map(([type, media]) =>
        el('li', {}, el('code', {}, type), ' ', schemaBlock(media.schema ?? {})),
      ),
    ),
  ];
}

function responses(doc, op) {
  const rows = Object.entries(op.responses ?? {}).map(([status, raw]) => {
    const response = resolve(doc, raw);
    const headers = Object.entries(response.headers ?? {}).map(([name, h]) =>
      el('div', {}, el('code', {}, name), ` ${resolve(doc, h).description ?? ''}`),
    );
    const media = Object.entries(response.content ?? {});
    return el(
      'tr',
      {},
      el('td', {}, el('code', {}, status)),
      el('td', { class: 'desc' }, response.description ?? ''),
      el('td', {}, headers),
      el(
        'td',
        {},
        media.map(([type, m]) => el('div', {}, el('code', {}, type), schemaBlock(m.schema ?? {}))),
      ),
    );
  });
  return [
    el('h4', {}, 'Responses'),
    el(
      'table',
      {},
      el(
        'tr',
        {},
        el('th', {}, 'Status'),
        el('th', {}, 'Meaning'),
        el('th', {}, 'Headers'),
        el('th', {}, 'Body'),
      ),
      rows,
    ),
  ];
}

function render(doc) {
  const main = document.getElementById('doc');
  const operations = [];
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const [method, op] of Object.entries(item)) {
      if (typeof op !== 'object' || !op.responses) continue;
      operations.push(
        el(
          'section',
          { class: 'op', id: `${method}-${path}` },
          el('h3', {}, el('span', { class: `method ${method}` }, method.toUpperCase()), el('code', {}, path)),
          el('p', {}, op.summary ?? ''),
          op.description ? el('p', { class: 'desc' }, op.description) : null,
          parameters(doc, op),
          requestBody(doc, op),
          responses(doc, op),
        ),
      );
    }
  }
  const shared = Object.entries(doc.components?.responses ?? {}).map(([name, response]) =>
    el('li', {}, el('strong', {}, name), ` — ${response.description ?? ''}`),
  );
  // replaceChildren does not flatten arrays (it would print them as text): flatten first.
  const children = [
    el('h1', {}, `${doc.info.title} ${doc.info.version}`),
    el('p', { class: 'desc' }, doc.info.description ?? ''),
    el(
      'p',
      {},
      'Machine-readable: ',
      el('a', { href: '/openapi.json' }, '/openapi.json'),
      ` (OpenAPI ${doc.openapi}).`,
    ),
    operations,
    shared.length ? [el('h2', {}, 'On any path'), el('ul', {}, shared)] : null,
  ];
  main.replaceChildren(...children.flat(2).filter((child) => child !== null));
}

fetch('/openapi.json')
  .then((response) => {
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    return response.json();
  })
  .then(render)
  .catch((err) => {
    document.getElementById('doc').append(el('p', {}, `Could not load /openapi.json: ${err.message}`));
  });
