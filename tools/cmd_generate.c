/* attn generate: continue a prompt with a Hugging Face causal language model (attn/pretrained.h:
 * GPT-2), its text tokenized and the new tokens decoded by the folder's tokenizer
 * (attn/tokenizer.h). The text is streamed as tokens are produced: each new token re-decodes the
 * generated ids and prints what is new, holding back a trailing U+FFFD (a UTF-8 character whose
 * bytes are split across tokens) until the next token completes it or generation ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_opts.h"

static void usage(FILE *f) {
    fprintf(f, "usage: attn generate --model DIR --prompt TEXT [--tokens N] [--temperature T] [--top-k K]\n"
               "                     [--top-p P] [--seed S] [--ids] [--precision fp32|bf16] [--threads T]\n\n"
               "Continues TEXT with a Hugging Face causal language model folder (config.json model_type\n"
               "gpt2, llama, mistral or qwen2, its safetensors weights and its tokenizer), printing the\n"
               "generated text to standard output as it is produced, then a newline. Generation stops\n"
               "after N tokens or at the config's eos_token_id (any of them when it is a list). The\n"
               "prompt fills the model's key/value cache in one pass; each new token costs one cached\n"
               "step; prompt + N tokens must fit in the model's positions (n_positions,\n"
               "max_position_embeddings).\n"
               "  --model DIR        the model folder\n"
               "  --prompt TEXT      the text to continue (tokenized as tokenizer(TEXT))\n"
               "  --tokens N         new tokens at most (default 32)\n"
               "  --temperature T    0 = greedy, deterministic (default); else sample softmax(logits / T)\n"
               "  --top-k K          sample among the K most likely tokens (default 0: all)\n"
               "  --top-p P          then among the fewest whose probabilities sum to >= P (default 1)\n"
               "  --seed S           the sampling stream (Philox, counter-based; default 1)\n"
               "  --ids              print the generated ids, space-separated, as the last line\n"
               "  --precision P      fp32 (default) or bf16: the linear layers' matrix products (and the\n"
               "                     prompt's attention) on bf16-rounded operands with float accumulation,\n"
               "                     the weights rounded and packed once; the cached steps' attention stays\n"
               "                     float. Faster where the CPU has AVX512-BF16 or AMX; not bitwise fp32\n"
               "  --threads T        threads (default: all)\n");
}

typedef struct gen_stream {
    const attn_tokenizer *tok;
    int32_t *ids;
    size_t n, cap;
    char *text;
    size_t text_cap, printed;
    int failed;
} gen_stream;

/* Decode every generated id into s->text; *len gets the text's length. */
static int decode_all(gen_stream *s, size_t *len) {
    attn_status st = attn_tokenizer_decode(s->tok, s->ids, s->n, 0, s->text, s->text_cap, len);
    if (st == ATTN_ERR_WORKSPACE) {
        size_t c = s->text_cap ? s->text_cap : 256;
        while (c <= *len) c *= 2;
        char *t = realloc(s->text, c);
        if (!t) return cli_fail("generate: out of memory");
        s->text = t;
        s->text_cap = c;
        st = attn_tokenizer_decode(s->tok, s->ids, s->n, 0, s->text, s->text_cap, len);
    }
    return st ? cli_fail("generate: %s", attn_last_error()) : 0;
}

/* Print the decoded text past what is printed; final = 0 holds back trailing U+FFFDs. */
static int flush_text(gen_stream *s, int final) {
    size_t len = 0;
    if (decode_all(s, &len)) return 1;
    size_t stable = len;
    while (!final && stable >= 3 && memcmp(s->text + stable - 3, "\xEF\xBF\xBD", 3) == 0) stable -= 3;
    if (stable > s->printed) {
        fwrite(s->text + s->printed, 1, stable - s->printed, stdout);
        fflush(stdout);
        s->printed = stable;
    }
    return 0;
}

static int on_token(int32_t id, void *user) {
    gen_stream *s = user;
    if (s->n == s->cap) {
        size_t c = s->cap ? 2 * s->cap : 64;
        int32_t *p = realloc(s->ids, c * sizeof *p);
        if (!p) {
            s->failed = cli_fail("generate: out of memory");
            return 1;
        }
        s->ids = p;
        s->cap = c;
    }
    s->ids[s->n++] = id;
    if (flush_text(s, 0)) s->failed = 1;
    return s->failed;
}

