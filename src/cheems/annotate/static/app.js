/* cheems annotate: the annotator / reviewer page.
 *
 * Untrusted text (prompts, responses, notes, names) is only ever inserted with textContent; the
 * server's `html` and `prompt_html` fields (Markdown already sanitised server-side) are the only
 * strings given to innerHTML. Span offsets are sent as Unicode code points of the raw `content`
 * (what Python's len counts), converted from the browser's UTF-16 offsets.
 */
'use strict';

const PAIR_TEXT = { g: '前者更好', b: '后者更好', s: '一样好' };
const CSRF_KEY = 'cheems_csrf';
const STUDY_KEY = 'cheems_study';

const S = {
  csrf: sessionStorage.getItem(CSRF_KEY) || '',
  // the study every request works in (?study= on each call): the address's, else this tab's last one
  study: new URLSearchParams(location.search).get('study') || sessionStorage.getItem(STUDY_KEY) || '',
  me: null,
  scale: [],
  dimensions: [],
  view: null,
  mode: 'task',      // task | alignment | escalation: which endpoint the form posts to
  task: null,
  keys: [],
  contents: {},
  scores: {},
  pairs: {},
  spans: [],
  active: null,
  pending: null,     // the current selection in a raw view: {key, start, end, text} in code points
  review: null,
  busy: false,
};

const $ = (id) => document.getElementById(id);

