// The page's script, served from /static (the Content-Security-Policy allows no inline script).
'use strict';
const $ = (id) => document.getElementById(id);
let current = null;
let source = null;

$('form').addEventListener('submit', (event) => event.preventDefault());
$('token').value = sessionStorage.getItem('gpuops-token') || '';
$('token').addEventListener('change', () => sessionStorage.setItem('gpuops-token', $('token').value));

function text(tag, value, cls) {
  const node = document.createElement(tag);
  node.textContent = value;
  if (cls) node.className = cls;
  return node;
}

async function loadHosts() {
  const response = await fetch('/api/hosts');
  const body = await response.json();
  const box = $('hosts');
  box.replaceChildren();
  const select = $('limit');
  const known = new Set(Array.from(select.options).map((o) => o.value));
  // One card per server: a server group (several hosts, one server) is rank 0's card, naming its nodes. The servers
  // of one machine (one address, or one LXC container) sit together on the machine's card.
  const cards = new Map();
  for (const host of body.servers) {
    const card = document.createElement('div');
    card.className = 'host';
    card.dataset.host = host.name;
    const title = document.createElement('div');
    title.appendChild(text('span', '', 'dot ' + (host.healthy ? 'up' : 'down')));
    title.appendChild(text('b', host.name));
    title.appendChild(text('span', '  ' + host.address + ':' + host.port +
      (host.pve_vmid ? '  (LXC ' + host.pve_vmid + ' on ' + host.pve_node + ')' : '  (bare metal)'), 'small'));
    card.appendChild(title);
    if (host.group) {
      card.dataset.group = host.group.name;
      card.appendChild(text('div', 'server group of ' + host.group.nnodes + ' nodes: ' + host.group.nodes
        .map((node) => node.name + ' (rank ' + node.rank + ')').join(', ') +
        '; last outcome ' + (host.group.outcome || '-') +
        (host.group.failed_nodes && host.group.failed_nodes.length ? ', failed on ' +
          host.group.failed_nodes.join(', ') : ''), 'small group'));
    }
    card.appendChild(text('div', (host.healthy ? 'serving' : 'not serving (' + host.health + ')') +
      (host.pid ? ', pid ' + host.pid : ''), 'small'));
    const s = host.settings || {};
    const spec = s.speculative_algorithm ? s.speculative_algorithm + ' steps ' + s.speculative_num_steps + ' topk ' +
      s.speculative_eagle_topk + ' draft ' + s.speculative_num_draft_tokens : 'no speculative decoding';
    const dyn = s.SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE ? ', drafting off from batch ' +
      s.SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE : (s.speculative_adaptive ? ', adaptive tiers' : '');
    // Settings not known (not serving, a keyed server no report verified) are said so, never shown as "no
    // speculative decoding"; a keyed server's come from its last report, and the card says so with its time.
    card.appendChild(host.settings ? text('div', spec + dyn +
      (s.max_running_requests ? ', max running ' + s.max_running_requests : ''), 'small settings')
      : text('div', 'settings unknown: ' + (host.settings_error || 'not asked'), 'small settings unknown'));
    if (host.settings && host.settings_source) {
      card.appendChild(text('div', 'settings ' + host.settings_source, 'small settings-source'));
    }
    card.appendChild(text('div', 'patch sha256 ' + (host.patch_sha256 ? host.patch_sha256.slice(0, 12) : '-'), 'small'));
    const last = host.last_report;
    // The last run's report: a redeploy's, or an undo's (status undone).
    card.appendChild(text('div', last ? 'last run: ' + last.status + ' (' + last.reason.slice(0, 70) + ')' +
      (last.downtime_s ? ', outage ' + last.downtime_s + ' s' : '') : 'no run report yet', 'small'));
    if (last && last.performance && last.performance.verdict !== 'skipped') {
      card.appendChild(text('div', 'performance gate: ' + last.performance.verdict, 'small'));
    }
    if (last && last.bake) {
      card.appendChild(text('div', 'canary bake: ' + last.bake.verdict + ' (' + last.bake.action + ')', 'small'));
    }
    // The last speculation tuning (playbooks/tune_speculation.yml): its threshold, and its table drawn.
    if (host.speculation) {
      card.appendChild(text('div', 'speculation tuned ' + (host.speculation.measured_at || '') + ': ' +
        (host.speculation.threshold === null ? 'EAGLE-3 ahead at every level' :
          'plain decoding catches EAGLE-3 from batch ' + host.speculation.threshold), 'small speculation'));
      const chart = document.createElement('img');
      chart.className = 'speculation';
      chart.alt = 'output tok/s by concurrency per speculation mode on ' + host.name;
      chart.src = '/api/hosts/' + encodeURIComponent(host.name) + '/speculation.svg';
      card.appendChild(chart);
    }
    card.appendChild(revisionsBlock(host));
    cards.set(host.name, card);
    // A group is redeployed whole: its option limits the run to every node.
    if (!known.has(host.limit)) select.appendChild(new Option(host.name, host.limit));
  }
  for (const machine of body.machines) {
    const machineCard = document.createElement('div');
    machineCard.className = 'machine';
    machineCard.dataset.machine = machine.name;
    machineCard.appendChild(text('div', machine.label + (machine.servers.length > 1 ? ': ' + machine.servers.length +
      ' servers' : ''), 'small machine-label'));
    for (const name of machine.servers) machineCard.appendChild(cards.get(name));
    box.appendChild(machineCard);
  }
}

