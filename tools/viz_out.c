/* `attn viz` writers: SVG files (attn_viz_write_svg), a self-contained HTML page, CSV. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "attn/viz.h"
#include "safe_io.h"
#include "viz_out.h"

static int fail(char *err, size_t errsz, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int fail(char *err, size_t errsz, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errsz, fmt, ap);
    va_end(ap);
    return -1;
}

const char *viz_head_name(const viz_map *m, char *buf, size_t cap) {
    if (m->head == VIZ_HEAD_ROLLOUT)
        snprintf(buf, cap, "rollout");
    else if (m->head == VIZ_HEAD_MEAN)
        snprintf(buf, cap, "mean of %d heads", m->num_heads);
    else
        snprintf(buf, cap, "head %d", m->head);
    return buf;
}

/* path with "-tag" before its extension (the last '.' after the last '/'). */
static void tagged(const char *path, const char *tag, char *buf, size_t cap) {
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    if (!dot || (slash && dot < slash) || dot == path || (slash && dot == slash + 1)) dot = path + strlen(path);
    snprintf(buf, cap, "%.*s-%s%s", (int)(dot - path), path, tag, dot);
}

static double map_max(const viz_map *m) {
    double v = 0;
    for (int64_t k = 0; k < m->rows * m->cols; k++)
        if (m->w[k] > v) v = m->w[k];
    return v;
}

const char *viz_svg_file(const viz_set *s, int i, const char *path, char *buf, size_t cap) {
    const viz_map *m = &s->maps[i];
    char tag[64];
    if (m->head == VIZ_HEAD_ROLLOUT)
        snprintf(tag, sizeof tag, "rollout");
    else if (m->head == VIZ_HEAD_MEAN)
        snprintf(tag, sizeof tag, "L%d-mean", m->layer);
    else
        snprintf(tag, sizeof tag, "L%d-h%d", m->layer, m->head);
    if (s->count == 1)
        snprintf(buf, cap, "%s", path);
    else
        tagged(path, tag, buf, cap);
    return buf;
}

int viz_write_svgs(const viz_set *s, const char *path, FILE *out, char *err, size_t errsz) {
    for (int i = 0; i < s->count; i++) {
        const viz_map *m = &s->maps[i];
        char file[4096], head[64], title[1024], caption[512];
        viz_svg_file(s, i, path, file, sizeof file);
        snprintf(title, sizeof title, "%s: %s, %s", s->title, m->module, viz_head_name(m, head, sizeof head));
        const double vmax = map_max(m);
        int cn = snprintf(caption, sizeof caption, "%s", s->model);
        if (m->rows < m->nq || m->cols < m->nk)
            snprintf(caption + cn, sizeof caption - (size_t)cn,
                     "; window: queries %lld..%lld of %lld, keys %lld..%lld of %lld", (long long)m->r0,
                     (long long)(m->r0 + m->rows - 1), (long long)m->nq, (long long)m->c0,
                     (long long)(m->c0 + m->cols - 1), (long long)m->nk);
        attn_viz_heatmap h = attn_viz_heatmap_default();
        h.rows = m->rows;
        h.cols = m->cols;
        h.weights = m->w;
        h.row_labels = m->qlabels + m->r0;
        h.col_labels = m->klabels + m->c0;
        h.title = title;
        h.row_axis = m->head == VIZ_HEAD_ROLLOUT ? "output position" : "query";
        h.col_axis = m->head == VIZ_HEAD_ROLLOUT ? "input token" : "key";
        h.caption = caption;
        h.vmax = vmax > 0 ? vmax : 1;
        h.rotate_col_labels = 1;
        safe_file sf;
        FILE *f = safe_fopen(&sf, file, SAFE_KIND_SVG);
        if (!f) return fail(err, errsz, "%s: %s", file, attn_last_error());
        fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
        attn_status st = attn_viz_write_svg(f, &h);
        if (st) {
            fail(err, errsz, "%s: %s", file, attn_last_error());
            fclose(f);
            attn_io_out_abort(&sf.o);
            return -1;
        }
        if (safe_fclose(&sf, f)) return fail(err, errsz, "%s: %s", file, attn_last_error());
        if (out) fprintf(out, "wrote %s\n", file);
    }
    return 0;
}

