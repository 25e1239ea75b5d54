/* cheems annotate: the admin dashboard. Renders GET /api/stats as tables, whatever its nesting:
 * a dict of dicts becomes one table (row per outer key), a dict of numbers a two-column table,
 * a list of dicts a table, anything deeper a nested table. All text goes in with textContent. */
'use strict';

const CSRF_KEY = 'cheems_csrf';

const SECTIONS = [
  ['tasks', '任务总览'],
  ['by_category', '各类别进度'],
  ['by_annotator', '各标注员进度'],
  ['per_day', '每日完成量'],
  ['agreement', '双盲标注一致率'],
  ['krippendorff', "Krippendorff's α（分数按有序尺度，两两比较按名义尺度）"],
  ['gold', '金标准题准确率'],
  ['position_bias', '位置偏差'],
  ['conflict_ratio', '冲突率'],
];

const WORDS = {
  total: '总数', done: '已完成', pending: '待处理', open: '未完成', in_progress: '进行中', assigned: '已分配',
  aligning: '对齐中', escalated: '已上报', settled: '已一致', waiting: '等待对方', annotated: '已标注',
  answers: '首轮答案', realigned: '对齐后重答', annotations: '标注数', tasks: '任务数', prompts: '问题数',
  rejected: '被驳回', reviews: '审核数', reviewed: '已审核', accepted: '通过', gold: '金标准题',
  gold_tasks: '金标准题数', gold_items: '金标准审核数', annotators: '标注员', reviewers: '审核员', role: '角色',
  correct: '正确', accuracy: '准确率', count: '数量', n: '样本数', mean: '平均值', percent: '平均一致率',
  fully_agreed: '完全一致的任务', units: '单元数', coders: '标注者数', level: '尺度', value: 'α 值', note: '说明',
  scores_ordinal: '分数（有序）', pairs_nominal: '两两比较（名义）', strict_pairs: '严格偏好对数',
  first_shown_wins: '先展示者胜出比例', conflict_ratio: '冲突率', category: '类别', annotator: '标注员',
  rate: '比例', share: '占比',
};

const VALUES = { annotator: '标注员', reviewer: '审核员', admin: '管理员', ordinal: '有序', nominal: '名义' };
const PERCENT_KEYS = new Set(['percent', 'accuracy', 'first_shown_wins', 'rate', 'share']);

const HINTS = {
  tasks: '按状态统计的三元组任务数（不含金标准题）。',
  agreement: '双盲标注的两位标注员在两两比较上的一致比例（要求 ≥ 90%，不足时进入对齐）。',
  krippendorff: '首轮标注的 Krippendorff α：1 为完全一致，0 为随机水平。',
  gold: '标注员答金标准题、审核员审核预埋样本的准确率。',
  position_bias: '严格偏好中先展示的回答胜出的比例；约 50% 表示没有位置偏差。',
  conflict_ratio: '冲突消解后仍存在冲突的比例。',
};

const $ = (id) => document.getElementById(id);

