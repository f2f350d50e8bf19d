// vitladder browser demo. Plain ES2017, no libraries, no network: everything comes from
// window.VITLADDER_DEMO, which data.js sets (a script, because Chromium will not fetch JSON
// from a page opened as file://). See src/vitladder/demo/export.py for the data layout.
'use strict';

(function () {
  const D = window.VITLADDER_DEMO;
  const $ = (id) => document.getElementById(id);
  if (!D || D.format !== 'vitladder-demo/2') {
    $('run-line').textContent = 'No demo data: data.js is missing or was written by another version.';
    return;
  }

  const L = D.layers, H = D.heads, C = H + 1;   // C map columns: the heads, then their mean
  const G = D.grid, N = G * G, T = N + 1;       // T tokens: CLS (0), then patches row by row
  const S = D.image_size;

  // base64 -> bytes once per array; the maps then index the bytes directly.
  function bytes(b64) {
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  const floats = (b64) => new Float32Array(bytes(b64).buffer); // little-endian, as written
  const lut = bytes(D.lut);                                     // 256 x RGB: byte q -> colour

  // Decode an image's arrays only when it is first shown, and keep them.
  const decoded = new Map();
  function imageData(i) {
    if (!decoded.has(i)) {
      const im = D.images[i];
      decoded.set(i, {
        attn: bytes(im.attn), scale: floats(im.scale), cls: bytes(im.cls),
        rollout: bytes(im.rollout), pixels: bytes(im.pixels),
      });
    }
    return decoded.get(i);
  }

  const state = { image: 0, patch: (G >> 1) * G + (G >> 1), mode: 'patch', locked: false, overlay: null };
  const rowCol = (p) => `row ${Math.floor(p / G)}, column ${p % G}`;
  function patchAt(canvas, event) {  // the patch under the pointer on a canvas that shows the G x G grid
    const r = canvas.getBoundingClientRect();
    const col = Math.min(G - 1, Math.max(0, Math.floor(((event.clientX - r.left) / r.width) * G)));
    const row = Math.min(G - 1, Math.max(0, Math.floor(((event.clientY - r.top) / r.height) * G)));
    return row * G + col;
  }
  const pct = (x) => `${(100 * x).toFixed(1)}%`;

  // ---- the grid of maps: one G x G canvas per (layer, column), scaled up by CSS with
  // pixelated rendering, so a redraw writes only L * C * N pixels (3,136 for patch 4).
  const mapsEl = $('maps');
  const mainEl = document.querySelector('main');  // the query's markers, on every map, read its variables
  mapsEl.style.setProperty('--cols', C);
  mainEl.style.setProperty('--cell', `${100 / G}%`);
  const maps = [];  // maps[l][c] = {ctx, img}: ImageData allocated once, refilled per redraw
  function header(text, extra = '') {
    const el = document.createElement('div');
    el.className = `head-label ${extra}`;
    el.textContent = text;
    mapsEl.appendChild(el);
  }
  header('');
  for (let c = 0; c < C; c++) header(c < H ? `head ${c}` : 'mean', c < H ? '' : 'mean');
  for (let l = 0; l < L; l++) {
    const label = document.createElement('div');
    label.className = 'layer-label';
    label.textContent = `layer ${l}`;
    mapsEl.appendChild(label);
    maps.push([]);
    for (let c = 0; c < C; c++) {
      const cell = document.createElement('div');
      cell.className = c < H ? 'cell' : 'cell mean';
      const canvas = document.createElement('canvas');
      canvas.width = canvas.height = G;
      canvas.className = 'map';
      canvas.dataset.layer = l;
      canvas.dataset.col = c;
      canvas.setAttribute('aria-label', `layer ${l}, ${c < H ? 'head ' + c : 'mean of heads'}`);
      const marker = document.createElement('div');
      marker.className = 'marker';
      cell.append(canvas, marker);
      mapsEl.appendChild(cell);
      const ctx = canvas.getContext('2d');
      maps[l].push({ ctx, img: ctx.createImageData(G, G) });
      cell.addEventListener('pointerenter', () => { state.overlay = { l, c }; drawImage(); describeMap(l, c); });
      cell.addEventListener('pointerleave', () => {
        state.overlay = null;
        drawImage();
        $('map-info').textContent = '\u00a0';
      });
    }
  }

  // Colour N bytes (one map) into an ImageData through the lookup table.
  function paint(img, codes, offset) {
    const px = img.data;
    for (let k = 0; k < N; k++) {
      const q = 3 * codes[offset + k];
      px[4 * k] = lut[q]; px[4 * k + 1] = lut[q + 1]; px[4 * k + 2] = lut[q + 2]; px[4 * k + 3] = 255;
    }
  }

  const query = () => (state.mode === 'cls' ? 0 : state.patch + 1);
  const rowOffset = (l, c) => ((l * C + c) * T + query()) * N;  // into attn (L, C, T, N)

  function drawMaps() {
    const im = imageData(state.image);
    for (let l = 0; l < L; l++) {
      for (let c = 0; c < C; c++) {
        const m = maps[l][c];
        paint(m.img, im.attn, rowOffset(l, c));
        m.ctx.putImageData(m.img, 0, 0);
      }
    }
    // The query patch is outlined on every map by one CSS rule reading these variables.
    mainEl.style.setProperty('--qx', `${(100 * (state.patch % G)) / G}%`);
    mainEl.style.setProperty('--qy', `${(100 * Math.floor(state.patch / G)) / G}%`);
    mapsEl.classList.toggle('cls-mode', state.mode === 'cls');
    Object.assign(mapsEl.dataset, { image: state.image, patch: state.patch, mode: state.mode });
  }

  function describeMap(l, c) {
    const im = imageData(state.image);
    const off = rowOffset(l, c);
    let best = 0;
    for (let k = 1; k < N; k++) if (im.attn[off + k] > im.attn[off + best]) best = k;
    const peak = im.scale[(l * C + c) * T + query()];
    const toCls = im.cls[(l * C + c) * T + query()] / 255;
    const who = c < H ? `head ${c}` : 'mean of the heads';
    const q = state.mode === 'cls' ? 'the CLS token' : `patch (${rowCol(state.patch)})`;
    const cls = state.mode === 'cls' ? 'itself' : 'the CLS token';
    $('map-info').textContent = `Layer ${l}, ${who}: ${q} puts ${pct(toCls)} of its attention on ${cls}; `
      + `its largest weight on one patch is ${peak.toFixed(3)}, at (${rowCol(best)}). `
      + 'The image shows this map as a spotlight.';
  }

  // ---- the image: drawn 10x with its patch grid, the query patch, and the map under the
  // pointer (if any) as a spotlight: patches darken as their attention falls.
  const view = $('image');
  const vctx = view.getContext('2d');
  const small = document.createElement('canvas');  // the image at its own 32 x 32 size
  small.width = small.height = S;
  const sctx = small.getContext('2d');
  const smallImg = sctx.createImageData(S, S);

  function drawImage() {
    const im = imageData(state.image);
    const W = view.width, cell = W / G;
    vctx.imageSmoothingEnabled = false;
    vctx.drawImage(small, 0, 0, W, W);
    const o = state.overlay;
    if (o) {
      const codes = o.rollout ? im.rollout : im.attn;
      const off = o.rollout ? 0 : rowOffset(o.l, o.c);
      for (let k = 0; k < N; k++) {
        vctx.fillStyle = `rgba(10, 12, 20, ${(0.85 * (1 - codes[off + k] / 255)).toFixed(3)})`;
        vctx.fillRect((k % G) * cell, Math.floor(k / G) * cell, cell, cell);
      }
    }
    vctx.strokeStyle = 'rgba(255, 255, 255, 0.35)';
    vctx.lineWidth = 1;
    vctx.beginPath();
    for (let i = 1; i < G; i++) {
      vctx.moveTo(i * cell + 0.5, 0); vctx.lineTo(i * cell + 0.5, W);
      vctx.moveTo(0, i * cell + 0.5); vctx.lineTo(W, i * cell + 0.5);
    }
    vctx.stroke();
    if (state.mode === 'patch') {
      const x = (state.patch % G) * cell, y = Math.floor(state.patch / G) * cell;
      vctx.lineWidth = 3;
      vctx.strokeStyle = '#111';
      vctx.strokeRect(x + 1.5, y + 1.5, cell - 3, cell - 3);
      vctx.lineWidth = 2;
      vctx.strokeStyle = state.locked ? '#ff5a36' : '#ffd23f';
      vctx.strokeRect(x + 1.5, y + 1.5, cell - 3, cell - 3);
    }
  }

  const rollout = $('rollout');
  rollout.width = rollout.height = G;
  const rctx = rollout.getContext('2d');
  const rimg = rctx.createImageData(G, G);
  rollout.addEventListener('pointerenter', () => {
    state.overlay = { rollout: true };
    drawImage();
    const im = imageData(state.image);
    const best = im.rollout.indexOf(255);
    $('map-info').textContent = `Rollout: the largest share, ${D.images[state.image].rollout_scale.toFixed(3)}, `
      + `comes from (${rowCol(best)}). The image shows the rollout as a spotlight.`;
  });
  rollout.addEventListener('pointerleave', () => {
    state.overlay = null;
    drawImage();
    $('map-info').textContent = '\u00a0';
  });

  // ---- position embeddings: the model's, not the image's. Row p of the (N, N) bytes is patch p's cosine
  // similarity to every patch on the fixed scale [low, high] = [-1, 1], so one legend reads every map.
  const P = D.position;
  const posCodes = bytes(P.similarity);
  const posValue = (q) => P.low + (q / 255) * (P.high - P.low);
  const position = $('position');
  position.width = position.height = G;
  const pctx = position.getContext('2d');
  const pimg = pctx.createImageData(G, G);
  function drawPosition() {
    paint(pimg, posCodes, state.patch * N);
    pctx.putImageData(pimg, 0, 0);
    position.dataset.patch = state.patch;
  }
  const rho = P.grid_correlation;
  $('position-rho').textContent = typeof rho === 'number'
    ? `Spearman's rank correlation of similarity with distance, over all pairs of patches: `
      + `${rho >= 0 ? '+' : ''}${rho.toFixed(2)} (strongly negative: grid-like; about 0: no grid).`
    : 'One patch: no correlation with distance.';
  position.addEventListener('pointermove', (e) => {
    const p = patchAt(position, e);
    $('map-info').textContent = `Position embeddings: patch (${rowCol(state.patch)}) and patch `
      + `(${rowCol(p)}) have cosine similarity ${posValue(posCodes[state.patch * N + p]).toFixed(2)}.`;
  });
  position.addEventListener('pointerleave', () => { $('map-info').textContent = '\u00a0'; });

  function selectImage(i) {
    state.image = (i + D.images.length) % D.images.length;
    const im = imageData(state.image), meta = D.images[state.image];
    for (let p = 0; p < S * S; p++) {
      smallImg.data.set(im.pixels.subarray(3 * p, 3 * p + 3), 4 * p);
      smallImg.data[4 * p + 3] = 255;
    }
    sctx.putImageData(smallImg, 0, 0);
    paint(rimg, im.rollout, 0);
    rctx.putImageData(rimg, 0, 0);
    const ok = meta.pred === meta.label;
    $('caption').textContent = '';
    $('caption').append(  // strings become text nodes: a class name is never markup
      `Image ${state.image + 1} of ${D.images.length} · true: ${D.classes[meta.label]}`,
      document.createElement('br'),
      'predicted: ',
      Object.assign(document.createElement('span'), {
        className: ok ? 'right' : 'wrong',
        textContent: `${D.classes[meta.pred]} (${pct(meta.prob)}) ${ok ? '✓' : '✗'}`,
      }));
    document.querySelectorAll('#thumbs button').forEach((b, j) => b.setAttribute('aria-selected', j === state.image));
    update();
  }

  function update() {
    drawMaps();
    drawPosition();
    drawImage();
    // Keys can move the query while the pointer rests on a map: keep its description current.
    if (state.overlay && !state.overlay.rollout) describeMap(state.overlay.l, state.overlay.c);
    for (const b of document.querySelectorAll('#query-switch button')) {
      b.setAttribute('aria-checked', b.id === `mode-${state.mode}`);
    }
    $('query-line').textContent = state.mode === 'cls'
      ? 'Showing what the CLS token (query 0, read by the classifier) attends to. '
        + 'Click the image or press C for patches.'
      : `Query: the patch at ${rowCol(state.patch)}. ${state.locked
        ? 'Pinned: click the image to unpin; arrow keys still move it.'
        : 'Move the pointer to change it; click to pin it.'}`;
  }

  function setPatch(p) {
    if (p === state.patch && state.mode === 'patch') return;  // nothing to redraw
    state.patch = p;
    state.mode = 'patch';
    update();
  }

  // Pointer: hovering moves the query patch unless it is pinned (or the CLS maps are shown).
  view.addEventListener('pointermove', (e) => {
    if (!state.locked && state.mode === 'patch') setPatch(patchAt(view, e));
  });
  view.addEventListener('click', (e) => {
    const p = patchAt(view, e);
    state.locked = state.mode === 'cls' || p !== state.patch || !state.locked;
    state.patch = p;
    state.mode = 'patch';
    update();
  });

  function setMode(mode) {
    state.mode = mode;
    update();
  }
  $('mode-patch').addEventListener('click', () => setMode('patch'));
  $('mode-cls').addEventListener('click', () => setMode('cls'));

  const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
  document.addEventListener('keydown', (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    const key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    if (moves[key]) {
      const [dr, dc] = moves[key];
      const row = Math.min(G - 1, Math.max(0, Math.floor(state.patch / G) + dr));
      const col = Math.min(G - 1, Math.max(0, (state.patch % G) + dc));
      setPatch(row * G + col);
    } else if (key === 'c') {
      setMode(state.mode === 'cls' ? 'patch' : 'cls');
    } else if (key === 'n' || key === 'p') {
      selectImage(state.image + (key === 'n' ? 1 : -1));
    } else {
      return;
    }
    e.preventDefault();  // arrows would scroll the page
  });

  // ---- thumbnails, colour bar, header line
  D.images.forEach((meta, i) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.setAttribute('role', 'option');
    b.className = meta.pred === meta.label ? 'thumb right' : 'thumb wrong';
    b.title = `image ${i + 1}: true ${D.classes[meta.label]}, predicted ${D.classes[meta.pred]}`;
    const c = document.createElement('canvas');
    c.width = c.height = S;
    const ctx = c.getContext('2d');
    const img = ctx.createImageData(S, S);
    const px = bytes(meta.pixels);
    for (let p = 0; p < S * S; p++) {
      img.data.set(px.subarray(3 * p, 3 * p + 3), 4 * p);
      img.data[4 * p + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
    b.appendChild(c);
    b.addEventListener('click', () => selectImage(i));
    $('thumbs').appendChild(b);
  });

  for (const canvas of document.querySelectorAll('.colorbar')) {  // the attention maps' and the position map's
    const bar = canvas.getContext('2d');
    const barImg = bar.createImageData(256, 1);
    for (let q = 0; q < 256; q++) barImg.data.set([lut[3 * q], lut[3 * q + 1], lut[3 * q + 2], 255], 4 * q);
    bar.putImageData(barImg, 0, 0);
  }

  const acc = typeof D.test_acc === 'number' ? `test accuracy ${pct(D.test_acc)}` : 'test accuracy not recorded';
  $('run-line').textContent = `Rung ${D.rung}${D.ladder ? ` (ladder ${D.ladder})` : ''} · ${acc} · `
    + `${L} layers × ${H} heads · ${D.patch_size} px patches on a ${G}×${G} grid · ${D.checkpoint}`;
  document.title = `${D.rung}: where does each patch look? · vitladder`;

  selectImage(0);
})();
