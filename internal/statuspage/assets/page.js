// Spillway status page: polls /status (JSON) once a second and draws it.
// It draws only what /status says: every number comes from the daemon
// (plans, shares, reasons, capacities are computed there), this file only
// sorts, sums for display and formats. Everything is built with DOM calls
// and textContent, never by parsing HTML strings, so nothing in /status is
// parsed as markup; the page's Content-Security-Policy allows no inline
// script or style, so bars are SVG drawn with attributes.
'use strict';

const POLL_MS = 1000;
const SVGNS = 'http://www.w3.org/2000/svg';
const REASONS = ['nearest', 'spill_capacity', 'spill_health', 'overload'];
const REASON_TEXT = {
  nearest: 'nearest',
  spill_capacity: 'spill: capacity',
  spill_health: 'spill: health',
  overload: 'overload',
};

// el builds an element; attrs values go through setAttribute, children
// that are not nodes become text nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children) e.append(c);
  return e;
}

const num = (v) => (typeof v === 'number' && isFinite(v) ? v : 0);
const pct = (v) => (num(v) * 100).toFixed(1) + '%';
const rps = (v) => {
  const x = num(v);
  return (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2)) + '/s';
};
const ms = (v) => (v === undefined ? '–' : num(v).toFixed(1) + ' ms');
const clamp01 = (v) => Math.max(0, Math.min(1, num(v)));

// bar draws one horizontal bar of width 100% of its cell: segments are
// [{from, to, cls, title}] in [0, 1] of the bar, marks are [{at, cls,
// title}] vertical lines.
function bar(segments, marks, label) {
  const s = svg('svg', { class: 'bar', viewBox: '0 0 1000 18', preserveAspectRatio: 'none', role: 'img', 'aria-label': label || '' });
  s.append(svg('rect', { class: 'track', x: 0, y: 0, width: 1000, height: 18 }));
  for (const g of segments) {
    const x = clamp01(g.from) * 1000, w = Math.max(0, clamp01(g.to) * 1000 - x);
    const r = svg('rect', { class: g.cls, x: x.toFixed(1), y: g.thin ? 5 : 0, width: w.toFixed(1), height: g.thin ? 8 : 18 });
    if (g.title) r.append(svg('title', {}, document.createTextNode(g.title)));
    s.append(r);
  }
  for (const m of marks || []) {
    const x = clamp01(m.at) * 1000;
    const l = svg('line', { class: m.cls, x1: x.toFixed(1), x2: x.toFixed(1), y1: 0, y2: 18 });
    if (m.title) l.append(svg('title', {}, document.createTextNode(m.title)));
    s.append(l);
  }
  return s;
}

function reasonBadge(reason) {
  return el('span', { class: 'badge reason-' + reason, 'data-reason': reason }, REASON_TEXT[reason] || reason);
}

function healthCell(healthy, instances) {
  const h = instances > 0 ? healthy / instances : 1;
  const cls = h >= 0.999 ? 'ok' : h >= 0.5 ? 'warn' : 'bad';
  return el('td', { class: 'health ' + cls, 'data-healthy': healthy, 'data-instances': instances },
    el('span', { class: 'count' }, healthy + '/' + instances),
    bar([{ from: 0, to: h, cls: 'seg-' + cls }], [], 'healthy ' + healthy + ' of ' + instances));
}

// ---------- gfe ----------

function ownSite(st, svc) {
  return (svc.sites || []).find((s) => s.name === st.site);
}

// waterfallRows orders the service's regions for this site: the regions
// its plan row sends to, in the row's (RTT) order, then every other region
// by RTT, then those the site does not reach.
function waterfallRows(st, svc) {
  const site = ownSite(st, svc) || {};
  const rtt = site.rtt_ms || st.rtt_ms || {};
  const flows = new Map((site.flows || []).map((f) => [f.region, f]));
  const regions = (svc.regions || []).slice();
  const rank = new Map((site.flows || []).map((f, i) => [f.region, i]));
  regions.sort((a, b) => {
    const ra = rank.has(a.name) ? rank.get(a.name) : Infinity, rb = rank.has(b.name) ? rank.get(b.name) : Infinity;
    if (ra !== rb) return ra - rb;
    const ta = a.name in rtt ? rtt[a.name] : Infinity, tb = b.name in rtt ? rtt[b.name] : Infinity;
    return ta !== tb ? ta - tb : a.name < b.name ? -1 : 1;
  });
  return regions.map((r) => ({ region: r, flow: flows.get(r.name), rtt: rtt[r.name] }));
}