/* A JavaScript string of text, as attn_viz_write_text makes every text of the outputs (valid
 * UTF-8, control characters visible, <, >, & escaped: safe in <script>). */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    attn_viz_write_text(f, s, ATTN_VIZ_JSON);
    fputc('"', f);
}

/* A weight in the page's data (a JavaScript literal: NaN and the infinities are kept, never drawn
 * as zeros). */
static void json_num(FILE *f, double v) {
    if (isnan(v))
        fputs("NaN", f);
    else if (isinf(v))
        fputs(v > 0 ? "Infinity" : "-Infinity", f);
    else if (fabs(v) < 5e-7)
        fputc('0', f);
    else
        fprintf(f, "%.4g", v);
}

static const char page_css[] =
    "body{font-family:Helvetica,Arial,sans-serif;margin:1.2em 2em;color:#222;background:#fff}\n"
    "h1{font-size:1.3em;margin:0 0 .3em}h2{font-size:1em;margin:.2em 0 .5em;color:#444}\n"
    ".model{color:#555;margin:.2em 0}.notice{background:#fff4d6;border:1px solid #e8c56d;padding:.4em .7em;"
    "display:inline-block;margin:.4em 0}\n"
    ".controls{margin:.8em 0;display:flex;gap:1.5em;align-items:center;flex-wrap:wrap}\n"
    "select{font-size:1em;padding:.1em .3em}#current{color:#08306b;font-weight:bold}\n"
    ".views{display:flex;gap:2em;align-items:flex-start;flex-wrap:wrap}\n"
    ".panel{border:1px solid #ddd;border-radius:4px;padding:.6em .8em}\n"
    "#hover{font-family:monospace;min-height:1.3em;margin-top:.4em}\n"
    "#lines text{font-size:12px;cursor:default}#lines text.q:hover{font-weight:bold;fill:#08306b}\n"
    "#status{color:#888;font-size:.85em;margin-top:1em}\n";