// The server's revisions on its host (docs/undo.md), newest first, and its undo: to the one before the latest, or to
// the revision of a line, each by the number shown (never "the one before the latest" of a listing that may be a
// minute old), after the operator confirms it. A group is undone whole (its limit names every node); the revisions
// shown are rank 0's.
let revisionsRetries = 0;
function revisionsBlock(host) {
  const box = document.createElement('div');
  box.className = 'revisions small';
  const listed = host.revisions || {};
  if (!listed.revisions) {
    box.appendChild(text('div', 'revisions: ' + (listed.error || 'not read') +
      (listed.read_at ? ' (read ' + listed.read_at + ')' : ''), 'revisions-unknown'));
    // Still being read: ask again shortly (the hosts view waits only within its own bound).
    if (listed.reading && revisionsRetries < 10) { revisionsRetries += 1; setTimeout(loadHosts, 3000); }
    return box;
  }
  box.appendChild(text('div', 'revisions: ' + (listed.count ? listed.count + ' kept, ' + listed.total_bytes +
    ' bytes, read ' + listed.read_at : 'none kept yet') +
    (listed.problems.length ? '; unreadable: ' + listed.problems.join('; ') : ''), 'revisions-head'));
  for (const revision of listed.revisions) {
    const origin = revision.origin === 'undo' ? 'undo to ' + revision.undo_to : (revision.origin || '-');
    const line = text('div', revision.number + ' (' + origin + ')  ' + (revision.time_utc || '-') + '  run ' +
      (revision.run_id || '-') +
      '  ' + revision.size_bytes + ' B  ' + revision.changed.map((file) => file.change + ' ' + file.path).join(', '),
      'revision');
    line.dataset.revision = revision.number;
    if (revision.number !== listed.latest) {
      const back = text('button', 'undo to ' + revision.number, 'undo-to');
      back.type = 'button';
      back.addEventListener('click', () => undo(host, revision.number));
      line.appendChild(back);
    }
    box.appendChild(line);
  }
  // The revision before the latest, as the playbook's default would take it, when the page lists it.
  const before = listed.revisions.find((revision) => revision.number === listed.latest - 1);
  if (before) {
    const last = text('button', 'Undo the last run (back to revision ' + before.number + ')', 'undo');
    last.type = 'button';
    last.dataset.revision = before.number;
    last.addEventListener('click', () => undo(host, before.number));
    box.appendChild(last);
  }
  return box;
}

async function undo(host, revision) {
  if (current) { $('status').textContent = 'a run is going: wait for it or cancel it'; return; }
  // An undo stops the server (the same outage window as a redeploy): asked before anything is sent.
  if (!window.confirm('Undo ' + host.limit + ' to revision ' + revision + '? The server is stopped and restarted ' +
      'with that revision\'s files.')) {
    $('status').textContent = 'undo of ' + host.limit + ' not confirmed: nothing was sent';
    return;
  }
  sessionStorage.setItem('gpuops-token', $('token').value);
  try {
    const answer = await authorised('/api/undos', { limit: host.limit, revision: revision });
    follow(answer.id, 'undo');
  } catch (error) { $('status').textContent = 'undo refused: ' + error.message; $('status').className = 'failed'; }
}

function renderLive(progress) {
  const box = $('live');
  box.replaceChildren();
  for (const [host, phase] of Object.entries(progress)) {
    const card = text('div', host + ': ' + phase.label + ' (' + phase.state + ')' +
      (phase.attempts ? ' attempt ' + phase.attempts : ''), 'phase');
    card.dataset.host = host;
    box.appendChild(card);
  }
}

function follow(id, kind) {
  kind = kind || 'redeploy';
  current = id;
  const progress = {};
  $('progress').replaceChildren();
  $('notice').textContent = '';
  $('cancel').disabled = false;
  $('start').disabled = true;
  $('status').textContent = kind + ' ' + id + ': running';
  source = new EventSource('/api/redeploys/' + id + '/events');
  source.addEventListener('progress', (message) => {
    const record = JSON.parse(message.data);
    if (record.kind !== 'task' || !record.phase) return;
    progress[record.host] = { label: record.phase.replace('_', ' '), state: record.state, attempts: record.attempts };
    renderLive(progress);
    const item = text('li', record.at.slice(11, 23) + '  ' + record.host + '  ' + record.phase + '  ' + record.state +
      (record.msg ? ': ' + record.msg : ''));
    item.className = 'event';
    $('progress').appendChild(item);
    $('progress').scrollTop = $('progress').scrollHeight;
  });
  source.addEventListener('end', async (message) => {
    source.close();
    const status = JSON.parse(message.data).status;
    $('status').textContent = kind + ' ' + id + ': ' + status;
    $('status').className = status;
    $('cancel').disabled = true;
    $('start').disabled = false;
    current = null;
    await addTimeline(id, true);
    revisionsRetries = 0;
    await loadHosts();
  });
}