function renderWaterfall(st, svc) {
  const rows = waterfallRows(st, svc);
  const scale = Math.max(1, ...rows.map((x) => Math.max(num(x.region.declared_rps), num(x.region.load_rps), num(x.region.capacity_rps))));
  const tbody = el('tbody');
  rows.forEach(({ region: r, flow: f, rtt }, i) => {
    const share = f ? num(f.share) : 0;
    const reason = f ? f.reason : '';
    const util = num(r.utilization);
    const utilCls = util >= 1 ? 'bad' : util >= 0.9 ? 'warn' : 'ok';
    const loadBar = bar([
      { from: 0, to: num(r.declared_rps) / scale, cls: 'seg-declared', title: 'declared ' + rps(r.declared_rps) },
      { from: 0, to: num(r.capacity_rps) / scale, cls: 'seg-capacity', title: 'planned capacity ' + rps(r.capacity_rps) },
      { from: 0, to: num(r.load_rps) / scale, cls: 'seg-load-' + utilCls, thin: true, title: 'planned load ' + rps(r.load_rps) },
    ], [{ at: num(r.effective_rps) / scale, cls: 'mark-effective', title: 'effective ' + rps(r.effective_rps) }],
    r.name + ' load ' + rps(r.load_rps) + ' of ' + rps(r.capacity_rps));
    tbody.append(el('tr', { 'data-region': r.name, class: f ? '' : 'unused' },
      el('td', { class: 'rank' }, f ? String(i + 1) : ''),
      el('th', { scope: 'row' }, r.name),
      el('td', { class: 'num rtt' }, ms(rtt)),
      el('td', { class: 'sharebar' }, bar([{ from: 0, to: share, cls: 'seg-' + (reason || 'none'), title: pct(share) }], [], 'share ' + pct(share))),
      el('td', { class: 'num share', 'data-share': share }, pct(share)),
      el('td', { class: 'reason' }, f ? reasonBadge(reason) : el('span', { class: 'muted' }, 'no traffic')),
      el('td', { class: 'loadbar' }, loadBar),
      el('td', { class: 'num load', 'data-load': num(r.load_rps) }, rps(r.load_rps)),
      el('td', { class: 'num capacity', 'data-capacity': num(r.capacity_rps) }, rps(r.capacity_rps)),
      el('td', { class: 'num effective', 'data-effective': num(r.effective_rps) }, rps(r.effective_rps)),
      el('td', { class: 'num util ' + utilCls, 'data-utilization': util }, pct(util)),
      healthCell(num(r.healthy), num(r.instances)),
      el('td', { class: 'num keep' + (num(r.keep) < 1 ? ' warn' : ''), 'data-keep': num(r.keep) }, pct(r.keep))));
  });
  return el('section', { class: 'card waterfall' },
    el('h3', {}, 'Waterfall for site ', el('span', { class: 'site' }, st.site || '?'),
      el('span', { class: 'sub' }, ' demand ' + rps(svc.demand_rps) + ' · regions nearest first')),
    el('table', {},
      el('thead', {}, el('tr', {},
        el('th', {}, '#'), el('th', {}, 'region'), el('th', {}, 'RTT'),
        el('th', { colspan: 2 }, 'share of this site'), el('th', {}, 'reason'),
        el('th', {}, 'planned load (all sites) / capacity'), el('th', {}, 'load'), el('th', {}, 'capacity'),
        el('th', {}, 'effective'), el('th', {}, 'util'), el('th', {}, 'healthy'), el('th', {}, 'keeps'))),
      tbody),
    el('p', { class: 'legend' },
      'share bar by reason: ', REASONS.map((r) => [reasonBadge(r), ' ']),
      ' · load bar: ', el('span', { class: 'key key-declared' }), ' declared ',
      el('span', { class: 'key key-capacity' }), ' planned capacity (target utilization) ',
      el('span', { class: 'key key-load' }), ' planned load ',
      el('span', { class: 'key key-effective' }), ' effective capacity'));
}