/* The prompt's ids, as tokenizer(prompt)["input_ids"]. */
static int encode_prompt(const attn_tokenizer *tok, const char *prompt, int32_t **ids, size_t *n) {
    size_t len = strlen(prompt), got = 0;
    attn_status st = attn_tokenizer_encode(tok, prompt, len, 1, 0, NULL, 0, &got);
    if (st && st != ATTN_ERR_WORKSPACE) return cli_fail("generate: --prompt: %s", attn_last_error());
    if (!got) return cli_fail("generate: --prompt gives no tokens");
    if (!(*ids = malloc(got * sizeof **ids))) return cli_fail("generate: out of memory");
    if (attn_tokenizer_encode(tok, prompt, len, 1, 0, *ids, got, n))
        return cli_fail("generate: --prompt: %s", attn_last_error());
    return 0;
}

int cmd_generate(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *precision = "fp32";
    int64_t tokens = 32, top_k = 0, seed = 1, threads = 0;
    double temperature = 0, top_p = 1;
    int print_ids = 0;
    cli_opt opts[] = {
        CLI_STRING_NONEMPTY("--model", &model),
        CLI_STRING("--prompt", &prompt),
        CLI_INT("--tokens", &tokens, 0, (int64_t)1 << 30),
        CLI_DOUBLE("--temperature", &temperature, 0.0, 1e6),
        CLI_INT("--top-k", &top_k, 0, INT32_MAX),
        CLI_DOUBLE_ABOVE("--top-p", &top_p, 0.0, 1.0),
        CLI_INT("--seed", &seed, 0, INT64_MAX),
        CLI_FLAG("--ids", &print_ids),
        CLI_STRING_NONEMPTY("--precision", &precision),
        CLI_INT("--threads", &threads, 1, 1024),
        CLI_END,
    };
    int parsed = cli_parse("generate", opts, argc, argv, NULL, 0);
    if (parsed == CLI_HELP) {
        usage(stdout);
        return 0;
    }
    if (parsed) return parsed;
    if (!model || !prompt) return cli_usage_error("generate: needs --model DIR and --prompt TEXT (try --help)");
    attn_precision prec;
    if (cli_parse_precision(precision, &prec))
        return cli_usage_error("generate: --precision '%s' is not fp32 or bf16", precision);
    if (threads > 0) attn_set_num_threads((int)threads);
    gen_stream s = {0};
    attn_tokenizer *tok = NULL;
    attn_pretrained *m = NULL;
    int32_t *pids = NULL;
    size_t pn = 0;
    int rc = 1;
    if (attn_tokenizer_open(model, &tok)) {
        cli_fail("generate: %s", attn_last_error());
        goto done;
    }
    if (attn_pretrained_open(model, &m)) {
        cli_fail("generate: %s", attn_last_error());
        goto done;
    }
    if (attn_pretrained_set_precision(m, prec)) {
        cli_fail("generate: --precision %s: %s", precision, attn_last_error());
        goto done;
    }
    if (encode_prompt(tok, prompt, &pids, &pn)) goto done;
    s.tok = tok;
    attn_generate_options o = attn_generate_options_default();
    o.max_new_tokens = tokens;
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.seed = (uint64_t)seed;
    o.eos_id = attn_pretrained_eos_id(m);
    if (attn_pretrained_generate(m, pids, pn, &o, on_token, &s, NULL)) {
        cli_fail("generate: %s", attn_last_error());
        goto done;
    }
    if (s.failed || flush_text(&s, 1)) goto done;
    fputc('\n', stdout);
    for (size_t i = 0; print_ids && i < s.n; i++) printf("%s%d", i ? " " : "", (int)s.ids[i]);
    if (print_ids) fputc('\n', stdout);
    rc = fflush(stdout) ? cli_fail("generate: cannot write standard output") : 0;
done:
    free(s.ids);
    free(s.text);
    free(pids);
    attn_pretrained_free(m);
    attn_tokenizer_free(tok);
    return rc;
}