/* The page's script: reads VIZ (written before it). */
static const char *const page_js[] = {
    "(function () {\n"
    "'use strict';\n"
    "var statusEl = document.getElementById('status');\n",
    "function setStatus(s, text) { statusEl.setAttribute('data-status', s); statusEl.textContent = text; }\n"
    "window.addEventListener('error', function (e) { setStatus('error', 'script error: ' + e.message); });\n"
    "var D = VIZ, layerSel = document.getElementById('layer'), headSel = document.getElementById('head');\n"
    "var heat = document.getElementById('heat'), hover = document.getElementById('hover');\n"
    "var lines = document.getElementById('lines'), curEl = document.getElementById('current');\n"
    "var cur = null;\n",
    "function esc(s) { return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')"
    ".replace(/\"/g, '&quot;'); }\n",
    "function colour(t) { if (isNaN(t)) return '#d62728'; if (!isFinite(t)) return '#ff7f0e';"
    " t = t < 0 ? 0 : t > 1 ? 1 : t; return 'rgb(' + Math.round(255 - 247 * t) + ',' +"
    " Math.round(255 - 207 * t) + ',' + Math.round(255 - 148 * t) + ')'; }\n"
    "D.layers.forEach(function (L, i) { var o = document.createElement('option'); o.value = String(i);"
    " o.textContent = L.name; layerSel.appendChild(o); });\n",
    "function fillHeads() {\n"
    "  var L = D.layers[+layerSel.value]; headSel.innerHTML = '';\n"
    "  L.maps.forEach(function (m, i) { var o = document.createElement('option'); o.value = String(i);"
    " o.textContent = m.head; headSel.appendChild(o); });\n"
    "}\n",
    "function render() {\n"
    "  var L = D.layers[+layerSel.value], M = L.maps[+headSel.value], w = M.w, vmax = 0, sum = 0;\n"
    "  for (var k = 0; k < w.length; k++) { if (w[k] > vmax) vmax = w[k]; sum += w[k] * (k % 7 + 1); }\n"
    "  if (!(vmax > 0)) vmax = 1;\n"
    "  cur = { L: L, M: M, vmax: vmax, rl: D.labels[L.q].slice(L.r0, L.r0 + L.rows),"
    " cl: D.labels[L.k].slice(L.c0, L.c0 + L.cols) };\n"
    "  drawHeat(); drawLines(-1);\n"
    "  curEl.textContent = L.name + ' / ' + M.head; curEl.setAttribute('data-sum', sum.toFixed(6));\n"
    "}\n",
    "function drawHeat() {\n"
    "  var L = cur.L, R = L.rows, C = L.cols, cell = Math.max(6, Math.min(26, Math.floor(520 / Math.max(R, C))));\n"
    "  var fs = Math.max(8, Math.min(13, cell - 2)), ctx = heat.getContext('2d'), lw = 0, cw = 0, i, j;\n"
    "  ctx.font = fs + 'px Helvetica, Arial, sans-serif';\n"
    "  cur.rl.forEach(function (s) { lw = Math.max(lw, ctx.measureText(s).width); });\n"
    "  cur.cl.forEach(function (s) { cw = Math.max(cw, ctx.measureText(s).width); });\n"
    "  var left = Math.ceil(lw) + 12, top = Math.ceil(cw) + 12, mw = C * cell, mh = R * cell;\n"
    "  heat.width = left + mw + 80; heat.height = top + mh + 12;\n"
    "  ctx = heat.getContext('2d'); ctx.font = fs + 'px Helvetica, Arial, sans-serif';\n"
    "  ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, heat.width, heat.height);\n"
    "  for (i = 0; i < R; i++) for (j = 0; j < C; j++) {\n"
    "    ctx.fillStyle = colour(cur.M.w[i * C + j] / cur.vmax); ctx.fillRect(left + j * cell, top + i * cell, cell, "
    "cell);\n"
    "  }\n"
    "  ctx.strokeStyle = '#999'; ctx.strokeRect(left - 0.5, top - 0.5, mw + 1, mh + 1);\n"
    "  ctx.fillStyle = '#222'; ctx.textAlign = 'right'; ctx.textBaseline = 'middle';\n"
    "  for (i = 0; i < R; i++) ctx.fillText(cur.rl[i], left - 5, top + i * cell + cell / 2);\n"
    "  ctx.textAlign = 'left';\n"
    "  for (j = 0; j < C; j++) { ctx.save(); ctx.translate(left + j * cell + cell / 2, top - 5);"
    " ctx.rotate(-Math.PI / 2); ctx.fillText(cur.cl[j], 0, 0); ctx.restore(); }\n"
    "  var bx = left + mw + 16;\n"
    "  for (i = 0; i < 40; i++) { ctx.fillStyle = colour(1 - (i + 0.5) / 40);"
    " ctx.fillRect(bx, top + mh * i / 40, 14, mh / 40 + 0.5); }\n"
    "  ctx.strokeRect(bx - 0.5, top - 0.5, 15, mh + 1); ctx.fillStyle = '#222'; ctx.font = '11px Helvetica, Arial, "
    "sans-serif';\n"
    "  ctx.textBaseline = 'top'; ctx.fillText(cur.vmax.toPrecision(3), bx + 18, top);\n"
    "  ctx.textBaseline = 'bottom'; ctx.fillText('0', bx + 18, top + mh);\n"
    "  cur.geom = { left: left, top: top, cell: cell };\n"
    "}\n",
    "heat.addEventListener('mousemove', function (e) {\n"
    "  if (!cur) return;\n"
    "  var g = cur.geom, r = heat.getBoundingClientRect(), L = cur.L;\n"
    "  var x = (e.clientX - r.left) * heat.width / r.width, y = (e.clientY - r.top) * heat.height / r.height;\n"
    "  var j = Math.floor((x - g.left) / g.cell), i = Math.floor((y - g.top) / g.cell);\n"
    "  if (i < 0 || j < 0 || i >= L.rows || j >= L.cols) { hover.textContent = '\\u00a0'; return; }\n"
    "  hover.textContent = cur.rl[i] + ' (' + (L.r0 + i) + ') \\u2192 ' + cur.cl[j] + ' (' + (L.c0 + j) + '): ' +"
    " cur.M.w[i * L.cols + j].toFixed(4);\n"
    "});\n",
    "function drawLines(focus) {\n"
    "  var L = cur.L, R = L.rows, C = L.cols, step = Math.max(8, Math.min(18, Math.floor(640 / Math.max(R, C))));\n"
    "  var x1 = 110, x2 = 290, h = Math.max(R, C) * step + 16, parts = [], i, j;\n"
    "  lines.setAttribute('width', 400); lines.setAttribute('height', h);"
    " lines.setAttribute('viewBox', '0 0 400 ' + h);\n"
    "  parts.push('<rect width=\"400\" height=\"' + h + '\" fill=\"#fff\"/>');\n"
    "  for (i = 0; i < R; i++) {\n"
    "    if (focus >= 0 && i !== focus) continue;\n"
    "    for (j = 0; j < C; j++) {\n"
    "      var v = cur.M.w[i * C + j] / cur.vmax;\n"
    "      if (!(v >= 0.02) || !isFinite(v)) continue;\n"
    "      parts.push('<line x1=\"' + (x1 + 4) + '\" y1=\"' + (12 + i * step) + '\" x2=\"' + (x2 - 4) + '\" y2=\"' +"
    " (12 + j * step) + '\" stroke=\"#2171b5\" stroke-width=\"2\" stroke-opacity=\"' + v.toFixed(3) + '\"/>');\n"
    "    }\n"
    "  }\n"
    "  for (i = 0; i < R; i++) parts.push('<text class=\"q\" data-i=\"' + i + '\" x=\"' + x1 + '\" y=\"' +"
    " (12 + i * step) + '\" text-anchor=\"end\" dominant-baseline=\"middle\">' + esc(cur.rl[i]) + '</text>');\n"
    "  for (j = 0; j < C; j++) parts.push('<text x=\"' + x2 + '\" y=\"' + (12 + j * step) +"
    " '\" dominant-baseline=\"middle\">' + esc(cur.cl[j]) + '</text>');\n"
    "  lines.innerHTML = parts.join('');\n"
    "}\n",
    "lines.addEventListener('mouseover', function (e) {\n"
    "  var t = e.target; if (t && t.getAttribute && t.getAttribute('class') === 'q') "
    "drawLines(+t.getAttribute('data-i'));\n"
    "});\n",
    "lines.addEventListener('mouseleave', function () { if (cur) drawLines(-1); });\n"
    "layerSel.addEventListener('change', function () { fillHeads(); render(); });\n"
    "headSel.addEventListener('change', render);\n",
    "function select(li, hi) {\n"
    "  layerSel.value = String(li); layerSel.dispatchEvent(new Event('change'));\n"
    "  headSel.value = String(hi); headSel.dispatchEvent(new Event('change'));\n"
    "}\n",
    "function inked() {\n"
    "  var d = heat.getContext('2d').getImageData(0, 0, heat.width, heat.height).data, n = 0;\n"
    "  for (var k = 0; k < d.length; k += 4) if (d[k] < 250 || d[k + 1] < 250 || d[k + 2] < 250) n++;\n"
    "  return n;\n"
    "}\n",
    "function selftest() {\n"
    "  var views = 0, sums = {}, errors = [];\n"
    "  for (var li = 0; li < D.layers.length; li++) for (var hi = 0; hi < D.layers[li].maps.length; hi++) {\n"
    "    select(li, hi); views++;\n"
    "    var want = D.layers[li].name + ' / ' + D.layers[li].maps[hi].head;\n"
    "    if (curEl.textContent !== want) errors.push('shows \"' + curEl.textContent + '\" for \"' + want + '\"');\n"
    "    if (inked() === 0) errors.push('blank heat map for ' + want);\n"
    "    var drawable = D.layers[li].maps[hi].w.some(function (x) { return x > 0 && isFinite(x); });\n"
    "    if (drawable && lines.getElementsByTagName('line').length === 0) errors.push('no lines for ' + want);\n"
    "    sums[curEl.getAttribute('data-sum')] = 1;\n"
    "  }\n"
    "  var distinct = Object.keys(sums).length;\n"
    "  if (views > 1 && distinct < 2) errors.push('every view drew the same weights');\n"
    "  select(0, 0);\n"
    "  if (errors.length) setStatus('fail', 'selftest failed: ' + errors.join('; '));\n"
    "  else setStatus('ok', 'selftest ok: ' + views + ' views, ' + distinct + ' distinct');\n"
    "}\n"
    "fillHeads(); render();\n"
    "if (location.hash === '#selftest') selftest();\n"
    "else setStatus('ready', 'ready: ' + D.layers.length + ' layers');\n"
    "})();\n",
};