function renderGlobalPlan(st, svc) {
  const regions = (svc.regions || []).map((r) => r.name).sort();
  const sites = (svc.sites || []).slice().sort((a, b) => (a.name < b.name ? -1 : 1));
  const tbody = el('tbody');
  for (const s of sites) {
    const flows = new Map((s.flows || []).map((f) => [f.region, f]));
    let from = 0;
    const segs = (s.flows || []).map((f) => {
      const g = { from, to: from + num(f.share), cls: 'seg-' + f.reason, title: f.region + ' ' + pct(f.share) + ' (' + f.reason + ')' };
      from = g.to;
      return g;
    });
    tbody.append(el('tr', { 'data-site': s.name, class: s.name === st.site ? 'self' : '' },
      el('th', { scope: 'row' }, s.name),
      el('td', { class: 'num demand' }, rps(s.demand_rps)),
      el('td', { class: 'sharebar' }, bar(segs, [], s.name + ' split')),
      regions.map((r) => {
        const f = flows.get(r);
        if (!f) return el('td', { class: 'num muted', 'data-region': r }, '–');
        return el('td', { class: 'num cell reason-' + f.reason, 'data-region': r, 'data-share': num(f.share), title: f.reason },
          rps(f.load_rps), ' ', el('small', {}, '(' + pct(f.share) + ')'));
      }),
      el('td', { class: 'num' }, num(s.unplaced_rps) > 0 ? rps(s.unplaced_rps) : '')));
  }
  const total = el('tr', { class: 'total' }, el('th', { scope: 'row' }, 'region load'),
    el('td', { class: 'num' }, rps(sites.reduce((a, s) => a + num(s.demand_rps), 0))), el('td'),
    regions.map((r) => {
      const reg = (svc.regions || []).find((x) => x.name === r) || {};
      return el('td', { class: 'num' }, rps(reg.load_rps), ' ', el('small', {}, 'of ' + rps(reg.capacity_rps)));
    }), el('td'));
  return el('section', { class: 'card plan' },
    el('h3', {}, 'Global plan', el('span', { class: 'sub' }, ' every site’s demand and where it goes (as this node plans it)')),
    el('table', {},
      el('thead', {}, el('tr', {}, el('th', {}, 'site'), el('th', {}, 'demand'), el('th', {}, 'split'),
        regions.map((r) => el('th', {}, r)), el('th', {}, 'unplaced'))),
      tbody, el('tfoot', {}, total)));
}

function renderGroups(svc, open) {
  const tbody = el('tbody');
  for (const g of svc.groups || []) {
    const backends = g.backends || [];
    const ejected = backends.filter((b) => b.ejected).length;
    const demoted = backends.filter((b) => b.demoted).length;
    const id = 'g-' + svc.name + '-' + g.name;
    const det = el('details', { 'data-id': id, open: open.has(id) },
      el('summary', {}, backends.length + ' in use'),
      el('table', { class: 'inner' },
        el('thead', {}, el('tr', {}, el('th', {}, 'instance'), el('th', {}, 'state'), el('th', {}, 'in flight'), el('th', {}, 'max'))),
        el('tbody', {}, backends.map((b) => el('tr', {},
          el('td', { class: 'mono' }, b.address),
          el('td', {}, b.ejected ? el('span', { class: 'badge bad' }, 'ejected')
            : b.demoted ? el('span', { class: 'badge warn' }, 'demoted') : el('span', { class: 'badge ok' }, 'healthy')),
          el('td', { class: 'num' }, String(num(b.in_flight))),
          el('td', { class: 'num' }, num(b.max_concurrency) > 0 ? String(b.max_concurrency) : '∞'))))));
    tbody.append(el('tr', { 'data-group': g.name },
      el('th', { scope: 'row' }, g.name), el('td', {}, g.region), el('td', {}, g.zone),
      healthCell(num(g.healthy), num(g.instances)),
      el('td', { class: 'num' + (num(g.instances) - num(g.healthy) > 0 ? ' bad' : '') }, String(num(g.instances) - num(g.healthy))),
      el('td', { class: 'num' + (ejected ? ' bad' : '') }, String(ejected)),
      el('td', { class: 'num' }, demoted ? String(demoted) : '–'),
      el('td', { class: 'num inflight' }, String(num(g.in_flight))),
      el('td', { class: 'num' }, rps(g.declared_rps)),
      el('td', { class: 'num' }, rps(g.effective_rps)),
      el('td', { class: 'num' }, rps(g.capacity_rps)),
      el('td', { class: 'num' + (num(g.factor) < 1 ? ' warn' : '') }, num(g.factor).toFixed(2)),
      el('td', {}, g.signal && g.signal !== 'none' ? el('span', { class: 'badge warn' }, g.signal) : ''),
      el('td', {}, det)));
  }
  return el('section', { class: 'card groups' },
    el('h3', {}, 'Groups and instances'),
    el('table', {},
      el('thead', {}, el('tr', {}, ['group', 'region', 'zone', 'healthy', 'unhealthy', 'ejected', 'demoted', 'in flight',
        'declared', 'effective', 'planned cap.', 'factor', 'signal', 'instances'].map((h) => el('th', {}, h)))),
      tbody));
}

