// The parallax run report's page: reads the JSON in #px-data (its shape is
// described in docs/report.md) and builds everything inside #app as HTML
// and SVG, with no network and no libraries.
//
// Contract with tests/report/check_rendered_report.py:
//  - every error lands in <pre id="script-errors">; a section that throws
//    says "this section failed: ..." in place and the rest still renders;
//  - body[data-report-status] is "ok" or "errors" once rendering is done,
//    and body[data-page-height] the page's height in pixels (for a screenshot);
//  - each line-chart series is <path class="px-series" data-chart data-run
//    data-series data-points=N> whose d has exactly N vertices (M or L), one
//    per data point in the order of metrics.jsonl; a restart starts a new
//    subpath (M) rather than drawing back to the resumed step.
'use strict';

// ---------------------------------------------------------------------------
// Errors: recorded before anything else runs, so nothing fails silently.

const recordedErrors = [];

function recordError(message) {
  recordedErrors.push(String(message));
  let pre = document.getElementById('script-errors');
  if (!pre) {
    pre = document.createElement('pre');
    pre.id = 'script-errors';
    document.body.prepend(pre);
  }
  pre.textContent += (pre.textContent ? '\n' : '') + message;
  if (document.body.dataset.reportStatus) document.body.dataset.reportStatus = 'errors';
}

window.addEventListener('error', (e) => recordError(`script error: ${e.message} (line ${e.lineno})`));
window.addEventListener('unhandledrejection', (e) => recordError(`unhandled rejection: ${e.reason}`));

// ---------------------------------------------------------------------------
// DOM and number helpers

const SVG_NS = 'http://www.w3.org/2000/svg';
const PALETTE = ['#2563eb', '#e8590c', '#0f9d58', '#9333ea', '#0891b2', '#db2777', '#65a30d', '#b45309',
  '#475569', '#dc2626'];
const COLORS = {
  train: '#2563eb', val: '#e8590c', raw: '#9db7ef', median: '#1e40af', measured: '#2563eb',
  predicted: '#b8c2cc', forward: '#3b82f6', backward: '#9cc3fb', optimizer: '#10b981', comm: '#f59e0b',
  f: '#3b82f6', b: '#8b5cf6', w: '#c4b5fd', compute: '#3b82f6', exposed: '#f59e0b', idle: '#d5dbe2',
};

const isNum = (v) => typeof v === 'number' && Number.isFinite(v);

// el('div', {class: 'x'}, child, 'text', ...): attributes via setAttribute,
// strings become text nodes, nested arrays are flattened, null/false
// children are skipped.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) node.setAttribute(k, v);
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined && c !== false) node.append(c);
  return node;
}

function svg(tag, attrs, parent) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) node.setAttribute(k, v);
  if (parent) parent.append(node);
  return node;
}

const missing = (text) => el('p', {class: 'px-missing'}, text);
const note = (...parts) => el('p', {class: 'px-note'}, ...parts);

function fmtNum(v) {
  if (!isNum(v)) return '—';
  if (Math.abs(v) >= 1000) return Math.round(v).toLocaleString('en-US');
  return String(+v.toPrecision(4));
}
function fmtSeconds(s) {
  if (!isNum(s)) return '—';
  if (Math.abs(s) < 1) return `${+(s * 1e3).toPrecision(3)} ms`;
  if (s < 120) return `${+s.toPrecision(3)} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min ${String(Math.round(s % 60)).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.round((s % 3600) / 60)).padStart(2, '0')} min`;
}
const MIB = 1024 * 1024;
function fmtBytes(b) {
  if (!isNum(b)) return '—';
  if (b >= 1024 * MIB) return `${+(b / 1024 / MIB).toPrecision(3)} GiB`;
  return `${+(b / MIB).toPrecision(3)} MiB`;
}
const fmtPct = (f) => (isNum(f) ? `${+(100 * f).toPrecision(3)}%` : '—');
// Signed relative error of a prediction: "+4.1%" means predicted above measured.
function fmtError(predicted, measured) {
  if (!isNum(predicted) || !isNum(measured) || measured === 0) return '—';
  const e = (predicted - measured) / measured;
  return `${e >= 0 ? '+' : '−'}${Math.abs(100 * e).toFixed(1)}%`;
}

// An axis over [lo, hi] with about `count` ticks at 1, 2, 2.5 or 5 x 10^k.
// With `round`, the axis grows to the ticks just outside (bars start and end
// on a labelled tick); without, it stays at the data and ticks fall inside.
function axisScale(lo, hi, count, round) {
  if (!(hi > lo)) {
    const pad = Math.abs(lo) * 0.1 || 1;
    lo -= pad;
    hi += pad;
  }
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw * 0.999);
  if (round) {
    lo = Math.floor(lo / step + 1e-9) * step;
    hi = Math.ceil(hi / step - 1e-9) * step;
  }
  const ticks = [];
  for (let t = Math.ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
  return {lo, hi, step, ticks, format: tickFormatter(step, Math.max(Math.abs(lo), Math.abs(hi)))};
}

// A tick label: as many decimals as the step needs; "24k" past ten thousand.
function tickFormatter(step, biggest) {
  const decimals = (s) => Math.min(6, Math.max(0, (String(+s.toPrecision(6)).split('.')[1] || '').length));
  if (biggest >= 1e4) return (v) => (v === 0 ? '0' : `${(v / 1000).toFixed(decimals(step / 1000))}k`);
  return (v) => (v === 0 ? '0' : v.toFixed(decimals(step)));
}

function median(values) {
  if (!values.length) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}