int viz_write_html(const viz_set *s, const char *path, char *err, size_t errsz) {
    safe_file sf;
    FILE *f = safe_fopen(&sf, path, SAFE_KIND_HTML);
    if (!f) return fail(err, errsz, "%s: %s", path, attn_last_error());
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", f);
    attn_viz_write_escaped(f, s->title);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<h1>", page_css);
    attn_viz_write_escaped(f, s->title);
    fputs("</h1>\n<p class=\"model\">", f);
    attn_viz_write_escaped(f, s->model);
    fputs("</p>\n", f);
    if (s->windowed) {
        fputs("<p class=\"notice\" id=\"notice\">", f);
        attn_viz_write_escaped(f, s->notice);
        fputs("</p>\n", f);
    }
    fputs("<div class=\"controls\"><label>Layer <select id=\"layer\"></select></label>\n"
          "<label>Head <select id=\"head\"></select></label>\n<span id=\"current\"></span></div>\n"
          "<div class=\"views\">\n<div class=\"panel\"><h2>Heat map (rows: queries, columns: keys)</h2>"
          "<canvas id=\"heat\" width=\"10\" height=\"10\"></canvas><div id=\"hover\">&#160;</div></div>\n"
          "<div class=\"panel\"><h2>Head view (hover a query token)</h2>"
          "<svg id=\"lines\" xmlns=\"http://www.w3.org/2000/svg\" width=\"400\" height=\"40\"></svg></div>\n"
          "</div>\n<p id=\"status\" data-status=\"loading\">loading (this page needs JavaScript)</p>\n"
          "<script>\nvar VIZ = {\"labels\": [",
          f);
    /* label sets: one per distinct label array */
    const char *const *sets[2 * 64 + 2];
    int64_t set_len[2 * 64 + 2];
    int nsets = 0;
    int *qset = malloc(sizeof(int) * (size_t)(s->count ? s->count : 1)),
        *kset = malloc(sizeof(int) * (size_t)(s->count ? s->count : 1));
    if (!qset || !kset) {
        free(qset), free(kset), fclose(f);
        attn_io_out_abort(&sf.o);
        return fail(err, errsz, "out of memory");
    }
    for (int i = 0; i < s->count; i++)
        for (int side = 0; side < 2; side++) {
            const char *const *lab = side ? s->maps[i].klabels : s->maps[i].qlabels;
            const int64_t n = side ? s->maps[i].nk : s->maps[i].nq;
            int k = 0;
            while (k < nsets && !(sets[k] == lab && set_len[k] == n)) k++;
            if (k == nsets && nsets < (int)(sizeof sets / sizeof sets[0])) {
                sets[nsets] = lab;
                set_len[nsets++] = n;
            }
            (side ? kset : qset)[i] = k < nsets ? k : 0;
        }
    for (int k = 0; k < nsets; k++) {
        fputs(k ? ",\n[" : "\n[", f);
        for (int64_t j = 0; j < set_len[k]; j++) {
            if (j) fputc(',', f);
            json_str(f, sets[k][j]);
        }
        fputc(']', f);
    }
    fputs("],\n\"layers\": [", f);
    char head[64];
    for (int i = 0; i < s->count;) {
        const viz_map *m = &s->maps[i];
        fputs(i ? ",\n{\"name\": " : "\n{\"name\": ", f);
        json_str(f, m->module);
        fprintf(f, ", \"q\": %d, \"k\": %d, \"r0\": %lld, \"c0\": %lld, \"rows\": %lld, \"cols\": %lld, \"maps\": [",
                qset[i], kset[i], (long long)m->r0, (long long)m->c0, (long long)m->rows, (long long)m->cols);
        int j = i;
        for (; j < s->count && s->maps[j].layer == m->layer && !strcmp(s->maps[j].module, m->module); j++) {
            const viz_map *mj = &s->maps[j];
            fputs(j > i ? ",\n{\"head\": " : "\n{\"head\": ", f);
            json_str(f, viz_head_name(mj, head, sizeof head));
            fputs(", \"w\": [", f);
            for (int64_t k = 0; k < mj->rows * mj->cols; k++) {
                if (k) fputc(',', f);
                json_num(f, mj->w[k]);
            }
            fputs("]}", f);
        }
        fputs("]}", f);
        i = j;
    }
    fputs("]};\n</script>\n<script>\n", f);
    for (size_t i = 0; i < sizeof page_js / sizeof page_js[0]; i++) fputs(page_js[i], f);
    fputs("</script>\n</body>\n</html>\n", f);
    free(qset), free(kset);
    if (safe_fclose(&sf, f)) return fail(err, errsz, "%s: write failed: %s", path, attn_last_error());
    return 0;
}