function el(tag, props, text) {
  const node = document.createElement(tag);
  Object.entries(props || {}).forEach(([k, v]) => {
    if (k === 'class') node.className = v;
    else if (k in node && typeof v !== 'string') node[k] = v;
    else node.setAttribute(k, v);
  });
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// ------------------------------------------------------------------ text offsets

/** Code points in the first `u16` UTF-16 units of `text`. */
function codePointOffset(text, u16) {
  return Array.from(text.slice(0, u16)).length;
}

/** UTF-16 index of code point `cp` of `text`. */
function utf16Offset(text, cp) {
  return Array.from(text).slice(0, cp).join('').length;
}

/** Slice of `text` between code-point offsets. */
function cpSlice(text, start, end) {
  return Array.from(text).slice(start, end).join('');
}

// ------------------------------------------------------------------ server

function detailText(data) {
  if (!data || data.detail === undefined) return '';
  const d = data.detail;
  if (Array.isArray(d)) return d.map((x) => ((x.loc || []).join('.') + '：' + (x.msg || ''))).join('；');
  return typeof d === 'string' ? d : JSON.stringify(d);
}

function withStudy(path) {
  if (!S.study || S.study === 'default') return path;  // the server's own default: the address as it was
  return path + (path.includes('?') ? '&' : '?') + 'study=' + encodeURIComponent(S.study);
}

async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && S.csrf) headers['X-CSRF-Token'] = S.csrf;
  let resp;
  try {
    resp = await fetch(withStudy(path), {
      method, headers, credentials: 'same-origin',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    return { status: 0, ok: false, data: { detail: '无法连接服务器' } };
  }
  let data = null;
  if (resp.status !== 204) {
    try { data = await resp.json(); } catch (err) { data = null; }
  }
  if (resp.status === 401 && path !== '/api/login') {
    sessionExpired();
  }
  return { status: resp.status, ok: resp.ok, data };
}

function showMessage(text, kind) {
  const box = $('message');
  box.textContent = text || '';
  box.className = text ? (kind || 'info') : '';
}

function serverError(prefix, r) {
  const why = detailText(r.data);
  showMessage(prefix + (why ? '：' + why : `（HTTP ${r.status}）`), 'error');
}

// ------------------------------------------------------------------ views and login

const VIEWS = ['login-view', 'empty-view', 'task-view', 'review-view'];

function showView(id) {
  VIEWS.forEach((v) => { $(v).hidden = v !== id; });
  S.view = id;
  document.querySelectorAll('#nav .tab').forEach((b) => b.classList.remove('current'));
}

function markTab(id) {
  const tab = $(id);
  if (tab) tab.classList.add('current');
}

function showEmpty(text, reload) {
  showView('empty-view');
  $('empty-text').textContent = text;
  $('reload').onclick = reload;
}

// Forget the session on this page and show the login form with `message`.
function signedOut(message, kind) {
  S.csrf = '';
  sessionStorage.removeItem(CSRF_KEY);
  S.me = null;
  $('nav').hidden = true;
  $('progress').hidden = true;
  $('logout').hidden = true;
  $('whoami').textContent = '';
  $('study').hidden = true;
  showView('login-view');
  showMessage(message, kind);
}

function sessionExpired() {
  signedOut('登录已失效，请重新登录', 'error');
}

async function login(event) {
  event.preventDefault();
  const r = await api('POST', '/api/login', { username: $('username').value.trim(), password: $('password').value });
  if (r.status === 401) return showMessage('用户名或密码错误', 'error');
  if (!r.ok) return serverError('登录失败', r);
  S.csrf = r.data.csrf_token;
  sessionStorage.setItem(CSRF_KEY, S.csrf);
  $('password').value = '';
  showMessage('');
  afterLogin(pickStudy({ username: r.data.username, role: r.data.role, categories: [], studies: r.data.studies }));
}

async function logout() {
  await api('POST', '/api/logout', {});
  signedOut('已退出', 'info');
}

const ROLE_TEXT = { annotator: '标注员', reviewer: '审核员', admin: '管理员' };

// The study the page works in: the one asked for when the user has a role there, else their
// first; with several, a picker in the top bar switches (and the address keeps the choice).
function pickStudy(me) {
  const studies = me.studies || [];
  const mine = studies.find((x) => x.name === (S.study || 'default')) || studies[0];
  if (mine) {
    S.study = mine.name;
    sessionStorage.setItem(STUDY_KEY, S.study);
  }
  const picker = $('study');
  picker.replaceChildren(...studies.map((x) => el('option', { value: x.name }, x.name)));
  picker.value = S.study;
  picker.hidden = studies.length < 2;
  return Object.assign({}, me, { role: mine ? mine.role : me.role });
}

function switchStudy() {
  sessionStorage.setItem(STUDY_KEY, $('study').value);
  location.search = '?study=' + encodeURIComponent($('study').value);
}

// Only annotators are handed tasks: reviewers and admins land on the review queue, so opening
// the page never claims (and holds) an annotation task for them.
function afterLogin(me) {
  S.me = me;
  $('whoami').textContent = `${me.username}（${ROLE_TEXT[me.role] || me.role}）`;
  $('logout').hidden = false;
  $('nav').hidden = false;
  const annotator = me.role === 'annotator';
  $('nav-review').hidden = annotator;
  $('nav-escalations').hidden = me.role !== 'admin';
  $('nav-dashboard').hidden = me.role !== 'admin';
  $('nav-dashboard').href = S.study ? '/dashboard?study=' + encodeURIComponent(S.study) : '/dashboard';
  $('nav-task').hidden = !annotator;
  $('nav-alignment').hidden = !annotator;
  $('progress').hidden = !annotator;
  if (annotator) loadTask();
  else loadReview();
}

// ------------------------------------------------------------------ the annotator's progress

async function loadProgress() {
  if (!S.me || S.me.role !== 'annotator') return;
  const r = await api('GET', '/api/progress');
  if (!r.ok || !r.data) return;
  const p = r.data;
  $('progress-today').textContent = p.done_today;
  $('progress-total').textContent = p.done_total;
  $('progress-left').textContent = p.queue_left;
  $('progress-align').textContent = p.alignment_waiting;
  const badge = $('alignment-badge');
  badge.textContent = p.alignment_waiting;
  badge.hidden = !p.alignment_waiting;
}

// ------------------------------------------------------------------ guidelines

async function loadGuidelines() {
  const r = await api('GET', '/api/guidelines');
  if (!r.ok || !r.data) return;
  S.dimensions = r.data.dimensions || [];
  S.scale = r.data.scale || [];
  const body = $('guidelines-body');
  body.replaceChildren();
  const dl = el('dl', { class: 'dimensions' });
  S.dimensions.forEach((d) => { dl.append(el('dt', {}, d.name), el('dd', {}, d.definition)); });
  const table = el('table', { class: 'scale' });
  const head = el('tr');
  ['分数', '等级', '说明'].forEach((h) => head.append(el('th', {}, h)));
  table.append(head);
  S.scale.forEach((s) => {
    const tr = el('tr');
    tr.append(el('td', { class: 'num' }, s.score), el('td', {}, s.label), el('td', {}, s.description));
    table.append(tr);
  });
  body.append(el('h4', {}, '三个评价维度'), dl, el('h4', {}, '0–5 分评分标准'), table);
}

function scaleEntry(score) {
  return S.scale.find((s) => Number(s.score) === Number(score));
}

// ------------------------------------------------------------------ the annotation form

// GET one queue's next item: 204 shows `empty` (with a retry), an error says `failure`, else render it.
async function loadNext(path, tab, empty, failure, reload, render) {
  const r = await api('GET', path);
  if (r.status === 401) return;
  if (r.status === 204) {
    showEmpty(empty, reload);
    markTab(tab);
    return;
  }
  if (!r.ok) return serverError(failure, r);
  render(r.data);
  markTab(tab);
}

async function loadTask() {
  loadProgress();
  return loadNext('/api/tasks/next', 'nav-task',
    '没有待标注的任务了，辛苦了！如有需要对齐的任务，请到“对齐”页查看。', '获取任务失败', loadTask,
    (data) => renderForm(data, 'task', null));
}

function renderForm(task, mode, prefill) {
  showView('task-view');
  Object.assign(S, {
    mode, task, keys: task.responses.map((x) => x.key), contents: {}, scores: {}, pairs: {}, spans: [],
    pending: null,
  });
  task.responses.forEach((x) => { S.contents[x.key] = x.content; });
  const titles = { task: '标注任务', alignment: '对齐复核', escalation: '仲裁' };
  $('task-title').textContent = titles[mode];
  $('task-meta').textContent = metaText(task.task_id, task.category);
  setPromptHtml($('prompt'), task);
  $('align-panel').hidden = mode !== 'alignment';
  $('escalation-panel').hidden = mode !== 'escalation';
  $('escalate').hidden = mode !== 'alignment';
  $('submit').textContent = mode === 'task' ? '提交（Ctrl+Enter）' : '提交修改后的结果（Ctrl+Enter）';
  renderResponses($('responses'), task.responses, '', true);
  renderPairRows();
  $('span-key').replaceChildren(...S.keys.map((k) => el('option', { value: k }, k)));
  $('span-selection').textContent = '（尚未选中文字）';
  $('span-note').value = '';
  $('ranking').value = '';
  $('note').value = '';
  if (prefill) applyPrefill(prefill);
  setActive(S.keys[0]);
  refreshChecks();
  renderSpanList();
  window.scrollTo(0, 0);
  focusTask();
}

// Keyboard focus back on the task (the active response), out of any text field of the last one:
// after Ctrl+Enter from the note box the score keys must score the next task, not type into it.
function focusTask() {
  const card = $(`response-${S.active}`);
  if (card) card.focus({ preventScroll: true });
  else if (document.activeElement && document.activeElement.blur) document.activeElement.blur();
}

function metaText(id, category) {
  const cat = Array.isArray(category) ? category.join(' / ') : (category || '');
  return `编号 ${id}` + (cat ? ` · 类别：${cat}` : '');
}

function setPromptHtml(node, task) {
  if (typeof task.prompt_html === 'string') node.innerHTML = task.prompt_html;
  else { node.replaceChildren(el('pre', { class: 'plain' }, task.prompt || '')); }
}

/** One card per response; `prefix` keeps ids unique between the form ("") and the review ("review-"). */
function renderResponses(box, responses, prefix, withScores) {
  box.replaceChildren();
  box.style.setProperty('--n', responses.length);
  responses.forEach((resp) => {
    const k = resp.key;
    const card = $('response-template').content.firstElementChild.cloneNode(true);
    card.id = `${prefix}response-${k}`;
    card.dataset.key = k;
    card.tabIndex = -1;
    card.querySelector('.response-title').textContent = `回答 ${k}`;
    const rendered = card.querySelector('.rendered');
    rendered.id = `${prefix}html-${k}`;
    if (typeof resp.html === 'string') rendered.innerHTML = resp.html;
    else rendered.replaceChildren(el('pre', { class: 'plain' }, resp.content));
    const raw = card.querySelector('.raw');
    raw.id = `${prefix}raw-${k}`;
    raw.dataset.key = k;
    raw.textContent = resp.content;
    const showRendered = card.querySelector('.show-rendered');
    const showRaw = card.querySelector('.show-raw');
    showRendered.id = `${prefix}view-rendered-${k}`;
    showRaw.id = `${prefix}view-raw-${k}`;
    showRendered.onclick = () => toggleRaw(card, false);
    showRaw.onclick = () => toggleRaw(card, true);
    toggleRaw(card, false);
    if (withScores) buildScoreControls(card, k);
    else card.querySelector('.score-box').replaceChildren();
    if (!prefix) card.addEventListener('click', (e) => { if (!e.target.closest('input,button,label')) setActive(k); });
    box.append(card);
  });
}

function toggleRaw(card, raw) {
  card.querySelector('.rendered').hidden = raw;
  card.querySelector('.raw').hidden = !raw;
  card.querySelector('.show-raw').classList.toggle('on', raw);
  card.querySelector('.show-rendered').classList.toggle('on', !raw);
}

function buildScoreControls(card, k) {
  const group = card.querySelector('.scores');
  group.setAttribute('aria-label', `回答 ${k} 的分数`);
  for (let n = 0; n <= 5; n += 1) {
    const entry = scaleEntry(n);
    const label = el('label', { class: 'score-opt', for: `score-${k}-${n}` });
    if (entry) label.title = `${n} 分 · ${entry.label}：${entry.description}`;
    const input = el('input', { type: 'radio', id: `score-${k}-${n}`, name: `score-${k}`, value: String(n) });
    input.addEventListener('change', () => setScore(k, n, false));
    label.append(input, el('span', { class: 'num' }, n));
    if (entry) label.append(el('span', { class: 'lab' }, entry.label));
    group.append(label);
  }
  card.querySelector('.score-desc').id = `score-desc-${k}`;
}

function setScore(k, n, fromKeyboard) {
  S.scores[k] = n;
  const input = $(`score-${k}-${n}`);
  if (input) input.checked = true;
  const entry = scaleEntry(n);
  $(`score-desc-${k}`).textContent = entry ? `${n} 分 · ${entry.label}：${entry.description}` : `${n} 分`;
  if (fromKeyboard) {
    const next = S.keys[S.keys.indexOf(k) + 1];
    if (next) setActive(next);
  }
  refreshChecks();
}

function setActive(k) {
  if (!k) return;
  S.active = k;
  S.keys.forEach((x) => { const c = $(`response-${x}`); if (c) c.classList.toggle('active', x === k); });
}

function pairKeys() {
  const sorted = [...S.keys].sort();
  const out = [];
  for (let i = 0; i < sorted.length; i += 1) {
    for (let j = i + 1; j < sorted.length; j += 1) out.push(sorted[i] + sorted[j]);
  }
  return out;
}

function renderPairRows() {
  const box = $('pairs');
  box.replaceChildren();
  pairKeys().forEach((pk) => {
    const [x, y] = pk;
    const row = el('div', { class: 'pair', id: `pair-${pk}` });
    row.hidden = true;
    row.append(el('span', { class: 'pair-name', id: `pair-${pk}-name` }, `${x} 与 ${y}`));
    const text = { g: `${x} 更好`, b: `${y} 更好`, s: '一样好' };
    ['g', 'b', 's'].forEach((lab) => {
      const label = el('label', { for: `pair-${pk}-${lab}`, class: 'pair-opt' });
      const input = el('input', { type: 'radio', id: `pair-${pk}-${lab}`, name: `pair-${pk}`, value: lab });
      input.addEventListener('change', () => { S.pairs[pk] = lab; refreshChecks(); });
      label.append(input, el('b', {}, lab), document.createTextNode(`：${text[lab]}`));
      row.append(label);
    });
    box.append(row);
  });
  box.append(el('p', { id: 'pairs-none', class: 'hint' }, '目前没有同分的回答，无需两两比较。'));
}

function isTie(pk) {
  const [x, y] = pk;
  return S.scores[x] !== undefined && S.scores[x] === S.scores[y];
}

function updatePairRows() {
  let shown = 0;
  pairKeys().forEach((pk) => {
    const row = $(`pair-${pk}`);
    const tie = isTie(pk);
    row.hidden = !tie;
    if (tie) {
      shown += 1;
      $(`pair-${pk}-name`).textContent = `${pk[0]} 与 ${pk[1]}（同为 ${S.scores[pk[0]]} 分）`;
    } else {
      delete S.pairs[pk];
      ['g', 'b', 's'].forEach((lab) => { $(`pair-${pk}-${lab}`).checked = false; });
    }
  });
  $('pairs-none').hidden = shown > 0;
}

function refreshChecks() {
  updatePairRows();
  const res = checkRanking($('ranking').value);
  const box = $('ranking-check');
  box.textContent = res.message;
  box.className = 'check ' + (res.ok ? 'ok' : (res.empty ? '' : 'bad'));
}

// ------------------------------------------------------------------ ranking: parse and check

function normaliseRanking(text) {
  return text.replace(/＞/g, '>').replace(/＝/g, '=').replace(/\s+/g, '').toUpperCase();
}

/** {levels: {A: 0, C: 1, B: 1}} or {error}. */
function parseRanking(text) {
  const t = normaliseRanking(text);
  if (!t) return { error: '请填写最终排序，例如 A>C=B', empty: true };
  if (!/^[A-Z](?:[>=][A-Z])*$/.test(t)) return { error: '排序格式应为字母与 > 或 = 相连，例如 A>C=B' };
  const levels = {};
  let level = 0;
  for (let i = 0; i < t.length; i += 2) {
    const k = t[i];
    if (i > 0 && t[i - 1] === '>') level += 1;
    if (!S.keys.includes(k)) return { error: `本题没有回答 ${k}` };
    if (k in levels) return { error: `回答 ${k} 在排序中出现了两次` };
    levels[k] = level;
  }
  const missing = S.keys.filter((k) => !(k in levels));
  if (missing.length) return { error: `排序缺少回答 ${missing.join('、')}` };
  return { levels, text: t };
}

function relation(levels, x, y) {
  if (levels[x] < levels[y]) return 'g';
  return levels[x] > levels[y] ? 'b' : 's';
}

function relationWords(rel, x, y) {
  if (rel === 's') return `${x} 与 ${y} 并列`;
  return rel === 'g' ? `${x} 排在 ${y} 前面` : `${y} 排在 ${x} 前面`;
}

/** The first disagreement of `levels` with the scores and pair labels, or '' when consistent. */
function rankingConflict(levels) {
  for (const pk of pairKeys()) {
    const [x, y] = pk;
    const sx = S.scores[x];
    const sy = S.scores[y];
    const rel = relation(levels, x, y);
    if (sx !== sy) {
      const want = sx > sy ? 'g' : 'b';
      if (rel !== want) {
        const [hi, lo] = sx > sy ? [x, y] : [y, x];
        return `排序中${relationWords(rel, x, y)}，但 ${hi} 的分数（${S.scores[hi]}）`
          + `高于 ${lo}（${S.scores[lo]}），应为 ${hi} 排在 ${lo} 前面`;
      }
    } else {
      const label = S.pairs[pk];
      if (!label) return `${x} 与 ${y} 同为 ${sx} 分，请先在“同分回答两两比较”中选择 g / b / s`;
      if (rel !== label) {
        return `排序中${relationWords(rel, x, y)}，`
          + `与两两比较 ${pk} = ${label}（${relationWords(label, x, y)}）不一致`;
      }
    }
  }
  return '';
}

function checkRanking(text) {
  const missing = S.keys.filter((k) => S.scores[k] === undefined);
  const parsed = parseRanking(text);
  if (parsed.error) return { ok: false, empty: parsed.empty, message: parsed.error };
  if (missing.length) return { ok: false, message: `请先给回答 ${missing.join('、')} 打分` };
  const conflict = rankingConflict(parsed.levels);
  if (conflict) return { ok: false, message: conflict };
  return { ok: true, message: '排序与打分、两两比较一致 ✓', text: parsed.text };
}

/** Every weak order of the keys ("A>B=C", ...), for filling the ranking from scores and labels. */
function weakOrders(keys) {
  if (keys.length <= 1) return [keys.join('')];
  const out = [];
  keys.forEach((k, i) => {
    const rest = keys.filter((_, j) => j !== i);
    weakOrders(rest).forEach((tail) => { out.push(`${k}>${tail}`, `${k}=${tail}`); });
  });
  return out;
}

function fillRanking() {
  const missing = S.keys.filter((k) => S.scores[k] === undefined);
  if (missing.length) return showMessage(`请先给回答 ${missing.join('、')} 打分`, 'error');
  const byScore = [...S.keys].sort((a, b) => S.scores[b] - S.scores[a] || a.localeCompare(b));
  const found = weakOrders(byScore).find((t) => checkRanking(t).ok);
  if (!found) {
    const res = checkRanking(byScore.join('>'));
    return showMessage(res.message || '同分回答的两两比较互相矛盾，无法生成排序', 'error');
  }
  $('ranking').value = found;
  refreshChecks();
}

// ------------------------------------------------------------------ spans

function onSelectionChange() {
  if (S.view !== 'task-view') return;
  const sel = document.getSelection();
  if (!sel || sel.rangeCount === 0 || sel.isCollapsed) return;
  const range = sel.getRangeAt(0);
  const startPre = nodeElement(range.startContainer)?.closest('#responses pre.raw');
  const endPre = nodeElement(range.endContainer)?.closest('#responses pre.raw');
  if (!startPre || startPre !== endPre) return;
  const key = startPre.dataset.key;
  const content = S.contents[key];
  const before = document.createRange();
  before.selectNodeContents(startPre);
  before.setEnd(range.startContainer, range.startOffset);
  const u16Start = before.toString().length;
  const u16End = u16Start + range.toString().length;
  const start = codePointOffset(content, u16Start);
  const end = codePointOffset(content, u16End);
  if (end <= start) return;
  S.pending = { key, start, end, text: cpSlice(content, start, end) };
  $('span-key').value = key;
  $('span-selection').textContent = `已选中回答 ${key} 第 ${start}–${end} 字：「${S.pending.text}」`;
}

function nodeElement(node) {
  return node && (node.nodeType === Node.ELEMENT_NODE ? node : node.parentElement);
}

function addSpan() {
  const p = S.pending;
  if (!p) return showMessage('请先在某个回答的“原文”视图中选中一段文字', 'error');
  const chosen = $('span-key').value;
  if (p.key !== chosen) return showMessage(`选中的文字在回答 ${p.key} 中，不在回答 ${chosen} 中`, 'error');
  const note = $('span-note').value.trim();
  if (!note) return showMessage('请写明这段文字的问题', 'error');
  S.spans.push({ key: p.key, start: p.start, end: p.end, note });
  S.pending = null;
  $('span-note').value = '';
  $('span-selection').textContent = '（尚未选中文字）';
  const sel = document.getSelection();
  if (sel) sel.removeAllRanges();
  renderSpanList();
  showMessage(`已添加回答 ${p.key} 的问题片段`, 'ok');
}

function renderSpanList() {
  const list = $('span-list');
  list.replaceChildren();
  S.spans.forEach((s, i) => {
    const li = el('li', { id: `span-item-${i}` });
    li.append(el('b', {}, `${s.key} [${s.start}, ${s.end})`), document.createTextNode(' 「'),
      el('mark', {}, cpSlice(S.contents[s.key] || '', s.start, s.end)), document.createTextNode(`」：${s.note} `));
    const rm = el('button', { type: 'button', id: `span-remove-${i}`, class: 'small' }, '删除');
    rm.onclick = () => { S.spans.splice(i, 1); renderSpanList(); };
    li.append(rm);
    list.append(li);
  });
  S.keys.forEach((k) => highlightSpans($(`raw-${k}`), S.contents[k], S.spans.filter((s) => s.key === k)));
}

/** Rebuild a raw view as text nodes and <mark>s; `spans` are code-point ranges (may overlap). */
function highlightSpans(pre, content, spans) {
  if (!pre) return;
  const cuts = new Set([0, content.length]);
  const ranges = spans.map((s) => [utf16Offset(content, s.start), utf16Offset(content, s.end), s.note]);
  ranges.forEach(([a, b]) => { cuts.add(a); cuts.add(b); });
  const points = [...cuts].sort((a, b) => a - b);
  pre.replaceChildren();
  for (let i = 0; i + 1 < points.length; i += 1) {
    const [a, b] = [points[i], points[i + 1]];
    const covering = ranges.filter(([s, e]) => s <= a && b <= e);
    const text = content.slice(a, b);
    if (covering.length) pre.append(el('mark', { title: covering.map((r) => r[2]).join('；') }, text));
    else pre.append(document.createTextNode(text));
  }
}

// ------------------------------------------------------------------ submitting

function collectBody() {
  const missing = S.keys.filter((k) => S.scores[k] === undefined);
  if (missing.length) return { error: `请先给回答 ${missing.join('、')} 打分` };
  const untied = pairKeys().filter((pk) => isTie(pk) && !S.pairs[pk]);
  if (untied.length) return { error: `同分的 ${untied.join('、')} 还没有两两比较（g / b / s）` };
  const res = checkRanking($('ranking').value);
  if (!res.ok) return { error: res.message };
  const pairs = {};
  pairKeys().forEach((pk) => { if (isTie(pk)) pairs[pk] = S.pairs[pk]; });
  return {
    body: {
      scores: { ...S.scores }, pairs, ranking: res.text,
      spans: S.spans.map((s) => ({ key: s.key, start: s.start, end: s.end, note: s.note })),
      note: $('note').value,
    },
  };
}

async function submit() {
  if (S.busy || S.view !== 'task-view') return;
  const { body, error } = collectBody();
  if (error) return showMessage(error, 'error');
  const id = S.task.task_id;
  const path = { task: `/api/tasks/${id}/submit`, alignment: `/api/alignment/${id}`,
    escalation: `/api/escalations/${id}` }[S.mode];
  S.busy = true;
  $('submit').disabled = true;
  try {
    const r = await api('POST', path, body);
    await afterSubmit(r);
  } finally {
    S.busy = false;
    $('submit').disabled = false;
  }
}

const STATE_TEXT = {
  waiting: '已提交，等待另一位标注员复核',
  settled: '双方已达成一致，本题完成',
  escalated: '双方仍不一致，已提交上级裁决',
};

async function afterSubmit(r) {
  if (r.status === 401) return;
  if (S.mode === 'task') {
    if (r.status === 409 || r.status === 403) {
      showMessage(r.status === 409 ? '这道题你已经提交过了，为你加载下一题'
        : '这道题已不再分配给你（可能超时被收回），为你加载下一题', 'error');
      return loadTask();
    }
    if (!r.ok) return serverError('提交未通过检查', r);
    showMessage(`已提交（标注编号 ${r.data && r.data.annotation_id}），已为你加载下一题`, 'ok');
    return loadTask();
  }
  if (!r.ok) return serverError('提交失败', r);
  if (S.mode === 'alignment') {
    showMessage(STATE_TEXT[r.data && r.data.state] || '已提交', 'ok');
    return loadAlignment();
  }
  showMessage('仲裁结果已保存', 'ok');
  return loadEscalations();
}

async function escalate() {
  if (S.mode !== 'alignment' || S.busy) return;
  const r = await api('POST', `/api/alignment/${S.task.task_id}/escalate`, {});
  if (!r.ok) return serverError('提交上级失败', r);
  showMessage(STATE_TEXT.escalated, 'ok');
  loadAlignment();
}

// ------------------------------------------------------------------ alignment and escalation

async function loadAlignment() {
  loadProgress();
  return loadNext('/api/alignment/next', 'nav-alignment', '没有需要对齐的任务。', '获取对齐任务失败', loadAlignment,
    (data) => { renderForm(data, 'alignment', data.mine); renderAlignPanel(data); });
}

function applyPrefill(a) {
  Object.entries(a.scores || {}).forEach(([k, n]) => { if (S.keys.includes(k)) setScore(k, Number(n), false); });
  updatePairRows();
  Object.entries(a.pairs || {}).forEach(([pk, lab]) => {
    if (isTie(pk) && $(`pair-${pk}-${lab}`)) { S.pairs[pk] = lab; $(`pair-${pk}-${lab}`).checked = true; }
  });
  $('ranking').value = a.ranking || '';
  $('note').value = a.note || '';
  S.spans = (a.spans || []).filter((s) => S.keys.includes(s.key))
    .map((s) => ({ key: s.key, start: s.start, end: s.end, note: s.note || '' }));
}

function answerRows(mine, theirs) {
  const rows = [];
  S.keys.forEach((k) => rows.push([`回答 ${k} 分数`, mine.scores?.[k], theirs.scores?.[k]]));
  pairKeys().forEach((pk) => rows.push([`${pk[0]} 对 ${pk[1]}`, mine.pairs?.[pk], theirs.pairs?.[pk]]));
  rows.push(['排序', mine.ranking, theirs.ranking], ['备注', mine.note, theirs.note]);
  return rows;
}

function renderAlignPanel(t) {
  const pct = typeof t.agreement === 'number' ? `${(t.agreement * 100).toFixed(0)}%` : '—';
  $('align-agreement').textContent = pct;
  const table = $('align-table');
  table.replaceChildren();
  const head = el('tr');
  ['', '我的结果', '对方结果'].forEach((h) => head.append(el('th', {}, h)));
  table.append(head);
  answerRows(t.mine || {}, t.theirs || {}).forEach(([name, a, b]) => {
    const tr = el('tr', { class: String(a ?? '') === String(b ?? '') ? '' : 'diff' });
    tr.append(el('th', {}, name), el('td', {}, a ?? '—'), el('td', {}, b ?? '—'));
    table.append(tr);
  });
  const box = $('align-theirs-spans');
  box.replaceChildren();
  const spans = (t.theirs && t.theirs.spans) || [];
  if (spans.length) {
    box.append(el('h4', {}, '对方标出的问题片段'));
    const ul = el('ul');
    spans.forEach((s) => ul.append(el('li', {},
      `${s.key} [${s.start}, ${s.end})「${cpSlice(S.contents[s.key] || '', s.start, s.end)}」：${s.note || ''}`)));
    box.append(ul);
  }
}

async function loadEscalations() {
  const r = await api('GET', '/api/escalations');
  if (r.status === 401) return;
  if (!r.ok) return serverError('获取仲裁任务失败', r);
  const list = Array.isArray(r.data) ? r.data : [];
  if (!list.length) {
    showEmpty('没有待仲裁的任务。', loadEscalations);
    markTab('nav-escalations');
    return;
  }
  const item = list[0];
  renderForm(item, 'escalation', null);
  const box = $('escalation-answers');
  box.replaceChildren(el('p', {}, `共有 ${list.length} 个待仲裁任务。`));
  (item.answers || []).forEach((a, i) => {
    const dl = el('dl', { class: 'answer' });
    dl.append(el('dt', {}, a.annotator ? `标注 ${i + 1}（${a.annotator}）` : `标注 ${i + 1}`));
    ['scores', 'pairs', 'ranking', 'note'].forEach((f) => {
      if (a[f] === undefined) return;
      dl.append(el('dd', {}, `${f}：${typeof a[f] === 'string' ? a[f] : JSON.stringify(a[f])}`));
    });
    box.append(dl);
  });
  markTab('nav-escalations');
}

// ------------------------------------------------------------------ review

async function loadReview() {
  return loadNext('/api/review/next', 'nav-review', '没有待审核的内容。', '获取审核内容失败', loadReview, renderReview);
}

function renderReview(item) {
  showView('review-view');
  S.review = item;
  S.keys = item.responses.map((x) => x.key);
  S.contents = {};
  item.responses.forEach((x) => { S.contents[x.key] = x.content; });
  const stage = item.stage !== undefined ? `第 ${item.stage} 级审核 · ` : '';
  $('review-meta').textContent = stage + metaText(item.item_id, item.category);
  setPromptHtml($('review-prompt'), item);
  renderResponses($('review-responses'), item.responses, 'review-', false);
  const a = item.annotation || {};
  item.responses.forEach((x) => {
    const k = x.key;
    const card = $(`review-response-${k}`);
    const entry = scaleEntry(a.scores?.[k]);
    card.querySelector('.score-box').append(el('p', { class: 'score-badge', id: `review-score-${k}` },
      `得分：${a.scores?.[k] ?? '—'}` + (entry ? ` · ${entry.label}` : '')));
    highlightSpans($(`review-raw-${k}`), x.content, (a.spans || []).filter((s) => s.key === k));
  });
  const table = $('review-annotation');
  table.replaceChildren();
  const rows = [];
  pairKeys().forEach((pk) => {
    const lab = a.pairs?.[pk];
    rows.push([`${pk[0]} 对 ${pk[1]}`, lab ? `${lab}（${relationWords(lab, pk[0], pk[1])}）` : '—']);
  });
  rows.push(['排序', a.ranking || '—'], ['备注', a.note || '—']);
  (a.spans || []).forEach((s) => rows.push([`片段 ${s.key} [${s.start}, ${s.end})`,
    `「${cpSlice(S.contents[s.key] || '', s.start, s.end)}」：${s.note || ''}`]));
  rows.forEach(([name, value]) => {
    const tr = el('tr');
    tr.append(el('th', {}, name), el('td', {}, value));
    table.append(tr);
  });
  $('review-note').value = '';
  window.scrollTo(0, 0);
}

async function reviewVerdict(verdict) {
  if (!S.review || S.busy) return;
  const note = $('review-note').value.trim();
  if (verdict === 'reject' && !note) return showMessage('驳回时请写明理由', 'error');
  S.busy = true;
  try {
    const r = await api('POST', `/api/review/${S.review.item_id}`, { verdict, note });
    if (r.status === 401) return;
    if (!r.ok) return serverError('审核提交失败', r);
    showMessage(verdict === 'accept' ? '已通过' : '已驳回', 'ok');
    await loadReview();
  } finally {
    S.busy = false;
  }
}

// ------------------------------------------------------------------ keyboard

function isTyping(target) {
  if (!target || !target.tagName) return false;
  if (target.tagName === 'TEXTAREA' || target.tagName === 'SELECT' || target.isContentEditable) return true;
  return target.tagName === 'INPUT' && !['radio', 'checkbox', 'button', 'submit'].includes(target.type);
}

function onKeyDown(e) {
  if ((e.ctrlKey || e.metaKey) && e.key === 'Enter') {
    if (S.view === 'task-view') { e.preventDefault(); submit(); }
    return;
  }
  if (S.view !== 'task-view' || isTyping(e.target) || e.altKey || e.ctrlKey || e.metaKey) return;
  const digit = /^Digit([0-9])$/.exec(e.code || '');
  if (e.shiftKey && digit) {
    const k = S.keys[Number(digit[1]) - 1];
    if (k) { e.preventDefault(); setActive(k); $(`response-${k}`).scrollIntoView({ block: 'nearest' }); }
    return;
  }
  if (!e.shiftKey && /^[0-5]$/.test(e.key) && S.active) {
    e.preventDefault();
    setScore(S.active, Number(e.key), true);
  } else if (e.key === 'r' || e.key === 'R') {
    const card = $(`response-${S.active}`);
    if (card) toggleRaw(card, card.querySelector('.raw').hidden);
  } else if (e.key === '/') {
    e.preventDefault();
    $('ranking').focus();
  }
}

// ------------------------------------------------------------------ start

async function start() {
  $('login-form').addEventListener('submit', login);
  $('logout').onclick = logout;
  $('nav-task').onclick = () => { showMessage(''); loadTask(); };
  $('nav-alignment').onclick = () => { showMessage(''); loadAlignment(); };
  $('nav-review').onclick = () => { showMessage(''); loadReview(); };
  $('nav-escalations').onclick = () => { showMessage(''); loadEscalations(); };
  $('ranking').addEventListener('input', refreshChecks);
  $('ranking-fill').onclick = fillRanking;
  $('add-span').onclick = addSpan;
  $('submit').onclick = submit;
  $('escalate').onclick = escalate;
  $('review-accept').onclick = () => reviewVerdict('accept');
  $('review-reject').onclick = () => reviewVerdict('reject');
  $('study').onchange = switchStudy;
  document.addEventListener('selectionchange', onSelectionChange);
  document.addEventListener('keydown', onKeyDown);
  await loadGuidelines();
  if (!S.csrf) return showView('login-view');
  const r = await api('GET', '/api/me');
  if (r.ok && r.data) afterLogin(pickStudy(r.data));
  else showView('login-view');
}

document.addEventListener('DOMContentLoaded', start);
