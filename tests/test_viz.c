/* attn_viz heat maps: the SVG and HTML are well-formed (balanced tags, one cell per weight), carry
 * the labels, escape <, > and & in labels and titles; bad arguments are errors. */
#include "test_util.h"

/* Everything written to a temporary file, NUL-terminated. */
static char *slurp(FILE *f) {
    long n = ftell(f);
    char *s = xmalloc((size_t)n + 1);
    rewind(f);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    return s;
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* Every '<' starts a tag, a comment-free XML declaration or nothing else: no raw '<' or '&' in
 * text (each & starts an entity), and opening / closing tags of the given names balance. */
static int well_formed(const char *s) {
    for (const char *p = s; *p; p++) {
        if (*p == '<' && !(p[1] == '/' || p[1] == '?' || p[1] == '!' || (p[1] >= 'a' && p[1] <= 'z'))) return 0;
        if (*p == '&' && strncmp(p, "&amp;", 5) && strncmp(p, "&lt;", 4) && strncmp(p, "&gt;", 4) &&
            strncmp(p, "&quot;", 6) && strncmp(p, "&#39;", 5))
            return 0;
    }
    static const char *const tags[] = {"svg", "text", "title", "rect"};
    for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) {
        char open[16], close[16];
        snprintf(open, sizeof open, "<%s", tags[i]);
        snprintf(close, sizeof close, "</%s>", tags[i]);
        int opens = 0, closes = count(s, close), selfclosed = 0;
        for (const char *p = strstr(s, open); p; p = strstr(p + 1, open)) {
            char c = p[strlen(open)];
            if (c != ' ' && c != '>') continue; /* <textPath>, <title> vs <t...> */
            opens++;
            const char *end = strchr(p, '>');
            if (end && end[-1] == '/') selfclosed++;
        }
        if (opens != closes + selfclosed) {
            fprintf(stderr, "  <%s>: %d opened, %d closed, %d self-closed\n", tags[i], opens, closes, selfclosed);
            return 0;
        }
    }
    return 1;
}

/* attn_viz_write_text of text into a string. */
static char *text_of(const char *text, attn_viz_syntax syntax) {
    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile");
    if (!f) return xmalloc(1);
    CHECK_OK(attn_viz_write_text(f, text, syntax));
    char *s = slurp(f);
    fclose(f);
    return s;
}

/* One routine for every text of the outputs, checked by hand: invalid UTF-8 as U+FFFD (one per
 * maximal subpart: a truncated sequence, each stray byte, an overlong form, a surrogate, past
 * U+10FFFF), controls visible (U+2400 + c, DEL U+2421; C1 as U+FFFD), valid UTF-8 kept, then each
 * syntax's quoting. */