// The server escapes every text and attribute of its pictures; this parses them as SVG (never as HTML) and
// drops scripts, foreign content and event-handler attributes all the same before they join the page.
function svgNode(markup) {
  const parsed = new DOMParser().parseFromString(markup, 'image/svg+xml');
  const root = parsed.documentElement;
  if (root.nodeName !== 'svg') return text('div', 'picture unreadable', 'small');
  for (const node of Array.from(root.querySelectorAll('script, foreignObject'))) node.remove();
  for (const node of [root, ...root.querySelectorAll('*')]) {
    for (const attribute of Array.from(node.attributes)) {
      const value = attribute.value.trim().toLowerCase();
      if (attribute.name.toLowerCase().startsWith('on') || value.startsWith('javascript:')) {
        node.removeAttribute(attribute.name);
      }
    }
  }
  return document.importNode(root, true);
}

async function addTimeline(id, first) {
  if (document.querySelector('.run[data-run="' + id + '"]')) return;
  const details = await (await fetch('/api/redeploys/' + id)).json();
  const svg = await (await fetch('/api/redeploys/' + id + '/timeline.svg')).text();
  const box = document.createElement('div');
  box.className = 'run';
  box.dataset.run = id;
  box.dataset.status = details.status;
  box.dataset.kind = details.kind;
  // An undo says so, with its server and the revision it put back (null: the one before the latest).
  const what = details.kind === 'undo' ? 'undo of ' + details.limit + ' to revision ' +
    (details.extra_vars.sglang_undo_to === null ? 'before the latest' : details.extra_vars.sglang_undo_to)
    : 'redeploy';
  const head = text('div', new Date(details.created_at * 1000).toLocaleString() + '  ' + what + '  ' + id + '  ',
    'small');
  head.appendChild(text('b', details.status, details.status));
  box.appendChild(head);
  if (details.failure) box.appendChild(text('div', 'why: ' + details.failure, 'small failure failed'));
  // The run's outcome per server: a group once, with its outcome and its nodes' statuses.
  for (const server of details.servers || []) {
    const line = text('div', server.group ? 'group ' + server.name + ': ' + (server.group.outcome || '-') + ' (' +
      server.group.nodes.map((node) => node.name + ' rank ' + node.rank + ' ' + node.status).join(', ') + ')'
      : server.host + ': ' + server.status, 'small server');
    line.dataset.server = server.name || server.host;
    box.appendChild(line);
  }
  const picture = document.createElement('div');
  picture.appendChild(svgNode(svg));
  box.appendChild(picture);
  // The performance gate's before/after per host and the canary bake's canary against baseline, when either
  // measured anything (204 otherwise).
  const chart = await fetch('/api/redeploys/' + id + '/performance.svg');
  if (chart.status === 200) {
    const gate = document.createElement('div');
    gate.className = 'performance';
    gate.appendChild(svgNode(await chart.text()));
    box.appendChild(gate);
  }
  if (first) $('timelines').prepend(box); else $('timelines').appendChild(box);
}

async function authorised(url, body) {
  const response = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json',
    'Authorization': 'Bearer ' + $('token').value }, body: body ? JSON.stringify(body) : undefined });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(response.status + ' ' + (answer.detail || response.statusText));
  return answer;
}

$('start').addEventListener('click', async () => {
  sessionStorage.setItem('gpuops-token', $('token').value);
  let extra;
  try { extra = JSON.parse($('extra-vars').value || '{}'); } catch (error) {
    $('status').textContent = 'extra vars: ' + error.message; return;
  }
  if ($('force').checked) extra.sglang_force_restart = true;
  try {
    const answer = await authorised('/api/redeploys', { limit: $('limit').value || null, extra_vars: extra });
    follow(answer.id);
  } catch (error) { $('status').textContent = 'refused: ' + error.message; $('status').className = 'failed'; }
});

$('cancel').addEventListener('click', async () => {
  if (!current) return;
  try {
    const notice = await authorised('/api/redeploys/' + current + '/cancel');
    $('notice').textContent = 'Cancel requested. What to expect:\n' + Object.entries(notice.hosts)
      .map(([host, what]) => host + ': ' + what.expect).join('\n');
  } catch (error) { $('notice').textContent = 'cancel refused: ' + error.message; }
});

async function loadHistory() {
  const body = await (await fetch('/api/redeploys?limit=10')).json();
  for (const run of body.redeploys) {
    if (run.status === 'running') { if (!current) follow(run.id, run.kind); continue; }
    await addTimeline(run.id, false);
  }
}

loadHosts().catch((error) => { $('hosts').textContent = 'hosts: ' + error.message; });
loadHistory();
