/* `attn viz`: the maps a model's forward gave, and the writers that turn them into files. An input
 * kind (cmd_viz.c: a GPT checkpoint on text or token ids, an `attn run` model on a safetensors of
 * inputs, a Vision Transformer on an image) yields a viz_set; every writer here (SVG, HTML, CSV) reads
 * only the viz_set. A ViT's rollout overlay is written by cmd_viz.c (attn_viz_overlay +
 * attn_image_save), from the image and the rollout. */
#ifndef ATTN_VIZ_OUT_H
#define ATTN_VIZ_OUT_H

#include <stdint.h>
#include <stdio.h>

#define VIZ_HEAD_MEAN (-1)
#define VIZ_HEAD_ROLLOUT (-2)

/* One heat map, already cut to its window: rows [r0, r0 + rows) of the module's nq query rows and
 * columns [c0, c0 + cols) of its nk keys. */
typedef struct viz_map {
    int layer;          /* index among the model's attention modules (-1 for the rollout) */
    const char *module; /* the module's name ("layers.0.self_attn"; "rollout") */
    int head;           /* a head index, VIZ_HEAD_MEAN or VIZ_HEAD_ROLLOUT */
    int num_heads;      /* the module's heads (the rollout: of the layers it went through) */
    int64_t nq, nk, r0, c0, rows, cols;
    const char *const *qlabels, *const *klabels; /* nq / nk labels of the whole sequence */
    float *w;                                    /* [rows, cols] */
} viz_map;

typedef struct viz_set {
    const char *title; /* the page's / maps' title */
    const char *model; /* a one-line description of model and input */
    viz_map *maps;     /* grouped by layer, in layer order */
    int count;
    int windowed;     /* some map is a window of a longer sequence */
    char notice[256]; /* what the window shows and how to move it ("" when not windowed) */
} viz_set;

/* "HEAD 2", "mean of 4 heads", "rollout" into buf. */
const char *viz_head_name(const viz_map *m, char *buf, size_t cap);

/* Each writer returns 0, or -1 with a one-line message in err. */
/* SVG: one file per map; with several maps, path gets "-L<layer>-h<head>" / "-mean" / "-rollout"
 * before its extension. The paths written are printed on out (nullable). */
int viz_write_svgs(const viz_set *s, const char *path, FILE *out, char *err, size_t errsz);
/* The file viz_write_svgs writes map i to, into buf. */
const char *viz_svg_file(const viz_set *s, int i, const char *path, char *buf, size_t cap);
/* A self-contained HTML page (inline CSS and JS, no network): a layer and head selector, the heat
 * map (a canvas) with hover values, and a head view (lines from each query token to the keys it
 * attends to, opacity by weight). Opened with the fragment #selftest, it switches through every
 * layer and head itself and writes the result into #status (data-status "ok" or "fail"); any
 * script error sets data-status "error". */
int viz_write_html(const viz_set *s, const char *path, char *err, size_t errsz);
/* CSV: map,module,layer,head,query,key,query_label,key_label,weight (one row per cell, positions in
 * the whole sequence). */
int viz_write_csv(const viz_set *s, const char *path, char *err, size_t errsz);

#endif