static void csv_field(FILE *f, const char *s) {
    fputc('"', f);
    attn_viz_write_text(f, s, ATTN_VIZ_CSV);
    fputc('"', f);
}

/* A weight: %.6g, with NaN and the infinities spelt as pandas and numpy read them. */
static void csv_num(FILE *f, double v) {
    if (isnan(v))
        fputs("NaN", f);
    else if (isinf(v))
        fputs(v > 0 ? "inf" : "-inf", f);
    else
        fprintf(f, "%.6g", v);
}

int viz_write_csv(const viz_set *s, const char *path, char *err, size_t errsz) {
    safe_file sf;
    FILE *f = safe_fopen(&sf, path, SAFE_KIND_CSV);
    if (!f) return fail(err, errsz, "%s: %s", path, attn_last_error());
    fputs("map,module,layer,head,query,key,query_label,key_label,weight\n", f);
    for (int i = 0; i < s->count; i++) {
        const viz_map *m = &s->maps[i];
        char head[16];
        if (m->head == VIZ_HEAD_ROLLOUT)
            snprintf(head, sizeof head, "rollout");
        else if (m->head == VIZ_HEAD_MEAN)
            snprintf(head, sizeof head, "mean");
        else
            snprintf(head, sizeof head, "%d", m->head);
        for (int64_t r = 0; r < m->rows; r++)
            for (int64_t c = 0; c < m->cols; c++) {
                fprintf(f, "%d,", i);
                csv_field(f, m->module);
                fprintf(f, ",%d,%s,%lld,%lld,", m->layer, head, (long long)(m->r0 + r), (long long)(m->c0 + c));
                csv_field(f, m->qlabels[m->r0 + r]);
                fputc(',', f);
                csv_field(f, m->klabels[m->c0 + c]);
                fputc(',', f);
                csv_num(f, (double)m->w[r * m->cols + c]);
                fputc('\n', f);
            }
    }
    if (safe_fclose(&sf, f)) return fail(err, errsz, "%s: write failed: %s", path, attn_last_error());
    return 0;
}
