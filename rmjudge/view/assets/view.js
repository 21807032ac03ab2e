/* rmjudge view: an offline explorer of a judged table.
 *
 * The data files beside this page call the registration functions below (they are loaded with
 * <script> tags, since a page opened from disk may not fetch() files): data/meta.js first,
 * then the list chunks (data/list-K.js), and on demand the details (data/detail-K.js) and the
 * search text (data/text-K.js). Every text that comes from the data is put on the page with
 * textContent or as text nodes, never as HTML; Markdown is rendered by the small renderer
 * below, which builds DOM nodes (code blocks, inline code, emphasis, lists, headings, quotes,
 * paragraphs) and never makes a link or an image.
 */
(function () {
  "use strict";

  var S = {
    meta: null, n: 0, cols: null, listChunks: 0,
    detail: {}, detailWait: {}, detailResolve: {}, text: {}, textWait: {}, textLoaded: 0,
    view: [], sel: 0, rowH: 30, open: -1, marks: Object.create(null), byKey: new Map(),
    filters: {}, group: {}, query: "", margin: 0.1, sort: "row", ready: false
  };
  var FLAG = {};

  // -- small DOM functions ----------------------------------------------------------------
  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) {
      var c = arguments[i];
      if (c === null || c === undefined) continue;
      parent.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return parent;
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }
  function titled(e, title) { e.title = title; return e; }
  function titled(e, title) { e.title = title; return e; }
  function fmt(x, d) { return x === null || x === undefined ? "–" : Number(x).toFixed(d === undefined ? 2 : d); }
  function pct(x) { return x === null || x === undefined ? "–" : (100 * x).toFixed(0) + "%"; }

  // -- Markdown, as DOM nodes -------------------------------------------------------------
  function inline(parent, text) {
    // code spans first; inside other text: **strong**, __strong__, *em*, _em_
    var parts = text.split(/(`+[^`]*?`+)/);
    for (var i = 0; i < parts.length; i++) {
      var p = parts[i];
      if (!p) continue;
      var m = /^(`+)([^`]*?)(`+)$/.exec(p);
      if (m && m[1].length === m[3].length && p.length > 2 * m[1].length) {
        parent.appendChild(el("code", null, m[2]));
      } else {
        emphasis(parent, p);
      }
    }
  }
  function emphasis(parent, text) {
    var re = /(\*\*|__)(?=\S)([\s\S]*?\S)\1|(\*|_)(?=[^\s*_])([^*_]*?[^\s*_])\3(?![A-Za-z0-9])/g;
    var last = 0, m;
    while ((m = re.exec(text)) !== null) {
      if (m[3] === "_" && m.index > 0 && /[A-Za-z0-9]/.test(text[m.index - 1])) continue;
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      if (m[1]) emphasis(parent.appendChild(el("strong")), m[2]);
      else parent.appendChild(el("em", null, m[4]));
      last = re.lastIndex;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }
  function markdown(text) {
    var root = el("div", "md");
    if (text === null || text === undefined) { root.appendChild(el("span", "muted", "(none)")); return root; }
    var lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    var i = 0, para = [];
    function flush() {
      if (!para.length) return;
      var p = el("p");
      for (var k = 0; k < para.length; k++) {
        if (k) p.appendChild(el("br"));
        inline(p, para[k]);
      }
      root.appendChild(p);
      para = [];
    }
    while (i < lines.length) {
      var line = lines[i];
      var fence = /^\s{0,3}(```+|~~~+)\s*([^`\s]*)/.exec(line);
      if (fence) {
        flush();
        var body = [], close = fence[1];
        i++;
        while (i < lines.length && lines[i].trim().indexOf(close) !== 0) body.push(lines[i++]);
        i++;
        var pre = el("pre", "code");
        if (fence[2]) pre.appendChild(el("span", "lang", fence[2]));
        pre.appendChild(el("code", null, body.join("\n")));
        root.appendChild(pre);
        continue;
      }
      if (!line.trim()) { flush(); i++; continue; }
      var h = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
      if (h) { flush(); var hd = el("div", "mdh mdh" + h[1].length); inline(hd, h[2]); root.appendChild(hd); i++; continue; }
      var li = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/.exec(line);
      if (li) {
        flush();
        var ordered = /\d/.test(li[2]);
        var list = el(ordered ? "ol" : "ul");
        if (ordered && parseInt(li[2], 10) !== 1) list.start = parseInt(li[2], 10);
        while (i < lines.length) {
          var m2 = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/.exec(lines[i]);
          if (!m2 || /\d/.test(m2[2]) !== ordered) {
            // a continuation line (indented) belongs to the item before it
            if (lines[i].trim() && /^\s{2,}/.test(lines[i]) && list.lastChild) {
              list.lastChild.appendChild(el("br"));
              inline(list.lastChild, lines[i].trim());
              i++;
              continue;
            }
            break;
          }
          var item = el("li");
          if (m2[1].length >= 2) item.className = "nested";
          inline(item, m2[3]);
          list.appendChild(item);
          i++;
        }
        root.appendChild(list);
        continue;
      }
      var q = /^\s{0,3}>\s?(.*)$/.exec(line);
      if (q) {
        flush();
        var quote = el("blockquote"), ql = [];
        while (i < lines.length && (q = /^\s{0,3}>\s?(.*)$/.exec(lines[i]))) { ql.push(q[1]); i++; }
        quote.appendChild(markdown(ql.join("\n")));
        root.appendChild(quote);
        continue;
      }
      para.push(line);
      i++;
    }
    flush();
    return root;
  }

  // -- loading data files --------------------------------------------------------------------
  function loadScript(src, onerror) {
    var s = document.createElement("script");
    s.src = src;
    s.async = false;
    s.onerror = onerror || function () { fail("cannot read " + src + ": was the folder moved or cut short? Run rmjudge view again."); };
    document.head.appendChild(s);
  }
  function chunkName(kind, k) { return "data/" + kind + "-" + String(k).padStart(5, "0") + ".js"; }
  function fail(msg) { var l = $("loading"); l.hidden = false; l.textContent = msg; l.className = "loading error"; }

  function loadDetail(k) {
    if (S.detail[k]) return Promise.resolve(S.detail[k]);
    if (!S.detailWait[k]) {
      S.detailWait[k] = new Promise(function (resolve, reject) {
        S.detailResolve[k] = resolve;
        loadScript(chunkName("detail", k), function () {
          delete S.detailWait[k];
          reject(new Error("cannot read " + chunkName("detail", k) + ": was the folder moved or cut short? Run rmjudge view again."));
        });
      });
    }
    return S.detailWait[k];
  }

  function detailOf(i) {
    var k = Math.floor(i / S.meta.chunks.detail_size);
    return loadDetail(k).then(function (rows) { return rows[i - k * S.meta.chunks.detail_size]; });
  }

  var textStarted = false;
  function loadTexts() {
    // every part of the search text at once (the browser reads them in parallel and runs
    // them in order); each part is scanned once for the current query when it arrives
    if (textStarted) return;
    textStarted = true;
    for (var k = 0; k < S.meta.chunks.text; k++) loadScript(chunkName("text", k));
  }

  // the current query's hits: one byte per item, filled part by part
  var hits = { q: null, done: {}, bits: null };
  function scanPart(k) {
    var t = S.text[k], q = hits.q, size = S.meta.chunks.text_size, base = k * size;
    for (var j = 0; j < t.length; j++) if (t[j].indexOf(q) >= 0) hits.bits[base + j] = 1;
    hits.done[k] = true;
  }
  function searchHits(q) {
    if (hits.q !== q) {
      hits = { q: q, done: {}, bits: new Uint8Array(S.n) };
      for (var i = 0; i < S.n; i++) {
        var id = S.cols.id[i];
        if (id !== null && String(id).toLowerCase().indexOf(q) >= 0) hits.bits[i] = 1;
      }
    }
    for (var k in S.text) if (!hits.done[k]) scanPart(Number(k));
    return hits.bits;
  }

  var refreshTimer = null;
  function refreshSoon() {
    // while the parts arrive, the list follows at most five times a second
    if (refreshTimer) return;
    refreshTimer = setTimeout(function () { refreshTimer = null; refresh(false); }, 200);
  }

  // -- registration (called by the data files) -----------------------------------------------
  var api = {};
  api.meta = function (m) {
    S.meta = m;
    FLAG = m.flags;
    S.listChunks = 0;
    S.cols = null;
    S.waiting = m.chunks.list + (m.ranked ? m.ranked.chunks.list : 0);
    for (var k = 0; k < m.chunks.list; k++) loadScript(chunkName("list", k));
    if (m.ranked) for (var k2 = 0; k2 < m.ranked.chunks.list; k2++) loadScript(chunkName("plist", k2));
    if (S.waiting === 0) start();
  };
  api.list = function (k, c) {
    if (!S.cols) {
      S.cols = { id: [], row: [], p_a: [], p_a_ab: [], p_a_ba: [], confidence_ab: [], confidence_ba: [],
                 len_a: [], len_b: [], flags: [], label: [], human: [], verdict: [], verdict_ab: [],
                 verdict_ba: [], groups: S.meta.groups.map(function () { return []; }) };
      S.parts = [];
    }
    S.parts[k] = c;
    S.listChunks++;
    if (S.listChunks === S.meta.chunks.list) {
      for (var j = 0; j < S.parts.length; j++) {
        var p = S.parts[j];
        for (var name in S.cols) {
          if (name === "groups") {
            for (var g = 0; g < p.groups.length; g++) Array.prototype.push.apply(S.cols.groups[g], p.groups[g]);
          } else {
            var src = p[name], dst = S.cols[name];
            for (var x = 0; x < src.length; x++) dst.push(src[x]);
          }
        }
      }
      S.parts = null;
    }
    if (--S.waiting === 0) start();
  };
  api.detail = function (k, rows) {
    S.detail[k] = rows;
    if (S.detailResolve[k]) S.detailResolve[k](rows);
  };
  api.text = function (k, texts) {
    S.text[k] = texts;
    S.textLoaded++;
    if (S.query) {
      if (S.textLoaded === S.meta.chunks.text) { clearTimeout(refreshTimer); refreshTimer = null; refresh(false); }
      else refreshSoon();
    }
  };
  window.rmjudgeView = api;

  // -- the list --------------------------------------------------------------------------------
  function vocab(name, code) { return code < 0 ? null : S.meta.vocab[name][code]; }
  function col(name, i) { return vocab(name, S.cols[name][i]); }
  function isError(i) { return (S.cols.flags[i] & (FLAG.error_row | FLAG.judge_error)) !== 0; }
  function isRow(i) { return (S.cols.flags[i] & FLAG.error_row) !== 0; }
  function keyOf(i) { return isRow(i) ? "row=" + S.cols.row[i] : "pair=" + encodeURIComponent(S.cols.id[i]); }
  function markKey(i) { return S.cols.id[i]; }
  function margin(i) { var p = S.cols.p_a[i]; return p === null ? null : Math.abs(p - 0.5); }
  function conf(i) {
    var a = S.cols.confidence_ab[i], b = S.cols.confidence_ba[i];
    if (a === null && b === null) return null;
    if (a === null) return b;
    if (b === null) return a;
    return (a + b) / 2;
  }

  var CHIPS = [
    ["disagree", "disagrees with gold", function (i) {
      var g = col("label", i), v = col("verdict", i);
      return (g === "A" || g === "B") && (v === "A" || v === "B" || v === "tie") && v !== g;
    }],
    ["inconsistent", "flips (orders disagree)", function (i) { return (S.cols.flags[i] & FLAG.inconsistent) !== 0; }],
    ["tie", "tie", function (i) { return col("verdict", i) === "tie"; }],
    ["lowmargin", "low margin", function (i) { var m = margin(i); return m !== null && m <= S.margin + 1e-12; }],
    ["cut", "cut", function (i) { return (S.cols.flags[i] & FLAG.cut) !== 0; }],
    ["unparsed", "unparsed", function (i) { return (S.cols.flags[i] & FLAG.unparsed) !== 0; }],
    ["forced", "forced", function (i) { return (S.cols.flags[i] & FLAG.forced) !== 0; }],
    ["errors", "errors", isError],
    ["human", "human label", function (i) { return S.cols.human[i] >= 0; }],
    ["marked", "marked", function (i) { return S.marks[markKey(i)] !== undefined && !isRow(i); }],
    ["unmarked", "not marked", function (i) { return S.marks[markKey(i)] === undefined && !isRow(i); }]
  ];

  function refresh(keepSel) {
    var n = S.n, on = [], chipCount = {}, q = S.query, hit = q ? searchHits(q) : null;
    for (var c = 0; c < CHIPS.length; c++) { chipCount[CHIPS[c][0]] = 0; if (S.filters[CHIPS[c][0]]) on.push(c); }
    var groupsOn = [];
    for (var g = 0; g < S.meta.groups.length; g++) if (S.group[g] !== undefined && S.group[g] !== "") groupsOn.push(g);
    var prevKey = S.view.length && S.sel < S.view.length ? S.view[S.sel] : -1;
    var view = [];
    for (var i = 0; i < n; i++) {
      var ok = true;
      for (var gi = 0; gi < groupsOn.length; gi++) {
        if (String(S.cols.groups[groupsOn[gi]][i]) !== S.group[groupsOn[gi]]) { ok = false; break; }
      }
      if (!ok) continue;
      if (hit && !hit[i]) continue;
      // a chip counts the items that pass every other filter (and the search) and match it:
      // the list's items that match it
      var nfail = 0;
      for (var a = 0; a < on.length; a++) {
        if (!CHIPS[on[a]][2](i)) { nfail++; break; }
      }
      if (nfail) continue;
      view.push(i);
      for (var b = 0; b < CHIPS.length; b++) if (CHIPS[b][2](i)) chipCount[CHIPS[b][0]]++;
    }
    sortView(view);
    S.view = view;
    S.sel = 0;
    if (keepSel !== false && prevKey >= 0) {
      var at = view.indexOf(prevKey);
      if (at >= 0) S.sel = at;
    }
    renderChips(chipCount);
    var c2 = $("count");
    c2.textContent = view.length.toLocaleString("en-US") + " of " + n.toLocaleString("en-US") + " shown";
    var st = $("search-status");
    if (q && S.textLoaded < S.meta.chunks.text) st.textContent = "searching the texts… " + S.textLoaded + " / " + S.meta.chunks.text + " parts read";
    else st.textContent = q ? "searched ids, prompts and responses" : "";
    $("list-inner").style.height = (view.length * S.rowH) + "px";
    renderList(true);
  }

  function sortView(view) {
    var s = S.sort;
    if (s === "row") return;
    var desc = /-desc$/.test(s), kind = s.replace(/-(asc|desc)$/, "");
    var keyf = { margin: margin, conf: conf,
                 len: function (i) { var a = S.cols.len_a[i], b = S.cols.len_b[i]; return a === null ? null : a + b; },
                 lendiff: function (i) { var a = S.cols.len_a[i], b = S.cols.len_b[i]; return a === null ? null : Math.abs(a - b); } }[kind];
    var keys = new Float64Array(S.n);
    for (var i = 0; i < view.length; i++) { var v = keyf(view[i]); keys[view[i]] = v === null ? NaN : v; }
    view.sort(function (x, y) {
      var a = keys[x], b = keys[y];
      if (a !== a) return b !== b ? x - y : 1;  // no value: last
      if (b !== b) return -1;
      return (desc ? b - a : a - b) || x - y;
    });
  }

  function renderChips(count) {
    var box = $("chips");
    var keep = $("margin-box");
    clear(box);
    CHIPS.forEach(function (c) {
      var b = el("button", "chip" + (S.filters[c[0]] ? " on" : ""));
      b.type = "button";
      b.dataset.chip = c[0];
      add(b, c[1] + " ", el("span", "n", count[c[0]].toLocaleString("en-US")));
      b.addEventListener("click", function () { S.filters[c[0]] = !S.filters[c[0]]; refresh(); saveState(); });
      box.appendChild(b);
      if (c[0] === "lowmargin") box.appendChild(keep);
    });
  }

  function badge(v, extra) {
    var cls = "b";
    if (v === "A") cls += " bA"; else if (v === "B") cls += " bB"; else if (v === "tie") cls += " bT";
    else if (v === "error" || v === "dropped") cls += " bE"; else if (v === null || v === undefined) cls += " bN";
    return el("span", cls + (extra ? " " + extra : ""), v === null || v === undefined ? "–" : v);
  }

  var CONF_HELP = "confidence: a mean log-probability, 0 or negative (0 = certain; the more negative, the less sure): of a rollout's lowest 10% of tokens (ReflectRM), or of the tokens that wrote its verdict (the other judge formats), averaged over the rollouts that voted for the verdict";
  var COLS = [["row", "row", "the row number in the input"], ["id", "id", "the pair id"],
              ["group", "group", "source and subset"], ["gold", "gold", "the input's label"],
              ["human", "human", "the store's human label (review import), then your mark (dashed)"],
              ["verdict", "verdict", "the final verdict of both orders"],
              ["ab", "(A,B)", "the verdict of order (A, B), in the store's letters"],
              ["ba", "(B,A)", "the verdict of order (B, A), in the store's letters"],
              ["share", "vote share A", "the share of the final votes for A, averaged over the orders"],
              ["conf", "conf. (log p)", CONF_HELP + ", and over the two orders"],
              ["flags", "flags", "flip: the orders name different winners (no order agreement); cut, unparsed, forced: some generation was"],
              ["len", "len A / B", "the responses' lengths in characters"]];

  function renderHead() {
    var h = $("list-head");
    clear(h);
    COLS.forEach(function (c) { var e = el("span", "c c-" + c[0], c[1]); e.title = c[2]; h.appendChild(e); });
  }

  function shareBar(p) {
    var w = el("span", "share");
    if (p === null) { w.appendChild(el("span", "muted", "–")); return w; }
    var bar = el("span", "bar"), fill = el("span", "fill");
    fill.style.width = (100 * p).toFixed(0) + "%";
    bar.appendChild(fill);
    add(w, bar, el("span", "num", fmt(p, 2)));
    return w;
  }

  function flagBadges(i) {
    var f = S.cols.flags[i], w = el("span", "flags");
    if (f & FLAG.error_row) w.appendChild(el("span", "flag fE", "error row"));
    if (f & FLAG.judge_error) w.appendChild(el("span", "flag fE", "no verdict"));
    if (f & FLAG.inconsistent) w.appendChild(el("span", "flag fI", "flip"));
    if (f & FLAG.cut) w.appendChild(el("span", "flag fC", "cut"));
    if (f & FLAG.unparsed) w.appendChild(el("span", "flag fU", "unparsed"));
    if (f & FLAG.forced) w.appendChild(el("span", "flag fF", "forced"));
    return w;
  }

  function renderList(scrollToSel) {
    var box = $("list"), inner = $("list-inner");
    if (scrollToSel) {
      var top = S.sel * S.rowH;
      if (top < box.scrollTop) box.scrollTop = top;
      else if (top + S.rowH > box.scrollTop + box.clientHeight) box.scrollTop = top - box.clientHeight + S.rowH;
    }
    var first = Math.max(0, Math.floor(box.scrollTop / S.rowH) - 5);
    var last = Math.min(S.view.length, Math.ceil((box.scrollTop + box.clientHeight) / S.rowH) + 5);
    clear(inner);
    for (var r = first; r < last; r++) {
      var i = S.view[r], row = el("div", "row" + (r === S.sel ? " sel" : "") + (isRow(i) ? " errrow" : ""));
      row.style.transform = "translateY(" + (r * S.rowH) + "px)";
      row.dataset.pos = r;
      var groups = S.meta.groups.map(function (g, gi) { var c = S.cols.groups[gi][i]; return c < 0 ? null : g.values[c]; })
        .filter(function (x) { return x !== null; }).join(" · ");
      var mine = S.marks[markKey(i)];
      var human = el("span", "c c-human");
      var stored = col("human", i);
      if (stored !== null) human.appendChild(badge(stored, "stored"));
      if (mine !== undefined && !isRow(i)) human.appendChild(badge(mine === "skip" ? "skip" : mine, "mine"));
      add(row,
        el("span", "c c-row", S.cols.row[i] === null ? "–" : inputRow(S.cols.row[i])),
        el("span", "c c-id", S.cols.id[i] === null || S.cols.id[i] === "" ? "(no id)" : S.cols.id[i]),
        el("span", "c c-group", groups),
        add(el("span", "c c-gold"), badge(col("label", i))),
        human,
        add(el("span", "c c-verdict"), isRow(i) ? badge("error") : badge(col("verdict", i))),
        add(el("span", "c c-ab"), badge(col("verdict_ab", i), "small")),
        add(el("span", "c c-ba"), badge(col("verdict_ba", i), "small")),
        add(el("span", "c c-share"), shareBar(S.cols.p_a[i])),
        titled(el("span", "c c-conf", fmt(conf(i), 2)), CONF_HELP + ", and over the two orders"),
        add(el("span", "c c-flags"), flagBadges(i)),
        el("span", "c c-len", S.cols.len_a[i] === null ? "–" : S.cols.len_a[i] + " / " + S.cols.len_b[i]));
      inner.appendChild(row);
    }
    if (!S.view.length) inner.appendChild(el("div", "empty", "No item matches the filters."));
  }

  // -- one pair ----------------------------------------------------------------------------
  function letter(order, pred) {
    if (pred === 0) return "tie";  // a judge format with a tie form (docs/judges.md)
    if (pred !== 1 && pred !== 2) return null;
    return (pred === 1) === (order === "ab") ? "A" : "B";
  }
  var S_ORDER = 0, S_STAGE = 1, S_IDX = 2, S_TEXT = 3, S_PRED = 4, S_CONF = 5, S_ANCHOR = 6,
      S_OF = 7, S_SLOT = 8, S_WON = 9, S_SRC = 10, S_TOK = 11, S_FINISH = 12, S_PFIRST = 13;

  function marks(s) {
    var w = el("span", "marks");
    if (s[S_FINISH] === "length") w.appendChild(el("span", "flag fC", "cut at max tokens"));
    if (s[S_SRC] === null) w.appendChild(el("span", "flag fU", "unparsed"));
    if (s[S_SRC] === "forced") w.appendChild(el("span", "flag fF", "forced" + (s[S_PFIRST] !== null ? " (p₁ " + fmt(s[S_PFIRST], 2) + ")" : "")));
    return w;
  }

  function collapsible(title, body, open) {
    var d = el("details", "txt");
    if (open) d.open = true;
    var sm = el("summary");
    add(sm, title);
    d.appendChild(sm);
    var filled = false;
    function fill() { if (!filled) { filled = true; d.appendChild(body()); } }
    if (open) fill();
    d.addEventListener("toggle", fill);
    return d;
  }

  function preview(text) {
    var t = String(text || "").replace(/\s+/g, " ").trim();
    return t.length > 140 ? t.slice(0, 140) + "…" : t;
  }

  function orderSection(d, order) {
    var sec = el("section", "order");
    var rs = d.samples.filter(function (s) { return s[S_ORDER] === order && s[S_STAGE] === "rollout"; });
    var refl = d.samples.filter(function (s) { return s[S_ORDER] === order && s[S_STAGE] === "reflection"; });
    var v = d["verdict_" + order], share = d["p_a_" + order], c = d["confidence_" + order];
    var title = order === "ab" ? "Order (A, B): response 1 is A" : "Order (B, A): response 1 is B";
    var head = el("div", "order-head");
    add(head, el("h3", null, title), badge(v), el("span", "kv", "vote share A " + fmt(share, 2)),
        titled(el("span", "kv", "confidence (mean log p) " + fmt(c, 3)), CONF_HELP),
        el("span", "kv", (d["rollouts_" + order] === null ? rs.length : d["rollouts_" + order]) + " rollouts"));
    if (d["shortcut_" + order]) head.appendChild(el("span", "flag fS", "unanimous: no reflection"));
    sec.appendChild(head);
    if (!rs.length) { sec.appendChild(el("p", "muted", "No samples stored for this order.")); return sec; }
    var anchor = rs.filter(function (s) { return s[S_ANCHOR]; })[0];
    var grid = el("div", "rollouts");
    rs.forEach(function (s) {
      var card = el("div", "rollout" + (s[S_ANCHOR] ? " anchor" : "") + (s[S_WON] === true ? " won" : s[S_WON] === false ? " lost" : ""));
      var top = el("div", "rtop");
      add(top, el("span", "ridx", "#" + s[S_IDX]), badge(letter(order, s[S_PRED])),
          el("span", "kv", s[S_PRED] === 0 ? "a tie" : "response " + (s[S_PRED] === null ? "–" : s[S_PRED])),
          titled(el("span", "kv", "conf. (log p) " + fmt(s[S_CONF], 3)), "this rollout's confidence: a mean log-probability, 0 or negative (0 = certain; the more negative, the less sure): of its lowest 10% of tokens (ReflectRM), or of the tokens that wrote its verdict (the other judge formats)"),
          el("span", "kv", s[S_TOK] + " tok"));
      if (s[S_ANCHOR]) top.appendChild(el("span", "flag fA", "anchor"));
      if (s[S_WON] === true) top.appendChild(el("span", "flag fW", "won its reflection"));
      else if (s[S_WON] === false) top.appendChild(el("span", "flag fL", "lost to the anchor"));
      top.appendChild(marks(s));
      card.appendChild(top);
      card.appendChild(collapsible(el("span", "pv", preview(s[S_TEXT])), function () { return markdown(s[S_TEXT]); }, false));
      grid.appendChild(card);
    });
    sec.appendChild(el("h4", null, "Rollouts"));
    sec.appendChild(grid);
    if (refl.length) {
      sec.appendChild(el("h4", null, "Self-reflection: each rollout's critique against the anchor's"));
      var list = el("div", "reflections");
      refl.forEach(function (s) {
        var judged = s[S_OF], slot = s[S_SLOT];
        var c1 = slot === 1 ? "rollout #" + judged : "anchor #" + (anchor ? anchor[S_IDX] : "?");
        var c2 = slot === 1 ? "anchor #" + (anchor ? anchor[S_IDX] : "?") : "rollout #" + judged;
        var won = s[S_PRED] === slot && s[S_SRC] === "generated" && s[S_FINISH] !== "length";
        var card = el("div", "reflection");
        var top = el("div", "rtop");
        add(top, el("span", "ridx", "reflection " + s[S_IDX]),
            el("span", "kv", "critique 1: " + c1), el("span", "kv", "critique 2: " + c2),
            el("span", "kv", "picks critique " + (s[S_PRED] === null ? "–" : s[S_PRED])),
            el("span", "flag " + (won ? "fW" : "fL"), won ? "rollout #" + judged + " wins" : "anchor kept"));
        top.appendChild(marks(s));
        card.appendChild(top);
        card.appendChild(collapsible(el("span", "pv", preview(s[S_TEXT])), function () { return markdown(s[S_TEXT]); }, false));
        list.appendChild(card);
      });
      sec.appendChild(list);
    }
    // the votes: the winners of self-reflection (with the anchor when they are none or tied)
    var winners = rs.filter(function (s) { return s[S_WON] === true; });
    var usable = rs.filter(function (s) { return s[S_SRC] === "generated" && s[S_FINISH] !== "length"; });
    var votes = el("p", "votes");
    if (refl.length) {
      var na = winners.filter(function (s) { return letter(order, s[S_PRED]) === "A"; }).length;
      var wt = winners.filter(function (s) { return s[S_PRED] === 0; }).length;
      add(votes, "Winners W: " + (winners.length ? winners.map(function (s) { return "#" + s[S_IDX]; }).join(", ") : "none") +
          " (A " + na + ", B " + (winners.length - na - wt) + (wt ? ", tie " + wt : "") + ")" +
          (winners.length === 0 || na * 2 === winners.length ? "; the anchor #" + (anchor ? anchor[S_IDX] : "?") + " joins the vote" : "") +
          ". Vote share for A " + fmt(share, 2) + " → " + (v || "–") + ".");
    } else {
      var nA = usable.filter(function (s) { return letter(order, s[S_PRED]) === "A"; }).length;
      var nT = usable.filter(function (s) { return s[S_PRED] === 0; }).length;
      add(votes, (usable.length ? "Majority of " + usable.length + " usable rollouts (A " + nA + ", B " + (usable.length - nA - nT) + (nT ? ", tie " + nT : "") + ")"
                                : "No usable rollout: the forced verdicts vote") +
          ". Vote share for A " + fmt(share, 2) + " → " + (v || "–") + ".");
    }
    sec.appendChild(votes);
    return sec;
  }

  function conversation(d) {
    var box = el("div", "conv"), msgs = null;
    try { msgs = d.messages ? JSON.parse(d.messages) : null; } catch (e) { msgs = null; }
    if (!Array.isArray(msgs) || !msgs.length) msgs = [{ role: "user", content: d.prompt }];
    msgs.forEach(function (m) {
      if (m === null || typeof m !== "object") return;
      var role = Object.prototype.hasOwnProperty.call(m, "role") ? String(m.role) : "user";
      var content = Object.prototype.hasOwnProperty.call(m, "content") ? m.content : "";
      if (typeof content !== "string") content = JSON.stringify(content);
      var turn = el("div", "turn role-" + (/^(user|assistant|system)$/.test(role) ? role : "other"));
      add(turn, el("div", "role", role), markdown(content));
      box.appendChild(turn);
    });
    return box;
  }

  function responseBox(name, text) {
    var box = el("div", "resp");
    var head = el("div", "resp-head");
    var raw = el("button", "mini", "raw text");
    raw.type = "button";
    add(head, el("span", "resp-name", "Response " + name), el("span", "muted", (text === null ? 0 : String(text).length) + " chars"), raw);
    var body = el("div", "resp-body");
    body.appendChild(markdown(text));
    raw.addEventListener("click", function () {
      clear(body);
      if (raw.textContent === "raw text") { body.appendChild(el("pre", "raw", text === null ? "" : text)); raw.textContent = "rendered"; }
      else { body.appendChild(markdown(text)); raw.textContent = "raw text"; }
    });
    add(box, head, body);
    return box;
  }

  function settingsCorner(d) {
    var box = el("aside", "settings");
    var s = S.meta.settings || {};
    var run = null;
    (S.meta.runs || []).forEach(function (r) { if (r.run_id === d.run) run = r; });
    run = run || (S.meta.runs || [])[S.meta.runs.length - 1] || {};
    var lora = run.lora ? run.lora + (run.lora_sha256 ? " (sha256 " + run.lora_sha256.slice(0, 12) + ")" : "") : "none";
    var rows = [["model", run.model || "–"], ["LoRA", lora], ["N (samples)", s.samples], ["max tokens", s.max_tokens === null || s.max_tokens === undefined ? "default" : s.max_tokens],
                ["temperature", s.temperature], ["criteria", S.meta.criteria || "–"], ["reflection", s.reflect === false ? "off (a vote over each order's rollouts)" : "on"],
                ["judge format", s.judge_format || "reflectrm"], ["on inconsistent", s.on_inconsistent], ["run", d.run === null ? "–" : d.run]];
    box.appendChild(el("div", "settings-title", "Run settings"));
    var dl = el("dl");
    rows.forEach(function (r) { if (r[1] === undefined) return; add(dl, el("dt", null, r[0]), el("dd", null, r[1] === null ? "–" : r[1])); });
    box.appendChild(dl);
    return box;
  }

  function reviewBar(i) {
    var bar = el("div", "review");
    bar.appendChild(el("span", "muted", "your mark:"));
    [["A", "a"], ["B", "b"], ["tie", "t"], ["skip", "s"]].forEach(function (x) {
      var b = el("button", "mark" + (S.marks[markKey(i)] === x[0] ? " on" : ""));
      b.type = "button";
      b.dataset.mark = x[0];
      add(b, x[0] + " ", el("kbd", null, x[1]));
      b.addEventListener("click", function () { setMark(i, x[0]); });
      bar.appendChild(b);
    });
    return bar;
  }

  function renderPair(i, d) {
    var pv = $("pair-view");
    clear(pv);
    var nav = el("div", "pair-nav");
    var back = el("button", "mini", "← list"); back.type = "button";
    back.addEventListener("click", closePair);
    var prev = el("button", "mini", "↑ previous"); prev.type = "button";
    prev.addEventListener("click", function () { step(-1); });
    var next = el("button", "mini", "↓ next"); next.type = "button";
    next.addEventListener("click", function () { step(1); });
    var at = S.view.indexOf(i);
    add(nav, back, prev, next, el("span", "muted", at >= 0 ? (at + 1) + " of " + S.view.length + " in the list" : "not in the filtered list"));
    var ofPrompt = R.on && d.columns ? d.columns.filter(function (c) { return c[0] === "prompt_id"; })[0] : null;
    if (ofPrompt) {
      if (R.open >= 0) back.textContent = "← prompt";
      var up = el("button", "mini", "↑ prompt " + ofPrompt[1]); up.type = "button"; up.dataset.prompt = String(ofPrompt[1]);
      up.addEventListener("click", function () { goPrompt(String(ofPrompt[1])); });
      nav.insertBefore(up, prev);
    }
    pv.appendChild(nav);
    var head = el("div", "pair-head");
    var title = el("h2", "pid");
    add(title, d.kind === "error" ? "Error row " + inputRow(d.row) : ofPrompt ? "Comparison " : "Pair ", d.kind === "error" ? null : el("span", "mono", d.id));
    head.appendChild(title);
    if (d.kind === "error") {
      pv.appendChild(head);
      var e = d.error || {};
      var box = el("div", "errbox");
      add(box, el("div", "role", "reason"), el("p", null, e.reason), el("div", "role", "raw row"), el("pre", "raw", e.raw === null || e.raw === undefined ? "" : e.raw));
      if (d.id) add(box, el("div", "role", "id"), el("p", "mono", d.id));
      pv.appendChild(box);
      return;
    }
    var facts = el("div", "facts");
    var cand = {};
    (d.columns || []).forEach(function (c) { if (c[0] === "cand_a" || c[0] === "cand_b") cand[c[0]] = c[1]; });
    add(facts, el("span", "kv", "row " + inputRow(d.row)), ofPrompt && cand.cand_a !== undefined ? el("span", "kv", "candidate #" + cand.cand_a + " as A, #" + cand.cand_b + " as B") : null,
        el("span", "kv", "gold"), badge(d.label),
        el("span", "kv", "verdict"), badge(d.verdict), el("span", "kv", "vote share A " + fmt(d.p_a, 2)));
    var stored = col("human", i);
    if (stored !== null) add(facts, el("span", "kv", "human label (store)"), badge(stored));
    if (d.consistent === false) facts.appendChild(el("span", "flag fI", "the orders disagree" + (d.policy ? ": " + d.policy : "")));
    head.appendChild(facts);
    head.appendChild(reviewBar(i));
    if (d.columns && d.columns.length) {
      var cols = el("div", "columns");
      d.columns.forEach(function (c) { add(cols, el("span", "colname", c[0]), el("span", "colval", c[1] === null ? "null" : c[1])); });
      head.appendChild(collapsible("Input columns (" + d.columns.length + ")", function () { return cols; }, false));
    }
    var top = el("div", "pair-top");
    add(top, head, settingsCorner(d));
    pv.appendChild(top);
    pv.appendChild(el("h3", "sect", "Prompt"));
    pv.appendChild(conversation(d));
    pv.appendChild(el("h3", "sect", "Responses"));
    var two = el("div", "two");
    add(two, responseBox("A" + (cand.cand_a !== undefined ? " · candidate #" + cand.cand_a : ""), d.a),
        responseBox("B" + (cand.cand_b !== undefined ? " · candidate #" + cand.cand_b : ""), d.b));
    pv.appendChild(two);
    pv.appendChild(el("h3", "sect", "Judgment"));
    var comb = el("p", "combine");
    var va = d.verdict_ab, vb = d.verdict_ba;
    add(comb, "Order (A, B) says ", badge(va), ", order (B, A) says ", badge(vb), ": " +
        (d.consistent === true ? "they agree" : d.consistent === false ? "they disagree" + (d.policy ? ", settled by --on-inconsistent " + d.policy : "") : "one order only") +
        " → verdict ", badge(d.verdict), "; vote share for A " + fmt(d.p_a, 2) + " (the mean of the orders' shares)" +
        (d.label === "A" || d.label === "B" ? "; gold " + d.label : "") + ".");
    pv.appendChild(comb);
    pv.appendChild(orderSection(d, "ab"));
    pv.appendChild(orderSection(d, "ba"));
  }

  function openItem(i, push) {
    S.open = i;
    var pos = S.view.indexOf(i);
    if (pos >= 0) S.sel = pos;
    if (push !== false) {
      // opening from the list adds a history entry (Back returns to the list); moving from
      // pair to pair replaces it
      var h = "#" + keyOf(i);
      if (location.hash !== h) {
        if (push === "push") history.pushState(null, "", h); else history.replaceState(null, "", h);
      }
    }
    $("list-view").hidden = true;
    hidePrompts();
    var pv = $("pair-view");
    pv.hidden = false;
    clear(pv);
    pv.appendChild(el("p", "muted", "Loading…"));
    detailOf(i).then(function (d) {
      if (S.open !== i) return;
      renderPair(i, d);
      window.scrollTo(0, 0);
      document.body.dataset.opened = keyOf(i);
    }, function (e) { fail(e.message); });
  }

  function closePair() {
    S.open = -1;
    $("pair-view").hidden = true;
    delete document.body.dataset.opened;
    if (R.on && R.open >= 0) { openPrompt(R.open, false); history.replaceState(null, "", "#" + pKeyOf(R.open)); return; }
    history.replaceState(null, "", "#");
    if (R.on && R.tab === "prompts") { showPromptList(); return; }
    $("list-view").hidden = false;
    renderList(true);
    $("list").focus();
  }

  function step(d) {
    if (!S.view.length) return;
    S.sel = Math.max(0, Math.min(S.view.length - 1, S.sel + d));
    if (S.open >= 0) openItem(S.view[S.sel]);
    else renderList(true);
  }

  function fromHash() {
    var h = location.hash.replace(/^#/, "");
    var m = /^pair=(.*)$/.exec(h), r = /^row=(\d+)$/.exec(h);
    var i;
    if (R.on && promptFromHash(h)) return;
    if (m) {
      try { i = S.byKey.get("p" + decodeURIComponent(m[1])); } catch (e) { i = undefined; }
    } else if (r) {
      i = S.byKey.get("r" + r[1]);
    }
    if (i !== undefined) { if (S.open !== i) openItem(i, false); return; }
    if (S.open >= 0) { R.open = -1; closePair(); }
    else if (R.on && R.open >= 0) closePrompt();
  }

  // -- review marks ----------------------------------------------------------------------------
  function storageKey(what) { return "rmjudge-view:" + what + ":" + S.meta.key; }
  function loadMarks() {
    try { S.marks = JSON.parse(localStorage.getItem(storageKey("marks")) || "{}") || {}; } catch (e) { S.marks = {}; }
    if (typeof S.marks !== "object" || Array.isArray(S.marks)) S.marks = {};
    var m = Object.create(null);
    for (var k in S.marks) if (Object.prototype.hasOwnProperty.call(S.marks, k)) m[k] = S.marks[k];
    S.marks = m;
    try { $("reviewer").value = localStorage.getItem("rmjudge-view:reviewer") || ""; } catch (e) { /* storage off */ }
  }
  function saveMarks() {
    try { localStorage.setItem(storageKey("marks"), JSON.stringify(S.marks)); } catch (e) { /* storage off: marks last until the tab closes */ }
    updateDownload();
  }
  function setMark(i, v) {
    if (isRow(i)) return;
    if (v === null) delete S.marks[markKey(i)]; else S.marks[markKey(i)] = v;
    saveMarks();
    if (S.open >= 0) {
      var bar = document.querySelectorAll(".review .mark");
      for (var k = 0; k < bar.length; k++) bar[k].classList.toggle("on", bar[k].dataset.mark === v);
      if (v !== null) setTimeout(function () { if (S.open === i) step(1); }, 120);
    } else renderList(false);
  }
  function updateDownload() {
    var n = Object.keys(S.marks).length;
    $("download").textContent = "Download labels (" + n + ")";
    $("download").disabled = n === 0;
  }
  function download() {
    var ids = Object.keys(S.marks);
    var need = {};
    ids.forEach(function (id) { var i = S.byKey.get("p" + id); if (i !== undefined) need[Math.floor(i / S.meta.chunks.detail_size)] = true; });
    var reviewer = $("reviewer").value.trim();
    Promise.all(Object.keys(need).map(function (k) { return loadDetail(Number(k)); })).then(function () {
      var lines = [];
      ids.forEach(function (id) {
        var i = S.byKey.get("p" + id);
        if (i === undefined) return;
        var k = Math.floor(i / S.meta.chunks.detail_size), d = S.detail[k][i - k * S.meta.chunks.detail_size];
        var v = S.marks[id];
        var row = { id: id, human_label: v === "skip" ? null : v, slot_key: d.slot_key };
        if (reviewer) row.reviewer = reviewer;
        lines.push(JSON.stringify(row));
      });
      var blob = new Blob([lines.join("\n") + "\n"], { type: "application/x-ndjson" });
      var a = document.createElement("a");
      a.href = URL.createObjectURL(blob);
      a.download = S.meta.labels_file;
      document.body.appendChild(a);
      a.click();
      setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
      document.body.dataset.downloaded = String(lines.length);
    }, function (e) { fail(e.message); });
  }

  // -- state in the page's storage (filters survive a reload) ------------------------------------
  function saveState() {
    try {
      localStorage.setItem(storageKey("state"), JSON.stringify({ filters: S.filters, sort: S.sort, margin: S.margin, group: S.group }));
    } catch (e) { /* storage off */ }
  }
  function loadState() {
    var st = null;
    try { st = JSON.parse(localStorage.getItem(storageKey("state")) || "null"); } catch (e) { st = null; }
    if (!st || typeof st !== "object") return;
    CHIPS.forEach(function (c) { if (st.filters && st.filters[c[0]] === true) S.filters[c[0]] = true; });
    if (typeof st.sort === "string" && $("sort").querySelector("option[value='" + st.sort.replace(/[^a-z-]/g, "") + "']")) S.sort = st.sort;
    if (typeof st.margin === "number" && st.margin >= 0 && st.margin <= 0.5) S.margin = st.margin;
    if (st.group && typeof st.group === "object") for (var g = 0; g < S.meta.groups.length; g++) if (typeof st.group[g] === "string") S.group[g] = st.group[g];
  }

  // -- a ranked store: its prompts ---------------------------------------------------------------
  // The prompts of `rmjudge rank` (data/plist-K.js, pdetail-K.js, ptext-K.js): a list of prompts
  // with its own filters and search, and for each prompt its candidates in rank order and the
  // K x K results of their comparisons, each cell opening that comparison as a pair.
  var R = { on: false, tab: "prompts", n: 0, cols: null, parts: [], view: [], sel: 0, open: -1,
            filters: {}, group: {}, query: "", lowconf: 0.6, sort: "row", byKey: new Map(),
            detail: {}, detailWait: {}, detailResolve: {}, text: {}, textLoaded: 0, textStarted: false,
            hits: { q: null, done: {}, bits: null } };
  var PF = {};

  api.plist = function (k, c) {
    R.parts[k] = c;
    if (--S.waiting === 0) start();
  };
  api.pdetail = function (k, rows) {
    R.detail[k] = rows;
    if (R.detailResolve[k]) R.detailResolve[k](rows);
  };
  api.ptext = function (k, texts) {
    R.text[k] = texts;
    R.textLoaded++;
    if (R.query) refreshPrompts(false);
  };

  function pdetailOf(i) {
    var size = S.meta.chunks.detail_size, k = Math.floor(i / size);
    if (!R.detail[k] && !R.detailWait[k]) {
      R.detailWait[k] = new Promise(function (resolve, reject) {
        R.detailResolve[k] = resolve;
        loadScript(chunkName("pdetail", k), function () {
          delete R.detailWait[k];
          reject(new Error("cannot read " + chunkName("pdetail", k) + ": was the folder moved or cut short? Run rmjudge view again."));
        });
      });
    }
    var got = R.detail[k] ? Promise.resolve(R.detail[k]) : R.detailWait[k];
    return got.then(function (rows) { return rows[i - k * size]; });
  }

  // the user's input row of an item: a ranked store numbers a comparison input row * stride + n
  function inputRow(row) {
    var st = R.on && S.meta.ranked ? S.meta.ranked.row_stride : 0;
    return st && row !== null ? Math.floor(row / st) : row;
  }
  function plural(n, one, many) { return n.toLocaleString("en-US") + " " + (n === 1 ? one : (many || one + "s")); }
  function pIsRow(i) { return (R.cols.flags[i] & PF.error_row) !== 0; }
  function pKeyOf(i) { return pIsRow(i) ? "prompt-row=" + R.cols.row[i] : "prompt=" + encodeURIComponent(R.cols.id[i]); }
  function pIsError(i) { return (R.cols.flags[i] & (PF.error_row | PF.failed | PF.unjudged)) !== 0; }

  var PCHIPS = [
    ["disagree", "top-1 disagrees with gold", function (i) { return (R.cols.flags[i] & PF.disagree) !== 0; }],
    ["lowconf", "low confidence", function (i) { var c = R.cols.top_conf[i]; return c !== null && c <= R.lowconf + 1e-12; }],
    ["errors", "errors", pIsError],
    ["nogold", "no gold", function (i) { return !pIsRow(i) && (R.cols.flags[i] & PF.no_gold) !== 0; }]
  ];

  function startPrompts() {
    var m = S.meta.ranked;
    R.on = true;
    PF = m.flags;
    R.cols = { id: [], row: [], k: [], top: [], top_score: [], top_conf: [], top_gold: [], gold_best: [],
               compared: [], flags: [], prompt: [], groups: m.groups.map(function () { return []; }) };
    R.parts.forEach(function (p) {
      for (var name in R.cols) {
        if (name === "groups") { for (var g = 0; g < p.groups.length; g++) Array.prototype.push.apply(R.cols.groups[g], p.groups[g]); }
        else Array.prototype.push.apply(R.cols[name], p[name]);
      }
    });
    R.parts = null;
    R.n = m.count;
    for (var i = 0; i < R.n; i++) R.byKey.set(pIsRow(i) ? "r" + R.cols.row[i] : "p" + R.cols.id[i], i);
    $("tabs").hidden = false;
    $("tab-prompts").textContent = "Prompts (" + m.prompts.toLocaleString("en-US") + (m.errors ? " + " + plural(m.errors, "not ranked", "not ranked") : "") + ")";
    $("tab-pairs").textContent = "Comparisons (" + S.meta.pairs.toLocaleString("en-US") + ")";
    $("store").textContent = S.meta.store + " · ranked: " + plural(m.prompts, "prompt") + ", " +
      plural(S.meta.pairs, "comparison") + (m.strategy ? " (" + m.strategy + ")" : "");
    try {
      var st = JSON.parse(localStorage.getItem(storageKey("prompts")) || "null");
      if (st && typeof st === "object") {
        PCHIPS.forEach(function (c) { if (st.filters && st.filters[c[0]] === true) R.filters[c[0]] = true; });
        if (typeof st.lowconf === "number" && st.lowconf >= 0.5 && st.lowconf <= 1) R.lowconf = st.lowconf;
        if (st.sort === "row" || st.sort === "conf-asc" || st.sort === "conf-desc" || st.sort === "k-desc") R.sort = st.sort;
        if (st.tab === "pairs") R.tab = "pairs";
      }
    } catch (e) { /* storage off */ }
    $("psort").value = R.sort;
    $("lowconf").value = String(R.lowconf);
    var gbox = $("pgroups");
    m.groups.forEach(function (g, gi) {
      var sel = el("select");
      sel.title = g.name;
      sel.appendChild(new Option("all " + g.name, ""));
      g.values.forEach(function (v, k) { sel.appendChild(new Option(g.name + ": " + v, String(k))); });
      sel.addEventListener("change", function () { R.group[gi] = sel.value; refreshPrompts(); });
      gbox.appendChild(sel);
    });
    var head = $("plist-head");
    [["row", "row", "the prompt's row in the input"], ["id", "prompt", "the prompt id"], ["group", "group", "source and subset"],
     ["k", "K", "candidates"], ["top", "top", "the top-ranked candidate (its number in the input)"],
     ["conf", "confidence", "the Bradley-Terry probability that the top candidate beats the second"],
     ["gold", "gold of top", "the gold rank of the top-ranked candidate (1: a gold best)"],
     ["cmp", "compared", "comparisons stored"], ["flags", "flags", "top-1 against gold, errors"],
     ["text", "prompt text", "the prompt's last user turn"]].forEach(function (c) {
      var e = el("span", "c c-" + c[0], c[1]); e.title = c[2]; head.appendChild(e);
    });
    $("tab-prompts").addEventListener("click", function () { setTab("prompts"); });
    $("tab-pairs").addEventListener("click", function () { setTab("pairs"); });
    $("plist").addEventListener("scroll", function () { renderPrompts(false); });
    window.addEventListener("resize", function () { renderPrompts(false); });
    $("plist").addEventListener("click", function (e) {
      var row = e.target.closest(".row");
      if (!row) return;
      R.sel = Number(row.dataset.pos);
      openPrompt(R.view[R.sel], "push");
    });
    var timer = null;
    $("psearch").addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () {
        R.query = $("psearch").value.trim().toLowerCase();
        if (R.query && !R.textStarted) {
          R.textStarted = true;
          for (var k = 0; k < m.chunks.text; k++) loadScript(chunkName("ptext", k));
        }
        refreshPrompts();
      }, 150);
    });
    $("psort").addEventListener("change", function () { R.sort = $("psort").value; refreshPrompts(); savePromptState(); });
    $("lowconf").addEventListener("input", function () {
      var v = parseFloat($("lowconf").value);
      if (v >= 0.5 && v <= 1) { R.lowconf = v; refreshPrompts(); savePromptState(); }
    });
    refreshPrompts();
    if (R.tab === "pairs") {
      $("tab-pairs").classList.add("on");
      $("tab-prompts").classList.remove("on");
    } else showPromptList();
  }

  function savePromptState() {
    try { localStorage.setItem(storageKey("prompts"), JSON.stringify({ filters: R.filters, lowconf: R.lowconf, sort: R.sort, tab: R.tab })); }
    catch (e) { /* storage off */ }
  }

  function setTab(t) {
    R.tab = t;
    savePromptState();
    if (S.open >= 0 || R.open >= 0) { S.open = -1; R.open = -1; history.replaceState(null, "", "#"); $("pair-view").hidden = true; delete document.body.dataset.opened; }
    if (t === "prompts") showPromptList();
    else { hidePrompts(); $("tab-pairs").classList.add("on"); $("tab-prompts").classList.remove("on"); $("list-view").hidden = false; renderList(true); $("list").focus(); }
  }

  // the footer's keys follow what is shown: prompts have no marks
  function setMode(m) { document.body.dataset.mode = m; }

  function hidePrompts() {
    if (!R.on) return;
    setMode("pairs");
    $("prompts-view").hidden = true;
    $("prompt-view").hidden = true;
  }

  function showPromptList() {
    setMode("prompts");
    $("list-view").hidden = true;
    $("pair-view").hidden = true;
    $("prompt-view").hidden = true;
    $("prompts-view").hidden = false;
    $("tab-prompts").classList.add("on");
    $("tab-pairs").classList.remove("on");
    renderPrompts(true);
    $("plist").focus();
  }

  function promptHits(q) {
    var h = R.hits;
    if (h.q !== q) {
      h = R.hits = { q: q, done: {}, bits: new Uint8Array(R.n) };
      for (var i = 0; i < R.n; i++) { var id = R.cols.id[i]; if (id !== null && String(id).toLowerCase().indexOf(q) >= 0) h.bits[i] = 1; }
    }
    var size = S.meta.chunks.text_size;
    for (var k in R.text) {
      if (h.done[k]) continue;
      var t = R.text[k], base = Number(k) * size;
      for (var j = 0; j < t.length; j++) if (t[j].indexOf(q) >= 0) h.bits[base + j] = 1;
      h.done[k] = true;
    }
    return h.bits;
  }

  function refreshPrompts(keepSel) {
    var q = R.query, hit = q ? promptHits(q) : null, on = [], chipCount = {};
    PCHIPS.forEach(function (c, n) { chipCount[c[0]] = 0; if (R.filters[c[0]]) on.push(n); });
    var prev = R.view.length && R.sel < R.view.length ? R.view[R.sel] : -1, view = [];
    for (var i = 0; i < R.n; i++) {
      var ok = true;
      for (var g in R.group) if (R.group[g] !== "" && String(R.cols.groups[g][i]) !== R.group[g]) ok = false;
      if (!ok || (hit && !hit[i])) continue;
      if (on.some(function (n) { return !PCHIPS[n][2](i); })) continue;
      view.push(i);
      PCHIPS.forEach(function (c) { if (c[2](i)) chipCount[c[0]]++; });
    }
    if (R.sort !== "row") {
      var key = R.sort === "k-desc" ? function (i) { return R.cols.k[i] === null ? -1 : -R.cols.k[i]; }
        : function (i) { var c = R.cols.top_conf[i]; return c === null ? Infinity : (R.sort === "conf-desc" ? -c : c); };
      view.sort(function (x, y) { return (key(x) - key(y)) || x - y; });
    }
    R.view = view;
    R.sel = 0;
    if (keepSel !== false && prev >= 0 && view.indexOf(prev) >= 0) R.sel = view.indexOf(prev);
    var box = $("pchips"), keep = $("lowconf-box");
    clear(box);
    PCHIPS.forEach(function (c) {
      var b = el("button", "chip" + (R.filters[c[0]] ? " on" : ""));
      b.type = "button";
      b.dataset.chip = c[0];
      add(b, c[1] + " ", el("span", "n", chipCount[c[0]].toLocaleString("en-US")));
      b.addEventListener("click", function () { R.filters[c[0]] = !R.filters[c[0]]; refreshPrompts(); savePromptState(); });
      box.appendChild(b);
      if (c[0] === "lowconf") box.appendChild(keep);
    });
    $("pcount").textContent = view.length.toLocaleString("en-US") + " of " + R.n.toLocaleString("en-US") + " prompts shown";
    var nt = S.meta.ranked.chunks.text;
    $("psearch-status").textContent = q ? (R.textLoaded < nt ? "searching the texts… " + R.textLoaded + " / " + nt + " parts read"
                                                            : "searched ids, prompts and candidates") : "";
    $("plist-inner").style.height = (view.length * S.rowH) + "px";
    renderPrompts(true);
  }

  function goldBadge(i) {
    var g = R.cols.top_gold[i];
    if (g === null) return el("span", "b bN", "–");
    return el("span", "b " + (g === 1 ? "bOK" : "bE"), g === 1 ? "1 ✓" : g + " ✗");
  }

  function confBar(p) {
    var w = el("span", "share");
    if (p === null) { w.appendChild(el("span", "muted", "–")); return w; }
    var bar = el("span", "bar cbar"), fill = el("span", "fill");
    fill.style.width = (100 * p).toFixed(0) + "%";
    bar.appendChild(fill);
    add(w, bar, el("span", "num", fmt(p, 2)));
    return w;
  }

  function renderPrompts(scrollToSel) {
    var box = $("plist"), inner = $("plist-inner");
    if ($("prompts-view").hidden) return;
    if (scrollToSel) {
      var top = R.sel * S.rowH;
      if (top < box.scrollTop) box.scrollTop = top;
      else if (top + S.rowH > box.scrollTop + box.clientHeight) box.scrollTop = top - box.clientHeight + S.rowH;
    }
    var first = Math.max(0, Math.floor(box.scrollTop / S.rowH) - 5);
    var last = Math.min(R.view.length, Math.ceil((box.scrollTop + box.clientHeight) / S.rowH) + 5);
    clear(inner);
    for (var r = first; r < last; r++) {
      var i = R.view[r], f = R.cols.flags[i];
      var row = el("div", "row prow" + (r === R.sel ? " sel" : "") + (pIsRow(i) ? " errrow" : ""));
      row.style.transform = "translateY(" + (r * S.rowH) + "px)";
      row.dataset.pos = r;
      var groups = S.meta.ranked.groups.map(function (g, gi) { var c = R.cols.groups[gi][i]; return c < 0 ? null : g.values[c]; })
        .filter(function (x) { return x !== null; }).join(" · ");
      var flags = el("span", "flags");
      if (f & PF.error_row) flags.appendChild(el("span", "flag fE", "not ranked"));
      if (f & PF.failed) flags.appendChild(el("span", "flag fE", "judge failed"));
      if (f & PF.unjudged) flags.appendChild(el("span", "flag fU", "no verdict"));
      if (f & PF.disagree) flags.appendChild(el("span", "flag fI", "top-1 ≠ gold"));
      add(row,
        el("span", "c c-row", R.cols.row[i]),
        el("span", "c c-id", R.cols.id[i] === null || R.cols.id[i] === "" ? "(no id)" : R.cols.id[i]),
        el("span", "c c-group", groups),
        el("span", "c c-k", R.cols.k[i] === null ? "–" : R.cols.k[i]),
        el("span", "c c-top mono", R.cols.top[i] === null ? "–" : "#" + R.cols.top[i]),
        add(el("span", "c c-conf"), confBar(R.cols.top_conf[i])),
        add(el("span", "c c-gold"), goldBadge(i)),
        el("span", "c c-cmp", R.cols.compared[i]),
        add(el("span", "c c-flags"), flags),
        el("span", "c c-text", R.cols.prompt[i] === null ? "" : R.cols.prompt[i]));
      inner.appendChild(row);
    }
    if (!R.view.length) inner.appendChild(el("div", "empty", "No prompt matches the filters."));
  }

  function goPrompt(id) {
    var i = R.byKey.get("p" + id);
    if (i === undefined) return;
    S.open = -1;
    $("pair-view").hidden = true;
    delete document.body.dataset.opened;
    openPrompt(i, "push");
  }

  function openPrompt(i, push) {
    R.open = i;
    var pos = R.view.indexOf(i);
    if (pos >= 0) R.sel = pos;
    if (push) {
      var h = "#" + pKeyOf(i);
      if (location.hash !== h) { if (push === "push") history.pushState(null, "", h); else history.replaceState(null, "", h); }
    }
    $("list-view").hidden = true;
    $("prompts-view").hidden = true;
    $("pair-view").hidden = true;
    setMode("prompts");
    var pv = $("prompt-view");
    pv.hidden = false;
    clear(pv);
    pv.appendChild(el("p", "muted", "Loading…"));
    pdetailOf(i).then(function (d) {
      if (R.open !== i || S.open >= 0) return;
      renderPrompt(i, d);
      window.scrollTo(0, 0);
      document.body.dataset.opened = pKeyOf(i);
    }, function (e) { fail(e.message); });
  }

  function closePrompt() {
    R.open = -1;
    history.replaceState(null, "", "#");
    delete document.body.dataset.opened;
    if (R.tab === "prompts") showPromptList(); else setTab("pairs");
  }

  function promptStep(d) {
    if (!R.view.length) return;
    R.sel = Math.max(0, Math.min(R.view.length - 1, R.sel + d));
    if (R.open >= 0) openPrompt(R.view[R.sel], "replace"); else renderPrompts(true);
  }

  function promptFromHash(h) {
    var m = /^prompt=(.*)$/.exec(h), r = /^prompt-row=(\d+)$/.exec(h), i;
    if (m) { try { i = R.byKey.get("p" + decodeURIComponent(m[1])); } catch (e) { i = undefined; } }
    else if (r) i = R.byKey.get("r" + r[1]);
    else return false;
    if (i === undefined) return false;
    if (S.open >= 0) { S.open = -1; $("pair-view").hidden = true; }
    if (R.open !== i || $("prompt-view").hidden) openPrompt(i, false);
    return true;
  }

  function promptKey(e) {
    var k = e.key;
    if (k === "j" || k === "ArrowDown") { promptStep(1); e.preventDefault(); }
    else if (k === "k" || k === "ArrowUp") { promptStep(-1); e.preventDefault(); }
    else if (k === "PageDown" && R.open < 0) { promptStep(Math.floor($("plist").clientHeight / S.rowH)); e.preventDefault(); }
    else if (k === "PageUp" && R.open < 0) { promptStep(-Math.floor($("plist").clientHeight / S.rowH)); e.preventDefault(); }
    else if ((k === "Enter" || k === "o") && R.open < 0 && R.view.length) { openPrompt(R.view[R.sel], "push"); e.preventDefault(); }
    else if ((k === "Escape" || k === "u") && R.open >= 0) { closePrompt(); e.preventDefault(); }
    else if (k === "/") { if (R.open >= 0) closePrompt(); $("psearch").focus(); e.preventDefault(); }
  }

  // the outcome of candidate x against y from one stored comparison, from x's side
  function outcome(g, x) {
    var v = g[3], winner = v === "A" ? g[0] : v === "B" ? g[1] : null;
    if (v === "tie") return ["½", "tie", "a tie: the orders disagree, or the judge said tie"];
    if (v === "failed") return ["?", "none", "the judge failed on it (its row in the errors table)"];
    if (winner === null) return ["?", "none", "no verdict (" + (v === null || v === undefined ? "not judged" : v) + ")"];
    return winner === x ? ["W", "win", "won"] : ["L", "loss", "lost"];
  }

  function renderPrompt(i, d) {
    var pv = $("prompt-view");
    clear(pv);
    var nav = el("div", "pair-nav");
    var back = el("button", "mini", "← prompts"); back.type = "button";
    back.addEventListener("click", closePrompt);
    var prev = el("button", "mini", "↑ previous"); prev.type = "button";
    prev.addEventListener("click", function () { promptStep(-1); });
    var next = el("button", "mini", "↓ next"); next.type = "button";
    next.addEventListener("click", function () { promptStep(1); });
    var at = R.view.indexOf(i);
    add(nav, back, prev, next, el("span", "muted", at >= 0 ? (at + 1) + " of " + R.view.length + " in the list" : "not in the filtered list"));
    pv.appendChild(nav);
    var title = el("h2", "pid");
    add(title, d.kind === "error" ? "Prompt on row " + d.row + " (not ranked)" : "Prompt ", d.kind === "error" ? null : el("span", "mono", d.id));
    pv.appendChild(title);
    if (d.kind === "error") {
      var e = d.error || {}, box = el("div", "errbox");
      add(box, el("div", "role", "reason"), el("p", null, e.reason), el("div", "role", "raw row"),
          el("pre", "raw", e.raw === null || e.raw === undefined ? "" : e.raw));
      pv.appendChild(box);
      return;
    }
    var total = d.k * (d.k - 1) / 2, judged = d.games.filter(function (g) { return g[3] === "A" || g[3] === "B" || g[3] === "tie"; }).length;
    var facts = el("div", "facts");
    add(facts, el("span", "kv", "row " + d.row), el("span", "kv", d.k + " candidates"),
        el("span", "kv", d.games.length + " of " + total + " pairs compared, " + judged + " with a verdict"),
        el("span", "kv", "gold: " + (d.gold_kind || "none")));
    if (d.failed) facts.appendChild(el("span", "flag fE", d.failed + " comparison" + (d.failed === 1 ? "" : "s") + " failed (errors table)"));
    var topc = d.candidates[0], gold = topc[8];
    if (gold !== null) facts.appendChild(el("span", "flag " + (gold === 1 ? "fW" : "fI"), gold === 1 ? "top-1 is a gold best" : "top-1 has gold rank " + gold));
    pv.appendChild(facts);
    if (d.columns && d.columns.length) {
      var cols = el("div", "columns");
      d.columns.forEach(function (c) { add(cols, el("span", "colname", c[0]), el("span", "colval", c[1] === null ? "null" : c[1])); });
      pv.appendChild(collapsible("Input columns (" + d.columns.length + ")", function () { return cols; }, false));
    }
    pv.appendChild(el("h3", "sect", "Prompt"));
    var conv = conversation({ messages: JSON.stringify(d.messages), prompt: "" });
    conv.classList.add("clip");  // a long prompt scrolls in its box: the ranking stays in view
    pv.appendChild(conv);
    pv.appendChild(el("h3", "sect", "Candidates in rank order"));
    var tbl = el("table", "cands"), thead = el("tr");
    [["rank", "1 = best"], ["candidate", "its number in the input (0 = first)"], ["score", "Bradley-Terry log-strength"],
     ["W / L / T", "comparisons won, lost, tied (orders disagreeing)"], ["no verdict", "comparisons without a verdict"],
     ["confidence", "the probability that it beats the candidate ranked just below (the last: that the one above beats it)"],
     ["gold rank", "1 = a gold best"], ["response", ""]].forEach(function (h) { var th = el("th", null, h[0]); th.title = h[1]; thead.appendChild(th); });
    tbl.appendChild(thead);
    d.candidates.forEach(function (c) {
      var tr = el("tr", "cand");
      tr.dataset.candidate = c[0];
      var gb = c[8] === null ? el("span", "b bN", "–") : el("span", "b " + (c[8] === 1 ? "bOK" : "bT"), String(c[8]));
      var text = c[9];
      var cell = el("td", "ctext");
      if (text === null) cell.appendChild(el("span", "muted", "(in no stored comparison)"));
      // the text in its own bidi isolate: a right-to-left override in it (U+202E, U+2067 ...)
      // stops at its end instead of reversing the label beside it
      else cell.appendChild(collapsible(add(el("span", "pv"), el("bdi", null, preview(text)), " (" + String(text).length + " chars)"), function () { return markdown(text); }, false));
      add(tr, el("td", "num rank", c[1]), el("td", "mono", "#" + c[0]), el("td", "num", fmt(c[2], 3)),
          el("td", "num", c[3] + " / " + c[4] + " / " + c[5]), el("td", "num", c[6]), add(el("td"), confBar(c[7])),
          add(el("td"), gb), cell);
      tbl.appendChild(tr);
    });
    pv.appendChild(tbl);
    pv.appendChild(el("h3", "sect", "Comparisons: the row's candidate against the column's"));
    var by = {};
    d.games.forEach(function (g) { by[g[0] + "," + g[1]] = g; by[g[1] + "," + g[0]] = g; });
    var order = d.candidates.map(function (c) { return c[0]; });
    var mx = el("table", "matrix"), hr = el("tr");
    hr.appendChild(el("th", "corner", "rank · cand."));
    order.forEach(function (c, n) { hr.appendChild(el("th", "mono", (n + 1) + " · #" + c)); });
    mx.appendChild(hr);
    order.forEach(function (x, n) {
      var tr = el("tr");
      tr.appendChild(el("th", "mono", (n + 1) + " · #" + x));
      order.forEach(function (y) {
        var td = el("td", "cell");
        if (x === y) { td.className = "cell self"; td.textContent = "·"; }
        else {
          var g = by[x + "," + y];
          if (!g) { td.className = "cell none"; td.textContent = ""; td.title = "not compared"; }
          else {
            var o = outcome(g, x), btn = el("button", "res " + o[1], o[0]);
            btn.type = "button";
            if (g[2] !== null) {
              btn.dataset.pair = g[2];
              btn.title = "#" + x + " against #" + y + ": " + o[2] + "; order (A, B) " + (g[4] || "–") + ", order (B, A) " + (g[5] || "–") +
                " (A is #" + g[0] + "); vote share for A " + fmt(g[6], 2) + ". Open the comparison " + g[2];
            } else {
              btn.dataset.row = g[7];
              btn.title = "#" + x + " against #" + y + ": " + o[2] + ". Open its error row";
            }
            btn.addEventListener("click", function () {
              var pi = g[2] !== null ? S.byKey.get("p" + g[2]) : S.byKey.get("r" + g[7]);
              if (pi !== undefined) openItem(pi, "push");
            });
            td.appendChild(btn);
          }
        }
        tr.appendChild(td);
      });
      mx.appendChild(tr);
    });
    pv.appendChild(mx);
    pv.appendChild(el("p", "muted legend", "W: the row's candidate won the comparison (both orders, or the only judged one); L: lost; ½: a tie (its two orders disagree, or the judge said tie); ?: no verdict. Each cell opens the comparison with its rollouts, anchors, reflections and votes."));
  }

  // -- start -------------------------------------------------------------------------------------
  function start() {
    var m = S.meta;
    S.n = m.count;
    if (!S.cols) S.cols = { id: [], row: [], flags: [], groups: [] };
    for (var i = 0; i < S.n; i++) {
      S.byKey.set(S.cols.flags[i] & FLAG.error_row ? "r" + S.cols.row[i] : "p" + S.cols.id[i], i);
    }
    document.title = "rmjudge view: " + m.store_name;
    $("store").textContent = m.store + " · " + m.pairs.toLocaleString("en-US") + " pairs" +
      (m.errors ? ", " + m.errors.toLocaleString("en-US") + " error rows" : "");
    if (typeof m.report === "string" && !/^[a-z][a-z0-9+.-]*:/i.test(m.report)) {
      var a = $("report-link"); a.href = m.report; a.hidden = false;
    }
    loadMarks();
    loadState();
    $("sort").value = S.sort;
    $("margin").value = String(S.margin);
    var gbox = $("groups");
    m.groups.forEach(function (g, gi) {
      var sel = el("select");
      sel.title = g.name;
      sel.appendChild(new Option("all " + g.name, ""));
      g.values.forEach(function (v, k) { sel.appendChild(new Option(g.name + ": " + v, String(k))); });
      if (S.group[gi] !== undefined) sel.value = S.group[gi];
      sel.addEventListener("change", function () { S.group[gi] = sel.value; refresh(); saveState(); });
      gbox.appendChild(sel);
    });
    // groups are compared as code strings
    for (var gi2 = 0; gi2 < S.cols.groups.length; gi2++) {
      var arr = S.cols.groups[gi2];
      for (var j = 0; j < arr.length; j++) arr[j] = String(arr[j]);
    }
    renderHead();
    bind();
    updateDownload();
    S.ready = true;
    $("loading").hidden = true;
    refresh();
    document.body.dataset.ready = "1";
    if (window.performance && performance.mark) performance.mark("rmjudge-list-ready");
    if (m.ranked) startPrompts();
    if (location.hash.length > 1) fromHash();
    else if (R.on && R.tab === "prompts") $("plist").focus();
    else $("list").focus();
  }

  var searchTimer = null;
  function bind() {
    $("list").addEventListener("scroll", function () { renderList(false); });
    window.addEventListener("resize", function () { renderList(false); });
    $("list").addEventListener("click", function (e) {
      var row = e.target.closest(".row");
      if (!row) return;
      S.sel = Number(row.dataset.pos);
      openItem(S.view[S.sel], "push");
    });
    $("search").addEventListener("input", function () {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(function () {
        S.query = $("search").value.trim().toLowerCase();
        if (S.query) loadTexts();
        refresh();
      }, 150);
    });
    $("sort").addEventListener("change", function () { S.sort = $("sort").value; refresh(); saveState(); });
    $("margin").addEventListener("input", function () {
      var v = parseFloat($("margin").value);
      if (v >= 0 && v <= 0.5) { S.margin = v; refresh(); saveState(); }
    });
    $("download").addEventListener("click", download);
    $("reviewer").addEventListener("change", function () {
      try { localStorage.setItem("rmjudge-view:reviewer", $("reviewer").value.trim()); } catch (e) { /* storage off */ }
    });
    window.addEventListener("hashchange", fromHash);
    window.addEventListener("popstate", fromHash);
    document.addEventListener("keydown", function (e) {
      var t = e.target;
      if (t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA")) {
        var home = R.on && t.id === "psearch" ? $("plist") : $("list");
        if (e.key === "Escape") { t.blur(); home.focus(); }
        if (e.key === "Enter" && (t.id === "search" || t.id === "psearch")) { t.blur(); home.focus(); }
        return;
      }
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      if (t && (t.tagName === "BUTTON" || t.tagName === "SUMMARY" || t.tagName === "A") && (e.key === "Enter" || e.key === " ")) return;
      if (R.on && S.open < 0 && (R.open >= 0 || R.tab === "prompts")) { promptKey(e); return; }
      var k = e.key, cur = S.open >= 0 ? S.open : S.view[S.sel];
      if (k === "j" || k === "ArrowDown") { step(1); e.preventDefault(); }
      else if (k === "k" || k === "ArrowUp") { step(-1); e.preventDefault(); }
      else if (k === "PageDown" && S.open < 0) { step(Math.floor($("list").clientHeight / S.rowH)); e.preventDefault(); }
      else if (k === "PageUp" && S.open < 0) { step(-Math.floor($("list").clientHeight / S.rowH)); e.preventDefault(); }
      else if ((k === "Enter" || k === "o") && S.open < 0 && S.view.length) { openItem(S.view[S.sel], "push"); e.preventDefault(); }
      else if ((k === "Escape" || k === "u") && S.open >= 0) { closePair(); e.preventDefault(); }
      else if (k === "/") { if (S.open >= 0) closePair(); $("search").focus(); e.preventDefault(); }
      else if (cur !== undefined && S.view.length) {
        var mk = { a: "A", b: "B", t: "tie", s: "skip" }[k];
        if (mk) { setMark(cur, mk); e.preventDefault(); }
        else if (k === "x") { setMark(cur, null); e.preventDefault(); }
      }
    });
  }
})();