function renderDecisions(svc) {
  const d = svc.decisions || {};
  const keys = Object.keys(d).sort();
  return el('section', { class: 'card decisions' },
    el('h3', {}, 'Requests by decision since start'),
    el('table', {},
      el('thead', {}, el('tr', {}, keys.map((k) => el('th', { class: 'num' }, k)), el('th', { class: 'num' }, 'failures'))),
      el('tbody', {}, el('tr', {}, keys.map((k) => el('td', { class: 'num', 'data-decision': k }, String(d[k]))),
        el('td', { class: 'num' }, String(num(svc.failures)))))));
}

// renderStream draws the gfe's snapshot stream: red while it refuses the
// control plane's snapshots (it then serves an older one and does not
// follow health changes), amber when the snapshot it serves came with
// fields this build does not know.
function renderStream(st) {
  const cp = st.control_plane;
  const unknown = st.snapshot_unknown_fields || [];
  if (!cp && !unknown.length) return null;
  const c = cp || {};
  const state = c.refusing
    ? el('span', { class: 'badge bad', 'data-state': 'refusing' }, 'refusing snapshots: ' + num(c.nacks_in_a_row) + ' in a row')
    : el('span', { class: 'badge ok', 'data-state': 'following' }, 'following');
  return el('section', { class: 'card stream' + (c.refusing ? ' alarm' : ''), 'data-refusing': c.refusing ? 'true' : 'false' },
    el('h3', {}, 'Control plane ', cp ? state : null),
    el('table', {}, el('tbody', {},
      cp ? el('tr', {}, el('th', { scope: 'row' }, 'connected'), el('td', { class: 'mono' }, c.connected || 'none')) : null,
      cp ? el('tr', {}, el('th', { scope: 'row' }, 'serving'), el('td', { class: 'mono' }, c.serving || '–')) : null,
      cp ? el('tr', {}, el('th', { scope: 'row' }, 'snapshots'), el('td', {}, num(c.pushes) + ' pushed, ' + num(c.acks) + ' accepted, ',
        el('span', { class: num(c.nacks) ? 'bad' : '' }, num(c.nacks) + ' refused'))) : null,
      c.last_nack ? el('tr', {}, el('th', { scope: 'row' }, 'last refusal'),
        el('td', { class: 'detail' + (c.refusing ? ' bad' : ''), 'data-last-nack': '' }, c.last_nack)) : null,
      unknown.length ? el('tr', {}, el('th', { scope: 'row' }, 'ignored fields'),
        el('td', { class: 'detail warn', 'data-unknown': unknown.length }, 'applied without ' + unknown.length +
          ' fields this build does not know (a newer control plane): ' + unknown.join(', '))) : null)));
}

function renderGFE(st, open) {
  const out = [];
  const stream = renderStream(st);
  if (stream) out.push(stream);
  for (const svc of st.services || []) {
    out.push(el('h2', { 'data-service': svc.name }, 'Service ', el('span', { class: 'mono' }, svc.name),
      el('span', { class: 'sub' }, ' policy ' + svc.policy + ' '),
      svc.herd_guard ? el('span', { class: 'badge warn', title: 'the plan assumes the other senders of a group with unexplained load rise with this site' }, 'herd guard') : null));
    out.push(renderWaterfall(st, svc), renderGlobalPlan(st, svc));
    out.push(renderGroups(svc, open), renderDecisions(svc));
    if (svc.autoscaler) out.push(genericCard('Autoscaler', svc.autoscaler));
    if (svc.quota) out.push(genericCard('Quota', svc.quota));
  }
  if (!(st.services || []).length) out.push(el('p', { class: 'card muted' }, 'No snapshot yet: no service to show.'));
  if (st.autoscaler) out.push(genericCard('Autoscaler', st.autoscaler));
  if (st.quota) out.push(genericCard('Quota', st.quota));
  return out;
}