function quantile(values, q) {
  const s = [...values].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))] : NaN;
}
// Centred moving median over `width` values (fewer at the ends), kept in a
// sorted window so long runs stay fast: O(n * width) moves, no sorts.
function movingMedian(values, width) {
  const half = width >> 1, sorted = [], out = [];
  const lowerBound = (v) => {
    let lo = 0, hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (sorted[mid] < v) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  let first = 0, end = 0;  // the window is values[first, end)
  for (let i = 0; i < values.length; i++) {
    for (; end < Math.min(values.length, i + half + 1); end++) sorted.splice(lowerBound(values[end]), 0, values[end]);
    for (; first < i - half; first++) sorted.splice(lowerBound(values[first]), 1);
    const mid = sorted.length >> 1;
    out.push(sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Metrics: metrics.jsonl's lines, in order, turned into the series we plot.

// Returns {train, val, throughput, comm: Map(axis -> points), restarts,
// prediction, timeShifted}. Points are {step, time, value, segment}; the
// segment counts restarts, so charts can break the line there. time_s that
// falls back after a restart is shifted to continue from the last attempt.
function readMetrics(run, unitsPerStep) {
  const lines = Array.isArray(run.metrics) ? run.metrics : [];
  const out = {train: [], val: [], throughput: [], comm: new Map(), restarts: [], prediction: null, timeShifted: false,
    routing: []};
  let segment = 0, offset = 0, lastTime = null, prevTime = null, afterRestart = false;
  for (const m of lines) {
    if (!m || typeof m !== 'object') continue;
    if ('restart' in m) {
      out.restarts.push({step: m.resumed_step, attempt: m.restart});
      segment += 1;
      prevTime = null;
      afterRestart = true;
      continue;
    }
    if ('skipped_batch' in m) continue;  // a batch that was not applied: not a training point
    if (isNum(m.predicted_step_s) || isNum(m.measured_step_s) || isNum(m.predicted_peak_bytes)) out.prediction = m;
    let time = isNum(m.time_s) ? m.time_s + offset : null;
    if (time !== null && afterRestart && lastTime !== null && time < lastTime) {
      offset = lastTime;
      time += offset;
      out.timeShifted = true;
    }
    if (time !== null) afterRestart = false;
    if (isNum(m.train_loss) && isNum(m.step)) {
      out.train.push({step: m.step, time, value: m.train_loss, segment});
      // A step's time: step_s when written, else the time since the previous
      // line (an evaluation's line ends after the evaluation, so it is excluded).
      const dt = isNum(m.step_s) && m.step_s > 0 ? m.step_s
        : time !== null && prevTime !== null && time > prevTime ? time - prevTime : null;
      if (dt !== null) out.throughput.push({step: m.step, time, value: unitsPerStep / dt, segment});
      if (Array.isArray(m.moe)) out.routing.push({step: m.step, layers: m.moe});
      if (m.bytes_sent && typeof m.bytes_sent === 'object') {
        for (const [axis, bytes] of Object.entries(m.bytes_sent)) {
          if (!isNum(bytes)) continue;
          if (!out.comm.has(axis)) out.comm.set(axis, []);
          out.comm.get(axis).push({step: m.step, time, value: bytes / 1e6, segment});
        }
      }
    }
    if (isNum(m.val_loss) && isNum(m.step)) {
      out.val.push({step: m.step, time, value: m.val_loss, accuracy: m.val_accuracy, segment});
    }
    if (time !== null) {
      prevTime = time;
      lastTime = Math.max(lastTime ?? time, time);
    }
  }
  return out;
}

// Everything a run's sections need, computed once per run.
function analyseRun(run) {
  const summary = run.summary && typeof run.summary === 'object' ? run.summary : null;
  const unitsPerStep = isNum(summary?.units_per_step) ? summary.units_per_step : 1;
  const unit = isNum(summary?.units_per_step) && summary.unit ? `${summary.unit}/s` : 'steps/s';
  const metrics = readMetrics(run, unitsPerStep);
  const raw = metrics.throughput.map((p) => p.value);
  const medianWindow = Math.max(5, Math.round(0.02 * raw.length)) | 1;  // about 2% of the steps, odd
  const smooth = movingMedian(raw, medianWindow);
  const lastTrain = metrics.train[metrics.train.length - 1];
  const lastVal = metrics.val[metrics.val.length - 1];
  const lastTime = [...metrics.train, ...metrics.val].reduce((t, p) => (isNum(p.time) ? Math.max(t, p.time) : t), -1);
  // The first finite value: run.json's figure, else what metrics.jsonl shows.
  const pick = (...values) => values.find(isNum);
  return {
    run, summary, metrics, unit, medianWindow,
    smooth: metrics.throughput.map((p, i) => ({...p, value: smooth[i]})),
    throughputMedian: median(raw),
    steps: pick(summary?.steps, lastTrain?.step),
    seconds: pick(summary?.seconds, lastTime >= 0 ? lastTime : null),
    finalTrain: pick(summary?.final?.train_loss, lastTrain?.value),
    finalVal: pick(lastVal && summary?.final?.val_loss, lastVal?.value),  // without evaluations run.json says 0
    finalAccuracy: pick(summary?.final?.val_accuracy, lastVal?.accuracy),
    measuredStep: pick(summary?.measured_step_s, metrics.prediction?.measured_step_s),
    predictedStep: pick(summary?.predicted_step_s, metrics.prediction?.predicted_step_s),
  };
}

// ---------------------------------------------------------------------------
// Tooltip: one floating box shared by every chart.

let tooltipBox = null;
function showTooltip(event, html) {
  if (!tooltipBox) {
    tooltipBox = el('div', {id: 'px-tooltip'});
    document.body.append(tooltipBox);
  }
  tooltipBox.innerHTML = html;
  tooltipBox.style.display = 'block';
  const {innerWidth: w, innerHeight: h} = window;
  const box = tooltipBox.getBoundingClientRect();
  tooltipBox.style.left = `${Math.min(event.clientX + 14, w - box.width - 8)}px`;
  const below = event.clientY + 16 + box.height <= h;
  tooltipBox.style.top = `${below ? event.clientY + 16 : event.clientY - box.height - 10}px`;
}
function hideTooltip() {
  if (tooltipBox) tooltipBox.style.display = 'none';
}
const HTML_ESCAPES = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'};
const escapeHtml = (s) => String(s).replace(/[&<>"]/g, (c) => HTML_ESCAPES[c]);

// Mouse position in the svg's own (viewBox) coordinates.
function svgPoint(root, event) {
  const p = root.createSVGPoint();
  p.x = event.clientX;
  p.y = event.clientY;
  return p.matrixTransform(root.getScreenCTM().inverse());
}

// ---------------------------------------------------------------------------
// Charts. Each returns a <figure> holding a title, a legend and an
// <svg class="px-chart" data-chart=ID> sized by its viewBox (CSS scales it).

let clipCounter = 0;

function figure(title, legendItems) {
  const fig = el('figure', {class: 'px-figure'});
  if (title) fig.append(el('figcaption', {class: 'px-figure-title'}, title));
  if (legendItems && legendItems.length) {
    fig.append(el('div', {class: 'px-legend'}, legendItems.map((item) => el('span', {},
      el('span', {class: `px-swatch${item.dashed ? ' px-dashed' : ''}${item.box ? ' px-box' : ''}`,
        style: item.box ? `background:${item.color}` : `border-color:${item.color}`}), item.label))));
  }
  return fig;
}

function chartSvg(id, width, height) {
  return svg('svg', {class: 'px-chart', 'data-chart': id, viewBox: `0 0 ${width} ${height}`,
    width, height, preserveAspectRatio: 'xMinYMin meet'});
}

// Grid lines, axes, tick labels and axis titles of an x/y plot area.
function drawFrame(root, f) {
  const {m, pw, ph} = f;
  const grid = svg('g', {}, root);
  for (const t of f.yTicks) {
    const y = f.sy(t);
    svg('line', {class: 'px-grid', x1: m.l, x2: m.l + pw, y1: y, y2: y}, grid);
    svg('text', {x: m.l - 6, y: y + 3.5, 'text-anchor': 'end'}, grid).textContent = f.yFmt(t);
  }
  for (const t of f.xTicks || []) {
    const x = f.sx(t);
    svg('line', {class: 'px-grid', x1: x, x2: x, y1: m.t, y2: m.t + ph}, grid);
    svg('text', {x, y: m.t + ph + 15, 'text-anchor': 'middle'}, grid).textContent = f.xFmt(t);
  }
  svg('line', {class: 'px-axis', x1: m.l, x2: m.l + pw, y1: m.t + ph, y2: m.t + ph}, root);
  svg('line', {class: 'px-axis', x1: m.l, x2: m.l, y1: m.t, y2: m.t + ph}, root);
  if (f.xLabel) {
    svg('text', {class: 'px-axis-title', x: m.l + pw / 2, y: m.t + ph + 34, 'text-anchor': 'middle'}, root)
      .textContent = f.xLabel;
  }
  if (f.yLabel) {
    svg('text', {class: 'px-axis-title', transform: `translate(14 ${m.t + ph / 2}) rotate(-90)`,
      'text-anchor': 'middle'}, root).textContent = f.yLabel;
  }
}

// A line chart of every point of every series. o = {chart, run, title,
// xLabel, yLabel, series: [{name, run, label, color, points: [{x, y,
// segment, tip}], markers, dashed, width, opacity}], yZero, yTop, vlines:
// [{x, label}], width, height, empty}. Points above yTop are clipped; a
// change of segment starts a new subpath.
function lineChart(o) {
  const W = o.width || 640, H = o.height || 320;
  const m = {l: 62, r: 18, t: 14, b: 46};
  const pw = W - m.l - m.r, ph = H - m.t - m.b;
  const series = o.series.filter((s) => s.points.length);
  const fig = figure(o.title, series.map((s) => ({label: s.label ?? s.name, color: s.color, dashed: s.dashed})));
  if (!series.length) {
    fig.append(missing(o.empty || 'Nothing to plot.'));
    return fig;
  }
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const s of series) {
    for (const p of s.points) {
      x0 = Math.min(x0, p.x); x1 = Math.max(x1, p.x);
      y0 = Math.min(y0, p.y); y1 = Math.max(y1, p.y);
    }
  }
  if (isNum(o.yTop)) y1 = Math.min(y1, o.yTop);
  const pad = (y1 - y0) * 0.05 || Math.abs(y1) * 0.05 || 1;
  const yt = o.yZero ? axisScale(Math.min(0, y0), y1 + pad, 6, false) : axisScale(y0 - pad, y1 + pad, 6, false);
  const xt = axisScale(x0, x1, 8, false);
  if (series.every((s) => s.points.every((p) => Number.isInteger(p.x)))) {  // steps: no ticks between them
    xt.ticks = xt.ticks.filter(Number.isInteger);
    xt.format = String;
  }
  const sx = (x) => m.l + ((x - xt.lo) / (xt.hi - xt.lo)) * pw;
  const sy = (y) => m.t + ph - ((y - yt.lo) / (yt.hi - yt.lo)) * ph;
  const root = chartSvg(o.chart, W, H);
  drawFrame(root, {m, pw, ph, sx, sy, xTicks: xt.ticks, yTicks: yt.ticks, xFmt: xt.format, yFmt: yt.format,
    xLabel: o.xLabel, yLabel: o.yLabel});

  const clipId = `px-clip-${++clipCounter}`;
  svg('rect', {x: m.l - 5, y: m.t - 5, width: pw + 10, height: ph + 10}, svg('clipPath', {id: clipId}, root));
  for (const v of o.vlines || []) {
    if (!isNum(v.x) || v.x < xt.lo || v.x > xt.hi) continue;
    svg('line', {class: 'px-vline', x1: sx(v.x), x2: sx(v.x), y1: m.t, y2: m.t + ph}, root);
    svg('text', {class: 'px-vline-label', x: sx(v.x) + 3, y: m.t + 10}, root).textContent = v.label;
  }
  const plotted = [];  // per series: pixel positions, for the hover search
  for (const s of series) {
    const px = new Float64Array(s.points.length), py = new Float64Array(s.points.length);
    const parts = [];
    s.points.forEach((p, i) => {
      px[i] = sx(p.x); py[i] = sy(p.y);
      const jump = i === 0 || p.segment !== s.points[i - 1].segment;
      parts.push(`${jump ? 'M' : 'L'}${px[i].toFixed(1)} ${py[i].toFixed(1)}`);
    });
    svg('path', {class: 'px-series', 'data-chart': o.chart, 'data-run': s.run ?? o.run, 'data-series': s.name,
      'data-points': s.points.length, d: parts.join(' '), fill: 'none', stroke: s.color,
      'stroke-width': s.width || 1.6, 'stroke-opacity': s.opacity ?? 1, 'stroke-linejoin': 'round',
      'stroke-dasharray': s.dashed ? '5 3' : null, 'clip-path': `url(#${clipId})`}, root);
    if ((s.markers && s.points.length <= 400) || s.points.length === 1) {
      const dots = svg('g', {'clip-path': `url(#${clipId})`}, root);
      for (let i = 0; i < px.length; i++) {
        svg('circle', {cx: px[i].toFixed(1), cy: py[i].toFixed(1), r: 3.2, fill: '#fff', stroke: s.color,
          'stroke-width': 1.6}, dots);
      }
    }
    plotted.push({s, px, py});
  }
  attachLineHover(root, {m, pw, ph, plotted, xName: o.xLabel, yName: o.yLabel});
  fig.append(root);
  return fig;
}

// Hover: the nearest plotted point (in pixels) across the series, marked
// with a dot and described in the tooltip with its exact values.
function attachLineHover(root, {m, pw, ph, plotted, xName, yName}) {
  const dot = svg('circle', {class: 'px-hover-dot', r: 4.5, fill: 'none', 'stroke-width': 2, visibility: 'hidden'},
    root);
  const area = svg('rect', {x: m.l, y: m.t, width: pw, height: ph, fill: 'transparent'}, root);
  area.addEventListener('mousemove', (event) => {
    const at = svgPoint(root, event);
    let best = null, bestD = Infinity;
    for (const entry of plotted) {
      for (let i = 0; i < entry.px.length; i++) {
        const dx = entry.px[i] - at.x, dy = entry.py[i] - at.y, d = dx * dx + dy * dy;
        if (d < bestD) { bestD = d; best = {entry, i}; }
      }
    }
    if (!best) return;
    const {entry: {s, px, py}, i} = best;
    const p = s.points[i];
    dot.setAttribute('cx', px[i]); dot.setAttribute('cy', Math.max(m.t, py[i]));
    dot.setAttribute('stroke', s.color); dot.setAttribute('visibility', 'visible');
    const extra = p.tip ? `<br>${escapeHtml(p.tip)}` : '';
    showTooltip(event, `<b>${escapeHtml(s.label || s.name)}</b><br>${escapeHtml(xName)}: ${fmtNum(p.x)}` +
      `<br>${escapeHtml(yName)}: ${fmtNum(p.y)}${extra}`);
  });
  area.addEventListener('mouseleave', () => { dot.setAttribute('visibility', 'hidden'); hideTooltip(); });
}

// Vertical bars in groups along x: o = {chart, groups: [{label, values: [..],
// note}], names: [..], colors: [..], yLabel, yFmt (for tooltips)}.
function groupedBarChart(o) {
  const W = o.width || 640, H = o.height || 300;
  const m = {l: 62, r: 12, t: 22, b: 46};
  const pw = W - m.l - m.r, ph = H - m.t - m.b;
  const fig = figure(o.title, o.names.map((n, i) => ({label: n, color: o.colors[i], box: true})));
  const top = Math.max(...o.groups.flatMap((g) => g.values.filter(isNum)), 0);
  const yt = axisScale(0, top * 1.1 || 1, 5, true);
  const sy = (y) => m.t + ph - (y / yt.hi) * ph;
  const root = chartSvg(o.chart, W, H);
  drawFrame(root, {m, pw, ph, sy, yTicks: yt.ticks, yFmt: yt.format, xLabel: o.xLabel, yLabel: o.yLabel});
  const slot = pw / o.groups.length, barW = Math.min(48, (slot * 0.7) / o.names.length);
  o.groups.forEach((g, gi) => {
    const cx = m.l + slot * (gi + 0.5), left = cx - (barW * o.names.length) / 2;
    g.values.forEach((v, bi) => {
      if (!isNum(v)) return;
      const bar = svg('rect', {class: 'px-bar', x: left + bi * barW + 1, y: sy(v), width: barW - 2,
        height: Math.max(0.5, m.t + ph - sy(v)), fill: o.colors[bi], rx: 2}, root);
      bar.addEventListener('mousemove', (e) => showTooltip(e, `<b>${escapeHtml(g.label)}</b><br>` +
        `${escapeHtml(o.names[bi])}: ${o.yFmt(v)}${g.note ? `<br>${escapeHtml(g.note)}` : ''}`));
      bar.addEventListener('mouseleave', hideTooltip);
    });
    svg('text', {x: cx, y: m.t + ph + 15, 'text-anchor': 'middle'}, root).textContent = g.label;
    if (g.note) {
      const peak = Math.max(...g.values.filter(isNum));
      svg('text', {class: 'px-bar-label', x: cx, y: sy(peak) - 6, 'text-anchor': 'middle'}, root).textContent = g.note;
    }
  });
  fig.append(root);
  return fig;
}

// Horizontal bars, stacked when a row has several segments: o = {chart,
// rows: [{label, segments: [{name, value, color, text}], right}], xLabel,
// xFmt, legend}. A segment's text is drawn inside it when it fits.
function horizontalBarChart(o) {
  const rowH = 26, W = o.width || 1240;
  const m = {l: o.labelWidth || 110, r: 150, t: 8, b: 40};
  const H = m.t + m.b + rowH * o.rows.length;
  const pw = W - m.l - m.r, ph = rowH * o.rows.length;
  const fig = figure(o.title, o.legend);
  const total = Math.max(...o.rows.map((r) => r.segments.reduce((a, s) => a + (isNum(s.value) ? s.value : 0), 0)));
  const xt = axisScale(0, total || 1, 6, true);
  const sx = (x) => m.l + (x / xt.hi) * pw;
  const root = chartSvg(o.chart, W, H);
  drawFrame(root, {m, pw, ph, sx, sy: () => 0, yTicks: [], xTicks: xt.ticks, xFmt: xt.format, yFmt: String,
    xLabel: o.xLabel});
  o.rows.forEach((row, ri) => {
    const y = m.t + ri * rowH + 4;
    svg('text', {class: 'px-row-label', x: m.l - 8, y: y + 13, 'text-anchor': 'end'}, root).textContent = row.label;
    let at = 0;
    for (const s of row.segments) {
      if (!isNum(s.value) || s.value <= 0) continue;
      const x = sx(at), w = sx(at + s.value) - x;
      const bar = svg('rect', {class: 'px-bar', x, y, width: Math.max(0.5, w), height: rowH - 8, fill: s.color}, root);
      bar.addEventListener('mousemove', (e) => showTooltip(e, `<b>${escapeHtml(row.label)}</b><br>` +
        `${escapeHtml(s.name)}: ${escapeHtml(s.tip || o.xFmt(s.value))}`));
      bar.addEventListener('mouseleave', hideTooltip);
      if (s.text && w > s.text.length * 6 + 8) {
        svg('text', {class: 'px-box-label', x: x + w / 2, y: y + 13, 'text-anchor': 'middle',
          style: s.textColor ? `fill:${s.textColor}` : null}, root).textContent = s.text;
      }
      at += s.value;
    }
    if (row.right) svg('text', {class: 'px-bar-label', x: sx(at) + 8, y: y + 13}, root).textContent = row.right;
  });
  fig.append(root);
  return fig;
}

// Boxes on lanes along a shared time axis: o = {chart, rows: [{label,
// first}], boxes: [{row, start, dur, color, label, tip}], xMax, xLabel,
// mark: {x, label}}. A row with `first` starts a new group (a rank) and
// gets a separator; the mark is a dashed line across all rows.
function timelineChart(o) {
  const rowH = o.rowHeight || 20, W = o.width || 1240;
  const m = {l: o.labelWidth || 130, r: 16, t: 6, b: 40};
  const ph = rowH * o.rows.length, pw = W - m.l - m.r, H = m.t + ph + m.b;
  const fig = figure(o.title, o.legend);
  const xt = axisScale(0, o.xMax || 1, 8, true);
  const sx = (x) => m.l + (x / xt.hi) * pw;
  const root = chartSvg(o.chart, W, H);
  drawFrame(root, {m, pw, ph, sx, sy: () => 0, yTicks: [], xTicks: xt.ticks, xFmt: xt.format, yFmt: String,
    xLabel: o.xLabel});
  o.rows.forEach((row, ri) => {
    const y = m.t + ri * rowH;
    if (row.first && ri > 0) svg('line', {class: 'px-row-sep', x1: 4, x2: m.l + pw, y1: y, y2: y}, root);
    svg('text', {class: 'px-row-label', x: m.l - 8, y: y + rowH / 2 + 4, 'text-anchor': 'end'}, root)
      .textContent = row.label;
  });
  if (isNum(o.mark?.x)) {
    svg('line', {class: 'px-vline', x1: sx(o.mark.x), x2: sx(o.mark.x), y1: m.t - 4, y2: m.t + ph}, root);
    svg('text', {class: 'px-vline-label', x: sx(o.mark.x) + 3, y: m.t + ph + 28}, root).textContent = o.mark.label;
  }
  const layer = svg('g', {}, root);
  o.boxes.forEach((b, i) => {
    const x = sx(b.start), w = Math.max(0.8, sx(b.start + b.dur) - x), y = m.t + b.row * rowH + 2;
    svg('rect', {class: 'px-box', x: x.toFixed(2), y, width: w.toFixed(2), height: rowH - 4, fill: b.color,
      stroke: o.outline ? '#fff' : null, 'data-i': i}, layer);
    if (b.label && w > b.label.length * 6.5 + 4) {
      svg('text', {class: 'px-box-label', x: x + w / 2, y: y + rowH / 2 + 2, 'text-anchor': 'middle',
        style: b.labelColor ? `fill:${b.labelColor}` : null}, layer).textContent = b.label;
    }
  });
  // One listener for all boxes: there can be thousands.
  layer.addEventListener('mousemove', (e) => {
    const i = e.target.getAttribute && e.target.getAttribute('data-i');
    if (i === null || i === undefined) return hideTooltip();
    showTooltip(e, o.boxes[+i].tip);
  });
  layer.addEventListener('mouseleave', hideTooltip);
  fig.append(root);
  return fig;
}


// ---------------------------------------------------------------------------
// Page structure: sections that fail alone, cards, tables.

// A titled panel whose body `build` fills. An exception inside is recorded
// and replaces the body with one line, so the rest of the page still renders.
function section(parent, title, where, build) {
  const box = el('section', {class: 'px-section'}, el('h3', {}, title));
  parent.append(box);
  try {
    build(box);
  } catch (error) {
    recordError(`${where}: section "${title}": ${error?.stack ?? error}`);
    box.append(el('p', {class: 'px-failed'}, `this section failed: ${error?.message ?? error}`));
  }
  return box;
}

const plural = (n, word, words = `${word}s`) => `${fmtNum(n)} ${n === 1 ? word : words}`;

// A key figure; long text values get a smaller font so the cards stay even.
const card = (label, value, sub) => el('div', {class: 'px-card'}, el('div', {class: 'px-card-label'}, label),
  el('div', {class: `px-card-value${String(value).length > 12 ? ' px-card-long' : ''}`}, value),
  sub ? el('div', {class: 'px-card-sub'}, sub) : null);

// A table from header names and rows of cells (or {cells, className}); a
// header starting with '#' marks a right-aligned numeric column.
function table(headers, rows) {
  const numeric = headers.map((h) => h.startsWith('#'));
  const cellClass = (i) => (numeric[i] ? 'px-num' : null);
  return el('table', {class: 'px-table px-wide'},
    el('thead', {}, el('tr', {}, headers.map((h, i) => el('th', {class: cellClass(i)}, h.replace(/^#/, ''))))),
    el('tbody', {}, rows.map((r) => el('tr', {class: r.className ?? null},
      (r.cells ?? r).map((c, i) => el('td', {class: cellClass(i)}, c ?? '—'))))));
}

const keyValueTable = (pairs) => el('table', {class: 'px-table px-kv'}, el('tbody', {},
  pairs.map(([k, v]) => el('tr', {}, el('th', {}, k), el('td', {}, v === undefined || v === null ? '—' : `${v}`)))));

function chip(placement) {
  const p = String(placement);
  const kind = p.startsWith('S') ? ' px-split' : p.startsWith('P') ? ' px-partial' : '';
  return el('span', {class: `px-chip${kind}`}, p);
}

// Time axis unit for wall seconds: s, min or h, whichever reads best.
function timeUnit(maxSeconds) {
  if (maxSeconds > 3 * 3600) return {scale: 1 / 3600, name: 'h'};
  if (maxSeconds > 600) return {scale: 1 / 60, name: 'min'};
  return {scale: 1, name: 's'};
}

// Chart points from metric points: x chosen by the caller, y the value, and
// the restart segment kept when the series should break at restarts.
const toPoints = (points, xOf, broken = true) =>
  points.map((p) => ({x: xOf(p), y: p.value, segment: broken ? p.segment : 0, tip: p.tip}));

// ---------------------------------------------------------------------------
// Per-run sections

function overviewSection(parent, a, where) {
  section(parent, 'Overview', where, (box) => {
    const s = a.summary;
    box.append(el('div', {class: 'px-cards'},
      card('model', s?.model ?? '—', s?.batch ? `batch ${s.batch}` : null),
      card('mesh', s?.mesh ?? '—', isNum(s?.ranks) ? plural(s.ranks, 'rank') : null),
      card('steps', fmtNum(a.steps), s?.steps_run && s.steps_run !== s.steps ? `${fmtNum(s.steps_run)} run` : null),
      card('wall time', fmtSeconds(a.seconds)),
      card('final train loss', fmtNum(a.finalTrain)),
      card('final val loss', fmtNum(a.finalVal), isNum(a.finalAccuracy) ? `accuracy ${fmtPct(a.finalAccuracy)}` : null),
      card('throughput', fmtNum(a.throughputMedian), `${a.unit}, median`),
      card('step time', fmtSeconds(a.measuredStep),
        isNum(a.predictedStep) ? `predicted ${fmtSeconds(a.predictedStep)}` : null)));
    if (!s) {
      box.append(missing('This run has no run.json (it did not finish): the figures above come from metrics.jsonl.'));
      return;
    }
    // model_json nests each model's settings ({"gpt": {"n_layer": 4, ...}}): one row per setting.
    const flatten = (obj, prefix) => Object.entries(obj).flatMap(([k, v]) =>
      v && typeof v === 'object' && !Array.isArray(v) ? flatten(v, `${prefix}${k}.`) : [[`${prefix}${k}`, v]]);
    const config = s.config && typeof s.config === 'object' ? flatten(s.config, '') : [];
    const restarts = a.metrics.restarts.map((r) => `resumed at step ${r.step}`).join('; ');
    box.append(el('div', {class: 'px-grid2'},
      el('div', {}, el('h4', {}, `Model configuration (${s.model ?? 'model'})`), config.length
        ? keyValueTable(config.map(([k, v]) => [k, v === '' ? '(default)' : typeof v === 'object' ? JSON.stringify(v) : v]))
        : missing('The run did not record its model configuration.')),
      el('div', {}, el('h4', {}, 'Run'), keyValueTable([
        ['directory', a.run.dir], ['strategy', s.strategy_summary?.description],
        ['ranks × threads', `${s.ranks ?? '—'} × ${s.threads ?? '—'}`],
        ['units per step', isNum(s.units_per_step) ? `${fmtNum(s.units_per_step)} ${s.unit ?? ''}` : '—'],
        ['restarts', restarts || 'none']]))));
  });
}

// Loss against steps and against wall time, side by side.
function lossSection(parent, a, where) {
  section(parent, 'Loss', where, (box) => {
    const {train, val, restarts} = a.metrics;
    if (!train.length && !val.length) return box.append(missing('metrics.jsonl holds no losses.'));
    const timed = (p) => isNum(p.time);
    const u = timeUnit(Math.max(0, ...train.filter(timed).map((p) => p.time), ...val.filter(timed).map((p) => p.time)));
    const valTipped = val.map((p) => ({...p, tip: isNum(p.accuracy) ? `accuracy ${fmtPct(p.accuracy)}` : null}));
    // Training breaks at restarts; the sparse validation line runs through them.
    const series = (xOf, keep) => [
      {name: 'train_loss', label: 'train loss', color: COLORS.train, width: 1.3,
        points: toPoints(train.filter(keep), xOf)},
      {name: 'val_loss', label: 'validation loss', color: COLORS.val, markers: true, width: 2,
        points: toPoints(valTipped.filter(keep), xOf, false)},
    ];
    const restartAt = (k, xOf) => {
      const first = train.find((p) => p.segment === k + 1);
      return first && xOf(first);
    };
    const marks = (xOf) => restarts.map((r, k) => ({x: restartAt(k, xOf), label: `restart ${r.attempt ?? ''}`}));
    const bySteps = (p) => p.step, byTime = (p) => p.time * u.scale;
    box.append(el('div', {class: 'px-grid2'},
      lineChart({chart: 'loss-step', run: a.run.name, title: 'Loss by step', xLabel: 'step', yLabel: 'loss',
        series: series(bySteps, () => true), vlines: marks(bySteps)}),
      lineChart({chart: 'loss-time', run: a.run.name, title: 'Loss by wall time', xLabel: `wall time (${u.name})`,
        yLabel: 'loss', series: series(byTime, timed), vlines: marks(byTime), empty: 'No line has a time_s.'})));
    if (a.metrics.timeShifted) {
      box.append(note('After a restart, wall time continues from where the previous attempt stopped.'));
    }
  });
}

// A mixture of experts' load (train's "moe" entries, runtime/train/
// routing_report.h): per layer a heat map of each expert's share of the
// choices over the steps (columns of adjacent steps averaged), white at
// an even share 1/E, red above, blue below; and the dropped share.
function expertLoadHeatMap(layer, points, run) {
  const experts = Math.max(...points.map((p) => p.load.length));
  const columns = Math.min(points.length, 120);
  const W = 640, rowH = Math.max(8, Math.min(22, 220 / experts)), m = {l: 62, r: 18, t: 10, b: 40};
  const pw = W - m.l - m.r, ph = rowH * experts, H = ph + m.t + m.b;
  const even = 1 / experts;
  let hottest = {share: 0, expert: 0, step: 0};
  const root = chartSvg(`expert-load-${layer}`, W, H);
  for (let c = 0; c < columns; ++c) {
    const part = points.slice(Math.floor(c * points.length / columns), Math.floor((c + 1) * points.length / columns));
    for (let e = 0; e < experts; ++e) {
      const share = part.reduce((t, p) => t + (p.load[e] ?? 0), 0) / part.length;
      if (share > hottest.share) hottest = {share, expert: e, step: part[0].step};
      // Diverging around the even share: ratio 0 -> blue, 1 -> white, 2+ -> red.
      const r = Math.min(2, share / even);
      const fill = r >= 1 ? `rgb(255,${Math.round(255 * (2 - r))},${Math.round(255 * (2 - r))})`
        : `rgb(${Math.round(255 * r)},${Math.round(255 * r)},255)`;
      const rect = svg('rect', {x: m.l + c * pw / columns, y: m.t + e * rowH, width: pw / columns + 0.5,
        height: rowH, fill}, root);
      rect.addEventListener('mousemove', (ev) => showTooltip(ev,
        `layer ${layer}, expert ${e}<br>steps ${part[0].step}-${part[part.length - 1].step}: ${fmtPct(share)} of the choices`));
      rect.addEventListener('mouseleave', hideTooltip);
    }
  }
  for (let e = 0; e < experts; e += Math.max(1, Math.ceil(experts / 12))) {
    svg('text', {x: m.l - 6, y: m.t + e * rowH + rowH / 2 + 3.5, 'text-anchor': 'end'}, root).textContent = `e${e}`;
  }
  svg('text', {x: m.l, y: m.t + ph + 15}, root).textContent = `step ${points[0].step}`;
  svg('text', {x: m.l + pw, y: m.t + ph + 15, 'text-anchor': 'end'}, root).textContent =
    `step ${points[points.length - 1].step}`;
  svg('text', {class: 'px-axis-title', x: m.l + pw / 2, y: m.t + ph + 34, 'text-anchor': 'middle'}, root)
    .textContent = 'step';
  const dropped = points.map((p) => p.dropped ?? 0);
  const fig = figure(`Layer ${layer}: share of the choices per expert (even: ${fmtPct(even)})`);
  fig.append(root, el('p', {class: 'px-note'},
    `hottest: expert ${hottest.expert} with ${fmtPct(hottest.share)} around step ${hottest.step}; ` +
    `dropped by capacity: ${fmtPct(median(dropped))} median, ${fmtPct(Math.max(...dropped))} at most`));
  return fig;
}

function routingSection(parent, a, where) {
  const routing = a.metrics.routing;
  if (!routing.length) return;
  section(parent, 'Expert load', where, (box) => {
    const layers = new Map();
    for (const r of routing) {
      for (const l of r.layers) {
        if (!l || !Array.isArray(l.load)) continue;
        if (!layers.has(l.layer)) layers.set(l.layer, []);
        layers.get(l.layer).push({step: r.step, load: l.load, dropped: l.dropped, aux: l.aux_loss, z: l.z_loss});
      }
    }
    for (const [layer, points] of layers) box.append(expertLoadHeatMap(layer, points, a.run.name));
  });
}

function throughputSection(parent, a, where) {
  section(parent, `Throughput (${a.unit})`, where, (box) => {
    const raw = a.metrics.throughput;
    if (!raw.length) return box.append(missing('No step has a time: throughput cannot be computed.'));
    // Leave out the rare very slow or very fast step from the y range, so the trend fills the chart.
    const values = raw.map((p) => p.value);
    const top = Math.max(quantile(values, 0.99) * 1.15, ...a.smooth.map((p) => p.value * 1.1));
    const clipped = values.filter((v) => v > top).length;
    box.append(lineChart({chart: 'throughput', run: a.run.name, width: 1240, height: 300, xLabel: 'step',
      yLabel: a.unit, yZero: true, yTop: top, series: [
        {name: 'throughput', label: 'each step', color: COLORS.raw, width: 1, points: toPoints(raw, (p) => p.step)},
        {name: 'moving_median', label: `moving median of ${a.medianWindow} steps`, color: COLORS.median, width: 2.2,
          points: toPoints(a.smooth, (p) => p.step)}]}));
    const s = a.summary;
    const source = a.run.metrics.some((m) => isNum(m?.step_s)) ? 'step_s' : 'the time between metrics lines';
    const how = isNum(s?.units_per_step)
      ? ` (${fmtNum(s.units_per_step)} ${s.unit ?? 'units'} a step ÷ the step's time, from ${source})`
      : ' (run.json is missing, so steps rather than units)';
    box.append(note(`Median ${fmtNum(a.throughputMedian)} ${a.unit}`, how,
      clipped ? `; ${plural(clipped, 'outlier step')} above the chart's top ${clipped === 1 ? 'is' : 'are'} cut off.`
        : '.'));
  });
}

function memorySection(parent, a, where) {
  section(parent, 'Memory per rank', where, (box) => {
    const memory = a.summary?.memory;
    let measured = Array.isArray(memory?.measured_peak_bytes) ? memory.measured_peak_bytes : [];
    let predicted = Array.isArray(memory?.predicted_peak_bytes) ? memory.predicted_peak_bytes : [];
    let label = (r) => `rank ${r}`;
    if (!measured.length && !predicted.length && a.metrics.prediction) {  // only the metrics' prediction line
      measured = [a.metrics.prediction.measured_peak_bytes];
      predicted = [a.metrics.prediction.predicted_peak_bytes];
      label = () => 'peak';
    }
    if (!measured.some(isNum) && !predicted.some(isNum)) {
      return box.append(missing('The run recorded no memory figures.'));
    }
    const groups = Array.from({length: Math.max(measured.length, predicted.length)}, (_, r) => ({
      label: label(r), values: [measured[r] / MIB, predicted[r] / MIB],
      note: isNum(measured[r]) && isNum(predicted[r]) ? fmtError(predicted[r], measured[r]) : null,
    }));
    box.append(groupedBarChart({chart: 'memory', names: ['measured peak', 'predicted (memory model)'],
      colors: [COLORS.measured, COLORS.predicted], groups, yLabel: 'MiB', yFmt: (v) => `${fmtNum(v)} MiB`}));
    box.append(note('Peak bytes of tensors a rank held. Over each rank: (predicted − measured) ÷ measured.',
      predicted.some(isNum) ? '' : ' No prediction was made for this run.'));
  });
}

function commSection(parent, a, where) {
  section(parent, 'Communication per step', where, (box) => {
    const axes = [...a.metrics.comm.keys()];
    if (!axes.length) return box.append(missing('No bytes were sent (one rank, or the metrics lack bytes_sent).'));
    const series = axes.map((axis, i) => ({name: axis, label: `${axis} axis`, color: PALETTE[i % PALETTE.length],
      points: toPoints(a.metrics.comm.get(axis), (p) => p.step)}));
    box.append(lineChart({chart: 'comm-bytes', run: a.run.name, xLabel: 'step', yLabel: 'MB sent per step',
      yZero: true, series}));
    box.append(note('Bytes rank 0 sent on each mesh axis in a step (bytes_sent), in MB (10⁶ bytes).'));
  });
}

// What a timeline box is, for its colour: communication, optimizer, backward
// (names with "grad" or "backward") or forward compute.
function eventKind(lane, name) {
  const n = String(name).toLowerCase();
  if (String(lane).startsWith('comm')) return 'comm';
  if (/adam|sgd|optimi[sz]er|update|clip/.test(n)) return 'optimizer';
  if (/grad|backward/.test(n)) return 'backward';
  return 'forward';
}

// Rows (one per rank and lane, compute first) and boxes (in ms) of a
// one-step timeline: {ranks: [{rank, events: [{lane, name, start, dur, instr}]}]}.
function timelineRows(timeline) {
  const rows = [], boxes = [];
  for (const rank of Array.isArray(timeline?.ranks) ? timeline.ranks : []) {
    const events = (Array.isArray(rank.events) ? rank.events : []).filter((e) => isNum(e.start) && isNum(e.dur));
    const laneOf = (e) => String(e.lane ?? 'compute');
    const lanes = [...new Set(events.map(laneOf))]
      .sort((x, y) => (x === 'compute' ? -1 : y === 'compute' ? 1 : x.localeCompare(y)));
    const rowOf = new Map(lanes.map((lane, i) => [lane, rows.length + i]));
    lanes.forEach((lane, i) => rows.push({label: `rank ${rank.rank} · ${lane}`, first: i === 0}));
    for (const e of events) {
      boxes.push({row: rowOf.get(laneOf(e)), start: e.start * 1e3, dur: e.dur * 1e3,
        color: COLORS[eventKind(laneOf(e), e.name ?? '')],
        tip: `<b>${escapeHtml(e.name ?? '?')}</b><br>rank ${escapeHtml(rank.rank)}, ${escapeHtml(laneOf(e))}` +
          `<br>instruction ${escapeHtml(e.instr ?? '—')}<br>start ${fmtNum(e.start * 1e3)} ms, ` +
          `duration ${fmtNum(e.dur * 1e3)} ms`});
    }
  }
  return {rows, boxes};
}

function stepTimeSection(parent, a, where) {
  section(parent, 'Step time: predicted vs measured', where, (box) => {
    const s = a.summary;
    if (isNum(a.predictedStep) || isNum(a.measuredStep)) {
      const bar = (label, value, color) => ({label, right: fmtSeconds(value),
        segments: [{name: label, value: isNum(value) ? value * 1e3 : value, color}]});
      box.append(horizontalBarChart({chart: 'step-time', xLabel: 'milliseconds per step',
        xFmt: (v) => fmtSeconds(v / 1e3),
        rows: [bar('predicted', a.predictedStep, COLORS.predicted),
          bar('measured', a.measuredStep, COLORS.measured)]}));
      const calibrated = s && 'prediction_calibrated' in s
        ? `; ${s.prediction_calibrated ? 'calibrated' : 'not calibrated'} on this machine` : '';
      box.append(note(`Prediction error ${fmtError(a.predictedStep, a.measuredStep)} `,
        '(predicted − measured, ÷ measured). ',
        `Basis: ${s?.prediction_basis ?? 'not recorded'}${calibrated}.`));
    } else {
      box.append(missing('Neither a predicted nor a measured step time was recorded.'));
    }
    // Both timelines on one time scale, so their lengths compare at a glance.
    const measuredTimeline = a.run.measured_timeline;
    const predicted = timelineRows(s?.predicted_timeline), measured = timelineRows(measuredTimeline);
    const xMax = Math.max(1e-3, ...[...predicted.boxes, ...measured.boxes].map((b) => b.start + b.dur),
      (s?.predicted_timeline?.step_s ?? 0) * 1e3, (measuredTimeline?.step_s ?? 0) * 1e3);
    const legend = [['forward', COLORS.forward], ['backward (grad)', COLORS.backward], ['optimizer', COLORS.optimizer],
      ['communication', COLORS.comm]].map(([label, color]) => ({label, color, box: true}));
    const common = {xMax, legend, xLabel: 'time within the step (ms, the same scale for both)'};
    const mark = (timeline) => ({x: timeline?.step_s * 1e3, label: `step ${fmtSeconds(timeline?.step_s)}`});
    box.append(el('h4', {}, 'One step as the simulator predicts it'), predicted.boxes.length
      ? timelineChart({chart: 'predicted-timeline', ...predicted, ...common, mark: mark(s.predicted_timeline)})
      : missing('No predicted timeline was recorded for this run.'));
    const step = isNum(measuredTimeline?.step) ? ` (step ${measuredTimeline.step}, from the trace)` : '';
    box.append(el('h4', {}, `One step as it ran${step}`), measured.boxes.length
      ? timelineChart({chart: 'measured-timeline', ...measured, ...common, mark: mark(measuredTimeline)})
      : missing('No trace was recorded for this run, so there is no measured timeline.'));
  });
}

// The mesh as blocks of rank boxes: the last axis runs along a row, the one
// before it down the rows, and any earlier axes split the blocks. Ranks are
// row-major over the axes, the last fastest.
function meshView(axes) {
  const sizes = axes.map((x) => Math.max(1, x.size | 0)), names = axes.map((x) => x.name);
  const ranks = sizes.reduce((p, s) => p * s, 1);
  if (ranks > 512) return missing(`${fmtNum(ranks)} ranks are too many to draw one by one.`);
  const cols = sizes[sizes.length - 1], perBlock = cols * (sizes.length > 1 ? sizes[sizes.length - 2] : 1);
  const coordsOf = (r) => {
    const c = [];
    for (let i = sizes.length - 1; i >= 0; i--, r = Math.floor(r / sizes[i + 1])) c[i] = r % sizes[i];
    return c;
  };
  const blocks = el('div', {class: 'px-mesh'});
  for (let first = 0; first < ranks; first += perBlock) {
    const c0 = coordsOf(first);
    const title = names.slice(0, -2).map((n, i) => `${n}=${c0[i]}`).join(', ');
    const grid = el('div', {class: 'px-mesh-grid', style: `grid-template-columns: repeat(${cols}, auto)`});
    for (let r = first; r < first + perBlock; r++) {
      const c = coordsOf(r);
      grid.append(el('div', {class: 'px-rank', title: names.map((n, i) => `${n}=${c[i]}`).join(', ')},
        el('b', {}, `rank ${r}`), el('span', {}, `(${c.join(',')})`)));
    }
    blocks.append(el('div', {class: 'px-mesh-block'}, title ? el('div', {class: 'px-mesh-title'}, title) : null, grid));
  }
  return el('div', {}, blocks, el('div', {class: 'px-mesh-axes'},
    `coordinates (${names.join(', ')}); rank = row-major index, ${names[names.length - 1]} fastest`));
}

// Parameters grouped by placement pattern (most common first), then every
// parameter in a table, folded away past 20 rows.
function placementTables(rows, axes) {
  const groups = new Map();
  for (const r of rows) {
    const key = axes.map((x) => r.placements?.[x] ?? '—').join(' ');
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(r);
  }
  const patterns = [...groups.values()].sort((x, y) => y.length - x.length);
  const names = (members) => members.slice(0, 4).map((p) => p.parameter).join(', ') +
    (members.length > 4 ? `, and ${members.length - 4} more` : '');
  const hasLocal = rows.some((r) => Array.isArray(r.local_shape));
  const shape = (dims) => `[${(dims ?? []).join(', ')}]`;
  const full = table(['parameter', 'shape', ...(hasLocal ? ['shape on a rank'] : []), ...axes], rows.map((r) => [
    el('span', {class: 'px-mono'}, r.parameter ?? '?'), shape(r.shape), ...(hasLocal ? [shape(r.local_shape)] : []),
    ...axes.map((x) => chip(r.placements?.[x] ?? '—'))]));
  const details = el('details', {}, el('summary', {}, `Every parameter (${rows.length})`),
    el('div', {class: 'px-scroll'}, full));
  details.open = rows.length <= 20;
  return el('div', {},
    el('h4', {}, `Placements: ${plural(rows.length, 'parameter')} in ${plural(groups.size, 'pattern')}`),
    table(['pattern', '#parameters', 'which'], patterns.map((members) => [
      el('span', {}, axes.map((x) => [`${x} `, chip(members[0].placements?.[x] ?? '—'), ' '])),
      String(members.length), el('span', {class: 'px-mono'}, names(members))])),
    details,
    note('S(d): split along dimension d over the axis; B: a full copy on every rank of the axis; P: partial sums.'));
}

// schedule.ranks[i] is stage i's slots in unit time: forward 1, backward 2.
function scheduleChart(schedule) {
  const stages = schedule.ranks.map((slots) => (Array.isArray(slots) ? slots : []));
  const colorOf = {forward: COLORS.f, backward: COLORS.b, backward_input: COLORS.b, backward_weight: COLORS.w};
  const boxes = stages.flatMap((slots, row) => slots.map((x) => ({
    row, start: x.start, dur: x.length, color: colorOf[x.op] ?? '#94a3b8', label: x.label,
    labelColor: x.op === 'backward_weight' ? '#3b1f75' : null,
    tip: `<b>${escapeHtml(x.label ?? x.op)}</b><br>stage ${row}: ${escapeHtml(x.op)} of micro-batch ` +
      `${escapeHtml(x.micro)}${x.chunk ? `, chunk ${escapeHtml(x.chunk)}` : ''}` +
      `<br>start ${fmtNum(x.start)}, length ${fmtNum(x.length)} (units)`,
  })));
  const legend = [['forward', COLORS.f], ['backward', COLORS.b]];
  if (stages.flat().some((x) => x.op === 'backward_weight')) legend.push(['weight gradient (W)', COLORS.w]);
  return timelineChart({chart: 'pipeline-schedule', rows: stages.map((_, i) => ({label: `stage ${i}`})), boxes,
    rowHeight: 28, labelWidth: 80, outline: true,
    xMax: isNum(schedule.makespan) ? schedule.makespan : Math.max(1, ...boxes.map((b) => b.start + b.dur)),
    xLabel: 'time (units: a forward takes 1, a backward 2, or 1 + 1 when split into B and W)',
    legend: legend.map(([label, color]) => ({label, color, box: true}))});
}

function strategySection(parent, a, where) {
  section(parent, 'Strategy', where, (box) => {
    const s = a.summary, st = s?.strategy_summary;
    if (!s) return box.append(missing('The run did not write run.json, so its strategy is unknown.'));
    const axes = Array.isArray(s.mesh_axes) ? s.mesh_axes : [];
    const sequenceParallel = st && 'sequence_parallel' in st ? (st.sequence_parallel ? 'yes' : 'no') : null;
    box.append(el('div', {class: 'px-grid2'},
      el('div', {}, el('h4', {}, 'Key facts'), keyValueTable([
        ['description', st?.description], ['mesh', s.mesh], ['ZeRO stage', st?.zero_stage],
        ['micro-batches', st?.micro_batches], ['pipeline schedule', st?.schedule ?? 'none (no pipeline)'],
        ['recompute', st?.recompute], ['compression', st?.compression], ['sequence parallel', sequenceParallel]])),
      el('div', {}, el('h4', {}, `Mesh: ${s.mesh ?? ''} (${plural(s.ranks, 'rank')})`),
        axes.length ? meshView(axes) : missing('The run did not record its mesh axes.'))));

    // Only the axes that place something, in mesh order.
    const placements = Array.isArray(st?.placements) ? st.placements : [];
    const placed = new Set(placements.flatMap((r) => Object.keys(r.placements ?? {})));
    const placementAxes = [...axes.map((x) => x.name).filter((n) => placed.has(n)),
      ...[...placed].filter((n) => !axes.some((x) => x.name === n))];
    box.append(placements.length ? placementTables(placements, placementAxes)
      : missing('No parameter placements were recorded.'));

    const sched = s.schedule;
    if (!Array.isArray(sched?.ranks) || !sched.ranks.length) {
      box.append(el('h4', {}, 'Pipeline schedule'), missing('No pipeline schedule was recorded.'));
      return;
    }
    const pipelined = sched.kind && sched.kind !== 'none' && sched.stages > 1;
    const virtual = sched.virtual_stages > 1 ? `, ${sched.virtual_stages} virtual stages` : '';
    const micro = plural(sched.micro_batches ?? 1, 'micro-batch', 'micro-batches');
    box.append(el('h4', {}, pipelined
      ? `Pipeline schedule: ${sched.kind}, ${sched.stages} stages, ${micro}${virtual}, bubble ${fmtPct(sched.bubble)}`
      : `No pipeline: one stage runs ${micro} in turn`));
    box.append(scheduleChart(sched));
    if (pipelined) {
      box.append(note(`Bubble: the share of stage time spent waiting, ${fmtPct(sched.bubble)} of ` +
        `${sched.stages} stages × ${fmtNum(sched.makespan)} units.`));
    }
  });
}

// Per rank over the traced steps: compute, communication not hidden under
// compute, idle; they add up to the span.
function traceSection(parent, a, where) {
  section(parent, 'Where the time went (trace)', where, (box) => {
    const rows = Array.isArray(a.run.trace_summary) ? a.run.trace_summary : [];
    if (!rows.length) box.append(missing('No trace was recorded for this run.'));
    else {
      const kinds = [['computing', COLORS.compute, null],
        ['communicating, not under compute', COLORS.exposed, '#3d2600'], ['idle', COLORS.idle, '#334155']];
      const parts = rows.map((r) => {
        const exposed = Math.max(0, (r.comm_s ?? 0) - (r.comm_overlapped_s ?? 0));
        const span = isNum(r.span_s) && r.span_s > 0 ? r.span_s : (r.compute_s ?? 0) + exposed + (r.idle_s ?? 0);
        return {r, span, values: [r.compute_s, exposed, r.idle_s]};
      });
      const inMs = Math.max(...parts.map((x) => x.span)) < 10, scale = inMs ? 1e3 : 1;
      const segment = (span) => ([name, color, textColor], value) => ({name, color, textColor, value: value * scale,
        text: `${fmtSeconds(value)} · ${fmtPct(value / span)}`,
        tip: `${fmtSeconds(value)}, ${fmtPct(value / span)} of the span`});
      box.append(horizontalBarChart({chart: 'trace-summary', xFmt: (v) => fmtSeconds(v / scale),
        xLabel: `${inMs ? 'milliseconds' : 'seconds'} over the traced steps`,
        legend: kinds.map(([label, color]) => ({label, color, box: true})),
        rows: parts.map(({r, span, values}) => ({label: `rank ${r.rank}`, right: `span ${fmtSeconds(span)}`,
          segments: kinds.map((kind, k) => segment(span)(kind, values[k]))}))}));
      const r0 = rows[0];
      box.append(note(`Over ${isNum(r0.steps) ? plural(r0.steps, 'traced step') : 'the traced steps'}. `,
        `Communication under compute is not counted again: rank ${r0.rank} communicated for ${fmtSeconds(r0.comm_s)}, `,
        `${fmtSeconds(r0.comm_overlapped_s)} of it under compute.`));
    }
    if (a.run.trace_href) {
      box.append(el('div', {class: 'px-trace-link'}, 'The full trace: ',
        el('a', {href: a.run.trace_href}, a.run.trace_href), ' — open in ',
        el('a', {href: 'https://ui.perfetto.dev'}, 'https://ui.perfetto.dev'), ' (drag the file in).'));
    } else if (rows.length) {
      box.append(missing('The trace file itself is not linked.'));
    }
  });
}

function planSection(parent, a, where) {
  section(parent, 'Plan: how the strategy was chosen', where, (box) => {
    const p = a.run.plan;
    if (!p) return box.append(missing('This run was not planned (no plan.json): its strategy was given by hand.'));
    box.append(el('div', {class: 'px-cards'}, card('cluster', p.cluster ?? '—'), card('ranks', fmtNum(p.ranks)),
      card('search', p.method ?? '—', isNum(p.seconds) ? `took ${fmtSeconds(p.seconds)}` : null),
      card('candidates', `${fmtNum(p.evaluated)} / ${fmtNum(p.considered)}`, 'evaluated / considered')));
    const c = p.chosen;
    box.append(el('h4', {}, 'Chosen'), c
      ? el('p', {}, el('b', {}, c.description ?? '?'), `: ${fmtSeconds(c.step_s)} a step, ${fmtBytes(c.peak_bytes)} ` +
        `peak a rank, ${fmtPct(c.utilization)} utilization.`)
      : missing('The plan names no chosen strategy.'));
    if (p.why) box.append(note(`Why: ${p.why}`));
    // On a GPU preset: how far off the simulator was on the published runs
    // nearest the choice's shape (plan/published_checks.h).
    const checked = Array.isArray(p.checked_runs) ? p.checked_runs : [];
    if (checked.length) {
      box.append(el('h4', {}, 'Checked against published runs of similar shape'),
        el('div', {class: 'px-scroll'}, table(['run', 'set', '#GPUs', '#tp', '#pp', '#parameters', 'on',
          '#predicted', '#published', '#error'],
        checked.map((r) => [r.id, r.set, fmtNum(r.gpus), fmtNum(r.tp), fmtNum(r.pp),
          `${(r.parameters / 1e9).toFixed(1)}B`, r.preset, fmtSeconds(r.predicted_s), fmtSeconds(r.published_s),
          `${r.error >= 0 ? '+' : ''}${(100 * r.error).toFixed(1)}%`]))),
        note('The development set is what the model was revised against; the held-out set was frozen before it ' +
          'was scored, once (docs/planner.md, "Published scale").'));
    }
    const ranked = Array.isArray(p.ranked) ? p.ranked : [];
    box.append(el('h4', {}, `Ranked candidates (${ranked.length})`), ranked.length
      ? el('div', {class: 'px-scroll'}, table(['#rank', 'candidate', '#step', '#peak memory', '#utilization', 'from'],
        ranked.map((r, i) => ({className: r.description === c?.description ? 'px-chosen' : null,
          cells: [String(i + 1), r.description, fmtSeconds(r.step_s), fmtBytes(r.peak_bytes), fmtPct(r.utilization),
            r.from]}))))
      : missing('No ranked candidates were recorded.'));
    const rejected = Array.isArray(p.rejected) ? p.rejected : [];
    box.append(el('h4', {}, `Rejected (${rejected.length})`), rejected.length
      ? table(['candidate', 'reason'], rejected.map((r) => [r.description, r.reason]))
      : missing('No candidate was rejected.'));
  });
}

function runSection(parent, a, multi) {
  const name = a.run.name ?? '?';
  const where = `run ${name}`;
  const description = a.summary?.strategy_summary?.description;
  const box = el('div', {class: 'px-run', id: `run-${name}`},
    el('h2', {}, multi ? `Run: ${name}` : name, el('span', {class: 'px-dir'}, a.run.dir ?? '')),
    description ? el('p', {class: 'px-run-desc'}, description) : null);
  parent.append(box);
  overviewSection(box, a, where);
  lossSection(box, a, where);
  routingSection(box, a, where);
  throughputSection(box, a, where);
  const pair = el('div', {class: 'px-grid2'});
  box.append(pair);
  memorySection(pair, a, where);
  commSection(pair, a, where);
  stepTimeSection(box, a, where);
  strategySection(box, a, where);
  traceSection(box, a, where);
  planSection(box, a, where);
}

// ---------------------------------------------------------------------------
// A serving run (`parallax serve --run-dir`, serve/run_log.h): one line of
// serve.jsonl a window; the queue, the batch, the KV cache and latency
// over time.

function servingSection(parent, run, multi) {
  const name = run.name ?? '?', where = `serving run ${name}`;
  const s = run.summary && typeof run.summary === 'object' ? run.summary : null;
  const lines = (Array.isArray(run.serving) ? run.serving : []).filter((l) => l && isNum(l.time_s));
  const box = el('div', {class: 'px-run', id: `run-${name}`},
    el('h2', {}, multi ? `Serving: ${name}` : name, el('span', {class: 'px-dir'}, run.dir ?? '')),
    el('p', {class: 'px-run-desc'}, s ? `tp ${s.tp} · ${s.scheduler}-level scheduling · ` +
      `${fmtNum(s.kv_blocks)} KV blocks of ${fmtNum(s.block_tokens)} tokens` : 'no serve.json: the server did not stop cleanly'));
  parent.append(box);
  const ms = (v) => (isNum(v) ? `${fmtNum(1e3 * v)} ms` : '—');
  section(box, 'Overview', where, (body) => {
    body.append(el('div', {class: 'px-cards'}, card('requests', fmtNum(s?.requests)),
      card('generated tokens', fmtNum(s?.generated_tokens)), card('wall time', fmtSeconds(s?.seconds)),
      card('TTFT p50 / p99', `${ms(s?.ttft_p50_s)} / ${ms(s?.ttft_p99_s)}`),
      card('inter-token p50 / p99', `${ms(s?.itl_p50_s)} / ${ms(s?.itl_p99_s)}`),
      card('preemptions', fmtNum(s?.preemptions))));
  });
  const u = timeUnit(Math.max(0, ...lines.map((l) => l.time_s)));
  const series = (key, label, color, scale = 1, dashed = false) => ({name: key, run: name, label, color, dashed,
    points: lines.filter((l) => isNum(l[key])).map((l) => ({x: l.time_s * u.scale, y: l[key] * scale}))});
  const xLabel = `wall time (${u.name})`;
  const empty = 'No window of serve.jsonl has this figure.';
  section(box, 'Queue and batch', where, (body) => {
    body.append(el('div', {class: 'px-grid2'},
      lineChart({chart: 'serve-queue', run: name, title: 'Sequences', xLabel, yLabel: 'sequences', yZero: true, empty,
        series: [series('running', 'running', PALETTE[0]), series('waiting', 'waiting', PALETTE[1])]}),
      lineChart({chart: 'serve-batch', run: name, title: 'Rows an iteration computes (mean)', xLabel,
        yLabel: 'rows', yZero: true, empty, series: [series('batch_rows', 'rows per iteration', PALETTE[2])]})));
  });
  section(box, 'KV cache and throughput', where, (body) => {
    body.append(el('div', {class: 'px-grid2'},
      lineChart({chart: 'serve-kv', run: name, title: 'KV blocks', xLabel, yLabel: 'blocks', yZero: true, empty,
        series: [series('kv_blocks_used', 'used', PALETTE[3]), series('kv_blocks_total', 'total', PALETTE[8], 1, true)]}),
      lineChart({chart: 'serve-tokens', run: name, title: 'Tokens per second', xLabel, yLabel: 'tokens/s',
        yZero: true, empty, series: [series('generated_tokens_per_s', 'generated', PALETTE[0]),
          series('prompt_tokens_per_s', 'prompt (prefill)', PALETTE[4])]})));
  });
  section(box, 'Latency', where, (body) => {
    body.append(el('div', {class: 'px-grid2'},
      lineChart({chart: 'serve-ttft', run: name, title: 'Time to first token', xLabel, yLabel: 'ms', yZero: true,
        empty: 'No first token in any window.', series: [series('ttft_p50_s', 'p50', PALETTE[0], 1e3),
          series('ttft_p99_s', 'p99', PALETTE[5], 1e3, true)]}),
      lineChart({chart: 'serve-itl', run: name, title: 'Inter-token latency', xLabel, yLabel: 'ms', yZero: true,
        empty: 'No second token in any window.', series: [series('itl_p50_s', 'p50', PALETTE[0], 1e3),
          series('itl_p99_s', 'p99', PALETTE[5], 1e3, true)]})));
    body.append(note('Each point is one window of serve.jsonl (0.5 s): the gauges at its end, the counts and the ' +
      'exact latency percentiles over it.'));
  });
}

// ---------------------------------------------------------------------------
// Several runs: overlaid curves and a table of figures, one colour a run.

function comparisonSection(parent, analyses) {
  const box = el('div', {class: 'px-run', id: 'compare'}, el('h2', {}, 'Comparison'),
    el('p', {class: 'px-run-desc'}, `${analyses.length} runs side by side; each run's own sections follow.`));
  parent.append(box);
  const color = (i) => PALETTE[i % PALETTE.length];
  section(box, 'Loss', 'comparison', (body) => {
    const timed = (p) => isNum(p.time);
    const series = (xOf, keep) => analyses.flatMap((a, i) => [
      {name: 'train_loss', run: a.run.name, label: `${a.run.name} train`, color: color(i), width: 1.1, opacity: 0.6,
        points: toPoints(a.metrics.train.filter(keep), xOf)},
      {name: 'val_loss', run: a.run.name, label: `${a.run.name} validation`, color: color(i), dashed: true,
        markers: true, width: 2, points: toPoints(a.metrics.val.filter(keep), xOf, false)}]);
    const u = timeUnit(Math.max(0, ...analyses.flatMap((a) => a.metrics.train.filter(timed).map((p) => p.time))));
    body.append(el('div', {class: 'px-grid2'},
      lineChart({chart: 'compare-loss', title: 'Loss by step', xLabel: 'step', yLabel: 'loss',
        series: series((p) => p.step, () => true)}),
      lineChart({chart: 'compare-loss-time', title: 'Loss by wall time', xLabel: `wall time (${u.name})`,
        yLabel: 'loss', series: series((p) => p.time * u.scale, timed)})));
  });
  section(box, 'Throughput', 'comparison', (body) => {
    const units = new Set(analyses.map((a) => a.unit));
    body.append(lineChart({chart: 'compare-throughput', width: 1240, height: 280, xLabel: 'step',
      empty: 'No run has step times, so there is no throughput to compare.',
      yLabel: units.size === 1 ? [...units][0] : 'units/s', yZero: true,
      series: analyses.map((a, i) => ({name: 'moving_median', run: a.run.name, label: `${a.run.name} (moving median)`,
        color: color(i), width: 2, points: toPoints(a.smooth, (p) => p.step)}))}));
    body.append(note("Moving medians of each run's per-step throughput",
      units.size > 1 ? '; the runs count different units.' : '.'));
  });
  section(box, 'Figures', 'comparison', (body) => {
    body.append(table(['run', 'mesh', 'strategy', '#steps', '#final train', '#final val', '#step measured',
      '#step predicted', '#peak memory', '#throughput'], analyses.map((a) => {
      const peaks = (a.summary?.memory?.measured_peak_bytes ?? []).filter(isNum);
      return [el('a', {href: `#run-${a.run.name}`}, a.run.name), a.summary?.mesh || '—',
        a.summary?.strategy_summary?.description, fmtNum(a.steps), fmtNum(a.finalTrain), fmtNum(a.finalVal),
        fmtSeconds(a.measuredStep), fmtSeconds(a.predictedStep), peaks.length ? fmtBytes(Math.max(...peaks)) : '—',
        isNum(a.throughputMedian) ? `${fmtNum(a.throughputMedian)} ${a.unit}` : '—'];
    })));
    body.append(note("Peak memory is the largest rank's; throughput is the median over steps."));
  });
}

// ---------------------------------------------------------------------------
// The page

function header(data, analyses, serving) {
  const names = [...analyses.map((a) => a.run.name), ...serving.map((r) => r.name)].join(', ');
  const band = el('header', {class: 'px-band'},
    el('h1', {}, el('span', {class: 'px-brand'}, 'parallax'), `run report: ${names || 'no runs'}`),
    el('div', {class: 'px-band-sub'}, `generated ${data.generated_at ?? 'at an unknown time'} · `,
      plural(analyses.length + serving.length, 'run')));
  if (analyses.length === 1 && !serving.length) {
    const a = analyses[0], s = a.summary;
    const fact = (label, value) => el('div', {}, el('span', {}, `${label} `), el('b', {}, value));
    band.append(el('div', {class: 'px-band-facts'}, fact('model', s?.model ?? '—'), fact('mesh', s?.mesh ?? '—'),
      fact('ranks', fmtNum(s?.ranks)), fact('steps', fmtNum(a.steps)), fact('wall time', fmtSeconds(a.seconds)),
      fact('final train loss', fmtNum(a.finalTrain)), fact('final val loss', fmtNum(a.finalVal)),
      isNum(a.finalAccuracy) ? fact('val accuracy', fmtPct(a.finalAccuracy)) : null));
  } else if (analyses.length + serving.length > 1) {
    band.append(el('nav', {}, analyses.length > 1 ? el('a', {href: '#compare'}, 'comparison') : null,
      analyses.map((a) => el('a', {href: `#run-${a.run.name}`}, a.run.name)),
      serving.map((r) => el('a', {href: `#run-${r.name}`}, r.name))));
  }
  return band;
}

function render() {
  const app = document.getElementById('app') ?? document.body.appendChild(el('div', {id: 'app'}));
  let data;
  try {
    data = JSON.parse(document.getElementById('px-data').textContent);
  } catch (error) {
    recordError(`the report's data could not be read: ${error.message}`);
    app.append(el('main', {}, el('p', {class: 'px-failed'}, "The report's data could not be read: nothing to show.")));
    return;
  }
  const all = (Array.isArray(data?.runs) ? data.runs : []).filter((r) => r && typeof r === 'object');
  const serving = all.filter((r) => r.kind === 'serve'), runs = all.filter((r) => r.kind !== 'serve');
  const analyses = [];
  for (const run of runs) {
    if (!Array.isArray(run.metrics)) run.metrics = [];
    try {
      analyses.push(analyseRun(run));
    } catch (error) {
      recordError(`run ${run.name}: reading its metrics: ${error?.stack ?? error}`);
    }
  }
  app.append(header(data, analyses, serving));
  const main = el('main', {});
  app.append(main);
  if (!all.length) main.append(missing('The report holds no runs.'));
  if (analyses.length > 1) comparisonSection(main, analyses);
  for (const a of analyses) runSection(main, a, analyses.length > 1);
  for (const run of serving) {
    try {
      servingSection(main, run, all.length > 1);
    } catch (error) {
      recordError(`serving run ${run.name}: ${error?.stack ?? error}`);
    }
  }
}

try {
  render();
} catch (error) {
  recordError(`rendering stopped: ${error?.stack ?? error}`);
}
document.body.dataset.pageHeight = String(document.documentElement.scrollHeight);
document.body.dataset.reportStatus = recordedErrors.length ? 'errors' : 'ok';