function el(tag, props, text) {
  const node = document.createElement(tag);
  Object.entries(props || {}).forEach(([k, v]) => node.setAttribute(k, v));
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function word(key) {
  return WORDS[key] || key;
}

function isScalar(v) {
  return v === null || v === undefined || ['string', 'number', 'boolean'].includes(typeof v);
}

function isRecord(v) {
  return v && typeof v === 'object' && !Array.isArray(v);
}

function formatScalar(v, key) {
  if (v === null || v === undefined) return '—';
  if (typeof v === 'number') {
    if (Number.isNaN(v)) return '—';
    if (PERCENT_KEYS.has(key)) return `${(v * 100).toFixed(1)}%`;
    return Number.isInteger(v) ? v.toLocaleString('zh-CN') : v.toFixed(3);
  }
  if (typeof v === 'boolean') return v ? '是' : '否';
  return VALUES[v] || String(v);
}

function cell(tag, value, key) {
  const td = el(tag, isScalar(value) && typeof value === 'number' ? { class: 'num' } : {});
  if (isScalar(value) || (Array.isArray(value) && value.every(isScalar))) {
    td.textContent = Array.isArray(value) ? value.map((v) => formatScalar(v, key)).join('，') : formatScalar(value, key);
  } else {
    td.append(renderValue(value));
  }
  return td;
}

function headerRow(names) {
  const tr = el('tr');
  names.forEach((n) => tr.append(el('th', { title: n }, word(n))));
  return tr;
}

function columnsOf(rows) {
  const cols = [];
  rows.forEach((r) => Object.keys(r).forEach((k) => { if (!cols.includes(k)) cols.push(k); }));
  return cols;
}

/** {name: {col: v}} -> one row per name; {name: v} -> two columns; [{col: v}] -> one row per item. */
function renderValue(value) {
  if (isScalar(value)) return el('span', {}, formatScalar(value));
  const table = el('table', { class: 'stats' });
  if (Array.isArray(value)) {
    if (!value.every(isRecord)) return el('span', {}, value.map(formatScalar).join('，'));
    const cols = columnsOf(value);
    table.append(headerRow(cols));
    value.forEach((row) => {
      const tr = el('tr');
      cols.forEach((c) => tr.append(cell('td', row[c], c)));
      table.append(tr);
    });
    return table;
  }
  const entries = Object.entries(value);
  const cols = columnsOf(entries.map(([, v]) => (isRecord(v) ? v : {})));
  if (entries.length && cols.length && entries.every(([, v]) => isRecord(v) && Object.values(v).every(isScalar))) {
    table.append(headerRow(['', ...cols]));
    entries.forEach(([name, row]) => {
      const tr = el('tr');
      tr.append(el('th', { title: name }, word(name)));
      cols.forEach((c) => tr.append(cell('td', row[c], c)));
      table.append(tr);
    });
    return table;
  }
  entries.forEach(([name, v]) => {
    const tr = el('tr');
    tr.append(el('th', { title: name }, word(name)), cell('td', v, name));
    table.append(tr);
  });
  if (!entries.length) return el('span', { class: 'meta' }, '（暂无数据）');
  return table;
}

function renderStats(stats) {
  const box = $('stats');
  box.replaceChildren();
  const known = SECTIONS.map(([k]) => k);
  const order = [...SECTIONS, ...Object.keys(stats).filter((k) => !known.includes(k)).map((k) => [k, word(k)])];
  order.forEach(([key, title]) => {
    if (!(key in stats)) return;
    const section = el('section', { class: 'card stats-section', id: `stats-${key}` });
    section.append(el('h2', {}, title));
    if (HINTS[key]) section.append(el('p', { class: 'hint' }, HINTS[key]));
    const value = stats[key];
    if (isScalar(value)) section.append(el('p', { class: 'big-number' }, formatScalar(value, key)));
    else section.append(renderValue(value));
    box.append(section);
  });
  $('updated-at').textContent = new Date().toLocaleString('zh-CN');
}

function showMessage(text, kind) {
  const box = $('message');
  box.textContent = text || '';
  box.className = text ? (kind || 'info') : '';
}

// the study to show: the address's (?study=), else the one this tab's annotation page last used
function studyQuery() {
  const study = new URLSearchParams(location.search).get('study') || sessionStorage.getItem('cheems_study');
  return study ? '?study=' + encodeURIComponent(study) : '';
}

async function loadStats() {
  let resp;
  try {
    resp = await fetch('/api/stats' + studyQuery(), { credentials: 'same-origin', headers: { Accept: 'application/json' } });
  } catch (err) {
    return showMessage('无法连接服务器', 'error');
  }
  if (resp.status === 401) {
    $('stats-view').hidden = true;
    $('refresh').hidden = true;
    $('login-view').hidden = false;
    return;
  }
  if (resp.status === 403) {
    $('login-view').hidden = false;
    return showMessage('只有管理员可以查看统计看板，请换用管理员账号登录', 'error');
  }
  if (!resp.ok) return showMessage(`获取统计失败（HTTP ${resp.status}）`, 'error');
  renderStats(await resp.json());
  fetch('/api/me', { credentials: 'same-origin' }).then((r) => (r.ok ? r.json() : null))
    .then((me) => { if (me) $('whoami').textContent = me.username; }).catch(() => {});
  $('login-view').hidden = true;
  $('stats-view').hidden = false;
  $('refresh').hidden = false;
  showMessage('');
}

async function login(event) {
  event.preventDefault();
  const resp = await fetch('/api/login', {
    method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ username: $('username').value.trim(), password: $('password').value }),
  });
  if (resp.status === 401) return showMessage('用户名或密码错误', 'error');
  if (!resp.ok) return showMessage(`登录失败（HTTP ${resp.status}）`, 'error');
  const data = await resp.json();
  sessionStorage.setItem(CSRF_KEY, data.csrf_token);
  $('password').value = '';
  $('whoami').textContent = data.username;
  loadStats();
}

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').addEventListener('submit', login);
  $('refresh').onclick = loadStats;
  loadStats();
});