static void test_text(void) {
    static const struct {
        const char *in, *xml, *json, *csv;
    } cases[] = {
        {"plain \xe2\x82\xac \xf0\x9f\x98\x80", "plain \xe2\x82\xac \xf0\x9f\x98\x80",
         "plain \xe2\x82\xac \xf0\x9f\x98\x80", "plain \xe2\x82\xac \xf0\x9f\x98\x80"},
        {"<a href=\"x\">&'\\", "&lt;a href=&quot;x&quot;&gt;&amp;&#39;\\", "\\u003ca href=\\\"x\\\"\\u003e\\u0026'\\\\",
         "<a href=\"\"x\"\">&'\\"},
        {"a\x01"
         "b\nc\x7f",
         "a\xe2\x90\x81"
         "b\xe2\x90\x8a"
         "c\xe2\x90\xa1",
         "a\xe2\x90\x81"
         "b\xe2\x90\x8a"
         "c\xe2\x90\xa1",
         "a\xe2\x90\x81"
         "b\xe2\x90\x8a"
         "c\xe2\x90\xa1"},
        {"\xe2\x82(", "\xef\xbf\xbd(", "\xef\xbf\xbd(", "\xef\xbf\xbd("},
        {"\xff\xfe", "\xef\xbf\xbd\xef\xbf\xbd", "\xef\xbf\xbd\xef\xbf\xbd", "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80",
         "\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|"
         "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd",
         "\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|"
         "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd",
         "\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|"
         "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc2\x85\xef\xbf\xbe\xe2\x80\xa8", "\xef\xbf\xbd\xef\xbf\xbd\xe2\x80\xa8", "\xef\xbf\xbd\xef\xbf\xbd\\u2028",
         "\xef\xbf\xbd\xef\xbf\xbd\xe2\x80\xa8"},
        {"end\xe2", "end\xef\xbf\xbd", "end\xef\xbf\xbd", "end\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int syn = 0; syn < 3; syn++) {
            const char *want = syn == 0 ? cases[i].xml : syn == 1 ? cases[i].json : cases[i].csv;
            char *got = text_of(cases[i].in, (attn_viz_syntax)syn);
            CHECK(!strcmp(got, want), "text case %zu, syntax %d: got '%s', want '%s'", i, syn, got, want);
            free(got);
        }
    char *e = text_of(NULL, ATTN_VIZ_CSV);
    CHECK(!strcmp(e, ""), "NULL text");
    free(e);
    CHECK_STATUS(attn_viz_write_text(NULL, "x", ATTN_VIZ_XML), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_viz_write_text(stdout, "x", (attn_viz_syntax)7), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void) {
    test_text();
    const float w[2 * 3] = {0.1f, 0.7f, 0.2f, 1.0f, 0.0f, NAN};
    const char *rows[2] = {"query <a>", "b & c"};
    const char *cols[3] = {"k0", "\"k1\"", "k<2>"};
    attn_viz_heatmap h = attn_viz_heatmap_default();
    CHECK(h.vmin == 0 && h.vmax == 1 && h.cell_px == 0 && h.title == NULL, "defaults");
    h.rows = 2;
    h.cols = 3;
    h.weights = w;
    h.row_labels = rows;
    h.col_labels = cols;
    h.title = "weights of <layer 1> & head 0";
    h.row_axis = "query";
    h.col_axis = "key";
    h.caption = "mean over heads";

    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile");
    if (!f) return test_summary("test_viz");
    CHECK_OK(attn_viz_write_svg(f, &h));
    char *s = slurp(f);
    fclose(f);
    CHECK(!strncmp(s, "<svg xmlns=\"http://www.w3.org/2000/svg\"", 39), "SVG start: %.60s", s);
    CHECK(strlen(s) > 7 && !strcmp(s + strlen(s) - 7, "</svg>\n"), "SVG end");
    CHECK(well_formed(s), "SVG not well-formed");
    CHECK(count(s, "<rect class=\"cell\"") == 6, "%d cells", count(s, "<rect class=\"cell\""));
    CHECK(count(s, "<text class=\"col\"") == 3 && count(s, "<text class=\"row\"") == 2, "label counts");
    CHECK(strstr(s, ">query &lt;a&gt;</text>") && strstr(s, ">b &amp; c</text>") && strstr(s, ">k0</text>") &&
              strstr(s, ">&quot;k1&quot;</text>") && strstr(s, ">k&lt;2&gt;</text>"),
          "labels missing or not escaped");
    CHECK(!strstr(s, "<a>") && !strstr(s, "b & c") && !strstr(s, "<layer"), "raw < or & in the output");
    CHECK(strstr(s, "weights of &lt;layer 1&gt; &amp; head 0") && strstr(s, ">query</text>") &&
              strstr(s, ">key</text>") && strstr(s, ">mean over heads</text>"),
          "title, axis names or caption missing");
    /* a NaN cell in a colour outside the ramp, "NaN" in its tooltip and a legend entry: never a zero */
    CHECK(strstr(s, "fill=\"rgb(8,48,107)\"") && strstr(s, "fill=\"rgb(255,255,255)\"") &&
              count(s, "fill=\"rgb(214,39,40)\"") == 2,
          "colours of vmax, vmin and NaN (cell and legend)");
    CHECK(strstr(s, "<title>b &amp; c -&gt; k&lt;2&gt;: NaN</title>") && strstr(s, ">NaN</text>"),
          "NaN cell's tooltip and legend");
    CHECK(strstr(s, "<title>b &amp; c -&gt; k0: 1.000</title>") != NULL, "cell tooltip");
    free(s);

    /* rotate_col_labels: short column labels written upwards too (one rotate per column label) */
    attn_viz_heatmap rot = h;
    rot.col_labels = NULL; /* "0", "1", "2": narrower than a cell */
    f = tmpfile();
    CHECK_OK(attn_viz_write_svg(f, &rot));
    s = slurp(f);
    fclose(f);
    CHECK(count(s, "transform=\"rotate(-90 ") == 1, "short column labels rotated without rotate_col_labels");
    free(s);
    rot.rotate_col_labels = 1;
    f = tmpfile();
    CHECK_OK(attn_viz_write_svg(f, &rot));
    s = slurp(f);
    fclose(f);
    CHECK(well_formed(s), "rotated SVG not well-formed");
    CHECK(count(s, "<text class=\"col\"") == 3 && count(s, "transform=\"rotate(-90 ") == 3 + (rot.row_axis != NULL),
          "%d rotated texts (want 3 column labels + the row axis)", count(s, "transform=\"rotate(-90 "));
    free(s);

    /* default labels (indices), long labels (rotated), a custom scale */
    const char *longcols[3] = {"a rather long key label", "x", "y"};
    attn_viz_heatmap g = h;
    g.row_labels = NULL;
    g.col_labels = longcols;
    g.title = g.row_axis = g.col_axis = g.caption = NULL;
    g.vmin = -1;
    g.vmax = 2;
    f = tmpfile();
    CHECK_OK(attn_viz_write_svg(f, &g));
    s = slurp(f);
    fclose(f);
    CHECK(well_formed(s) && strstr(s, ">0</text>") && strstr(s, ">1</text>") && strstr(s, "rotate(-90") &&
              strstr(s, ">-1</text>") && strstr(s, ">2</text>") && !strstr(s, "<title>weights"),
          "index labels, rotated column labels, scale labels");
    free(s);

    /* HTML: one self-contained page around the SVG */
    f = tmpfile();
    CHECK_OK(attn_viz_write_html(f, &h, "a <page>", "<h1>before</h1>\n", "<p>after</p>\n"));
    s = slurp(f);
    fclose(f);
    CHECK(!strncmp(s, "<!DOCTYPE html>\n<html", 21), "HTML start");
    CHECK(strlen(s) > 8 && !strcmp(s + strlen(s) - 8, "</html>\n"), "HTML end");
    CHECK(strstr(s, "<title>a &lt;page&gt;</title>") != NULL, "page title escaped");
    const char *b = strstr(s, "<h1>before</h1>"), *sv = strstr(s, "<svg xmlns"), *a = strstr(s, "<p>after</p>");
    CHECK(b && sv && a && b < sv && sv < a, "before, SVG, after in order");
    CHECK(!strstr(s, "src=") && !strstr(s, "href=") && !strstr(s, "url(") && !strstr(s, "<script"),
          "HTML refers to something outside");
    CHECK(count(s, "<body>") == 1 && count(s, "</body>") == 1 && count(s, "<head>") == 1 && count(s, "</head>") == 1,
          "HTML structure");
    free(s);

    /* errors */
    f = tmpfile();
    attn_viz_heatmap bad = h;
    CHECK_STATUS(attn_viz_write_svg(NULL, &h), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(attn_viz_write_svg(f, NULL), ATTN_ERR_INVALID_ARGUMENT);
    bad.weights = NULL;
    CHECK_STATUS(attn_viz_write_svg(f, &bad), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "weights") != NULL, "message: %s", attn_last_error());
    bad = h;
    bad.rows = 0;
    CHECK_STATUS(attn_viz_write_svg(f, &bad), ATTN_ERR_SHAPE);
    CHECK(strstr(attn_last_error(), "rows = 0") != NULL, "message: %s", attn_last_error());
    bad = h;
    bad.cols = -2;
    CHECK_STATUS(attn_viz_write_html(f, &bad, NULL, NULL, NULL), ATTN_ERR_SHAPE);
    bad = h;
    bad.vmin = bad.vmax = 0.5;
    CHECK_STATUS(attn_viz_write_svg(f, &bad), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "vmin") != NULL, "message: %s", attn_last_error());
    bad = h;
    bad.vmax = INFINITY;
    CHECK_STATUS(attn_viz_write_svg(f, &bad), ATTN_ERR_INVALID_ARGUMENT);
    bad = h;
    bad.cell_px = -1;
    CHECK_STATUS(attn_viz_write_svg(f, &bad), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(ftell(f) == 0, "an invalid call wrote something");
    fclose(f);
    /* a stream opened for reading only: the write fails */
    f = fopen("/dev/null", "r");
    if (f) {
        CHECK_STATUS(attn_viz_write_svg(f, &h), ATTN_ERR_IO);
        fclose(f);
    }
    return test_summary("test_viz");
}