// ---------- control plane ----------

function renderCP(st, open) {
  const out = [];
  const groups = new Map();
  for (const h of st.health || []) {
    if (!groups.has(h.group)) groups.set(h.group, []);
    groups.get(h.group).push(h);
  }
  const owned = new Set(st.owned_groups || []);
  const tbody = el('tbody');
  for (const [name, insts] of [...groups.entries()].sort()) {
    const healthy = insts.filter((h) => h.status === 'healthy').length;
    const id = 'cp-' + name;
    tbody.append(el('tr', { 'data-group': name },
      el('th', { scope: 'row' }, name),
      healthCell(healthy, insts.length),
      el('td', { class: 'num' }, String(insts.filter((h) => h.status === 'unhealthy').length)),
      el('td', { class: 'num' }, String(insts.filter((h) => h.status !== 'healthy' && h.status !== 'unhealthy').length)),
      el('td', {}, owned.has(name) ? 'this replica' : el('span', { class: 'muted' }, 'another replica')),
      el('td', {}, el('details', { 'data-id': id, open: open.has(id) }, el('summary', {}, insts.length + ' instances'),
        el('table', { class: 'inner' },
          el('thead', {}, el('tr', {}, ['instance', 'status', 'since', 'checked by', 'detail'].map((h) => el('th', {}, h)))),
          el('tbody', {}, insts.map((h) => el('tr', {},
            el('td', { class: 'mono' }, h.address),
            el('td', {}, el('span', { class: 'badge ' + (h.status === 'healthy' ? 'ok' : h.status === 'unhealthy' ? 'bad' : 'warn') }, h.status)),
            el('td', {}, h.since && !h.since.startsWith('0001') ? new Date(h.since).toLocaleTimeString() : ''),
            el('td', {}, h.source || ''), el('td', { class: 'detail' }, h.detail || '')))))))));
  }
  out.push(el('section', { class: 'card groups' }, el('h3', {}, 'Instance health'),
    el('table', {}, el('thead', {}, el('tr', {}, ['group', 'healthy', 'unhealthy', 'unknown', 'checked by', 'instances'].map((h) => el('th', {}, h)))), tbody)));
  // A lagging gfe refuses the current snapshot: red, with its error; a
  // gfe sent without fields it cannot read: amber, with the fields.
  const gfes = el('tbody', {}, (st.gfes || []).map((g) => el('tr', { 'data-gfe': g.id, class: g.lagging ? 'lagging' : '' },
    el('th', { scope: 'row' }, g.id), el('td', {}, g.site), el('td', { class: 'mono build' }, g.build_version || '–'),
    el('td', { class: 'num' }, String(num(g.streams))),
    el('td', { class: 'mono' }, g.acked || ''), el('td', { class: 'num' }, String(num(g.acks))),
    el('td', { class: 'num' + (num(g.nacks) ? ' bad' : '') }, String(num(g.nacks))),
    el('td', { class: 'num inarow' + (num(g.nacks_in_a_row) ? ' bad' : '') }, String(num(g.nacks_in_a_row))),
    el('td', { class: 'detail dropped' + ((g.dropped_fields || []).length ? ' warn' : '') }, (g.dropped_fields || []).join(', ')),
    el('td', { class: 'detail' + (g.lagging ? ' bad' : '') }, g.last_nack ? (g.last_nack.version || '') + ': ' + (g.last_nack.error || g.last_nack.message || '') : ''))));
  const lagging = st.lagging_gfes || [];
  if (lagging.length) {
    out.unshift(el('section', { class: 'card alarm lagging' },
      el('h3', {}, el('span', { class: 'badge bad' }, lagging.length + ' lagging'),
        ' gfes refusing the current snapshot (not following health changes): ', lagging.join(', '))));
  }
  out.push(el('section', { class: 'card gfes' }, el('h3', {}, 'Connected gfes'),
    el('table', {}, el('thead', {}, el('tr', {}, ['gfe', 'site', 'build', 'streams', 'acked version', 'acks', 'nacks', 'nacks in a row',
      'fields it cannot read', 'last nack'].map((h) => el('th', {}, h)))), gfes)));
  if (st.autoscaler) out.push(genericCard('Autoscaler', st.autoscaler));
  if (st.quota) out.push(genericCard('Quota', st.quota));
  return out;
}

// ---------- generic: sections other issues add to /status ----------

// genericCard draws any JSON value: an array of objects as a table with a
// column per key, an object as key/value rows, scalars as text.
function genericCard(title, v) {
  return el('section', { class: 'card generic', 'data-section': title.toLowerCase() }, el('h3', {}, title), generic(v));
}

function generic(v) {
  if (Array.isArray(v)) {
    if (v.length && v.every((x) => x && typeof x === 'object' && !Array.isArray(x))) {
      const keys = [...new Set(v.flatMap((x) => Object.keys(x)))];
      return el('table', {}, el('thead', {}, el('tr', {}, keys.map((k) => el('th', {}, k)))),
        el('tbody', {}, v.map((x) => el('tr', {}, keys.map((k) => el('td', {}, scalarOrNested(x[k])))))));
    }
    return el('span', {}, v.map((x) => (typeof x === 'object' ? JSON.stringify(x) : String(x))).join(', '));
  }
  if (v && typeof v === 'object') {
    return el('table', {}, el('tbody', {}, Object.entries(v).map(([k, x]) =>
      el('tr', {}, el('th', { scope: 'row' }, k), el('td', {}, scalarOrNested(x))))));
  }
  return el('span', {}, String(v));
}

function scalarOrNested(x) {
  if (x === undefined || x === null) return '';
  return typeof x === 'object' ? generic(x) : String(x);
}

// ---------- page ----------

let lastOK = 0;

function renderMeta(st) {
  const cp = Array.isArray(st.health) || Array.isArray(st.gfes);
  document.getElementById('title').textContent = (cp ? 'control plane ' : 'gfe ') + (st.node || '');
  document.title = 'Spillway ' + (cp ? 'control plane ' : 'gfe ') + (st.node || '');
  const v = st.version || {};
  const items = [
    cp ? null : ['site', st.site],
    ['ready', st.ready ? 'yes' : 'no'],
    ['config', st.config_version],
    cp ? ['snapshot', st.snapshot_version] : null,
    cp ? ['control planes', (st.control_planes || []).join(', ')] : ['gossip members', String((st.gossip_members || []).length)],
    ['build', [v.version, v.revision && v.revision.slice(0, 12)].filter(Boolean).join(' ')],
  ].filter(Boolean);
  document.getElementById('meta').replaceChildren(...items.map(([k, x]) =>
    el('span', { class: 'kv', 'data-key': k }, el('b', {}, k), ' ', x === undefined || x === '' ? '–' : String(x))));
  return cp;
}

function render(st) {
  const main = document.getElementById('main');
  const open = new Set([...main.querySelectorAll('details[open]')].map((d) => d.dataset.id));
  const cp = renderMeta(st);
  main.replaceChildren(...(cp ? renderCP(st, open) : renderGFE(st, open)));
}

// poll fetches /status and redraws, then calls itself again in POLL_MS.
// A hidden tab does not fetch; it polls again as soon as it is shown.
async function poll() {
  const live = document.getElementById('live');
  if (document.hidden) {
    document.addEventListener('visibilitychange', poll, { once: true });
    return;
  }
  try {
    const res = await fetch('status', { cache: 'no-store', credentials: 'same-origin', headers: { Accept: 'application/json' } });
    if (!res.ok) throw new Error('/status answered ' + res.status);
    const st = await res.json();
    render(st);
    lastOK = Date.now();
    live.className = 'live ok';
    live.dataset.updated = String(lastOK);
    live.textContent = 'live · updated ' + new Date(lastOK).toLocaleTimeString();
  } catch (err) {
    live.className = 'live stale';
    live.textContent = (lastOK ? 'stale since ' + new Date(lastOK).toLocaleTimeString() : 'no data') + ' · ' + err.message;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
