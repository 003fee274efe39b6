/* tests: chat templates and chat output parsing. The renderer against the
 * reference renderings in tests/templates/expected (made by
 * @huggingface/jinja: every fixture conversation with every template, and
 * the Jinja feature cases), its errors and limits; the output parser's
 * reasoning / tool-call split, whole and streamed across every split point. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/base.h"
#include "check.h"
#include "tokenizer/chat.h"
#include "tokenizer/template.h"

#define TDIR "templates"

/* ---- helpers ---- */

static char *slurp(const char *path, size_t *len) {
  char *s = NULL;
  size_t n = 0;
  dsi_err err = {0};
  if (dsi_read_file(path, &s, &n, &err)) return NULL;
  if (len) *len = n;
  return s;
}

static cJSON *parse_file(const char *path) {
  char *s = slurp(path, NULL);
  cJSON *j = s ? cJSON_Parse(s) : NULL;
  free(s);
  return j;
}

/* where two renderings first differ, with a little of each around it */
static void show_diff(const char *what, const char *got, size_t ng, const char *want, size_t nw) {
  size_t i = 0;
  while (i < ng && i < nw && got[i] == want[i]) i++;
  size_t from = i > 40 ? i - 40 : 0;
  int line = 1;
  for (size_t k = 0; k < i; k++) line += want[k] == '\n';
  fprintf(stderr, "    %s: first difference at byte %zu (line %d)\n", what, i, line);
  fprintf(stderr, "      want: %.*s\n", (int)DSI_MIN(nw - from, 100), want + from);
  fprintf(stderr, "      got:  %.*s\n", (int)DSI_MIN(ng - from, 100), got + from);
}

/* set key c->string of ctx to a copy of c, replacing any there */
static void merge_key(cJSON *ctx, const cJSON *c) {
  cJSON *d = cJSON_Duplicate(c, 1);
  if (!cJSON_ReplaceItemInObjectCaseSensitive(ctx, c->string, d)) cJSON_AddItemToObject(ctx, c->string, d);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* the *.json names in dir, sorted; NULL-terminated */
static char **list_json(const char *dir, int *n) {
  DIR *d = opendir(dir);
  char **v = NULL;
  *n = 0;
  if (!d) return NULL;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l > 5 && !strcmp(e->d_name + l - 5, ".json")) {
      v = realloc(v, (size_t)(*n + 2) * sizeof *v);
      v[(*n)++] = strndup(e->d_name, l - 5);
    }
  }
  closedir(d);
  if (v) {
    qsort(v, (size_t)*n, sizeof *v, cmp_str);
    v[*n] = NULL;
  }
  return v;
}

/* render src with ctx and check it against base.txt, or that it fails when
 * the reference failed (base.error); returns 1 when byte-identical */
static int check_rendering(const char *name, const char *src, const cJSON *ctx, const char *base) {
  char path[512], *want, *got = NULL;
  size_t nw = 0, ng = 0;
  dsi_err err = {0};
  dsi_tmpl *t = NULL;
  int st = dsi_tmpl_open(&t, src, &err);
  if (!st) st = dsi_tmpl_render_len(t, ctx, &got, &ng, &err);
  dsi_tmpl_free(t);
  snprintf(path, sizeof path, "%s.txt", base);
  int same = 0;
  if ((want = slurp(path, &nw))) {
    CHECKF(st == 0, "%s: %s", name, err.msg);
    if (st == 0) {
      same = ng == nw && !memcmp(got, want, nw);
      CHECKF(same, "%s: differs from the reference", name);
      if (!same) show_diff(name, got, ng, want, nw);
    }
  } else {
    snprintf(path, sizeof path, "%s.error", base);
    want = slurp(path, &nw);
    CHECKF(want != NULL, "%s: no reference rendering", name);
    CHECKF(st != 0, "%s: rendered, but the reference fails with: %s", name, want ? want : "?");
    same = want && st != 0;
    /* every run-time failure names where it happened or what */
    if (st) CHECKF(strstr(err.msg, "chat template") != NULL, "%s: %s", name, err.msg);
  }
  free(want);
  free(got);
  return same;
}

/* ---- the four templates x every fixture conversation ---- */

static void test_reference_renderings(void) {
  cJSON *man = parse_file(TDIR "/templates.json");
  CHECK(man != NULL);
  int nfix = 0, total = 0, same = 0;
  char **fix = list_json(TDIR "/fixtures", &nfix);
  CHECK(nfix >= 30);
  const cJSON *t;
  cJSON_ArrayForEach(t, cJSON_GetObjectItem(man, "templates")) {
    const char *name = cJSON_GetObjectItem(t, "name")->valuestring;
    char path[512];
    snprintf(path, sizeof path, TDIR "/%s", cJSON_GetObjectItem(t, "file")->valuestring);
    char *src = slurp(path, NULL);
    CHECKF(src != NULL, "%s", path);
    for (int i = 0; src && i < nfix; i++) {
      snprintf(path, sizeof path, TDIR "/fixtures/%s.json", fix[i]);
      cJSON *ctx = cJSON_CreateObject();
      cJSON_AddStringToObject(ctx, "bos_token", cJSON_GetObjectItem(t, "bos_token")->valuestring);
      cJSON_AddStringToObject(ctx, "eos_token", cJSON_GetObjectItem(t, "eos_token")->valuestring);
      cJSON *f = parse_file(path);
      CHECKF(f != NULL, "%s", path);
      for (cJSON *c = f ? f->child : NULL; c; c = c->next)
        merge_key(ctx, c);
      cJSON_Delete(f);
      char what[256], base[512];
      snprintf(what, sizeof what, "%s x %s", name, fix[i]);
      snprintf(base, sizeof base, TDIR "/expected/%s/%s", name, fix[i]);
      same += check_rendering(what, src, ctx, base);
      total++;
      cJSON_Delete(ctx);
    }
    free(src);
  }
  printf("templates x fixtures: %d of %d as the reference\n", same, total);
  CHECK(total >= 4 * 30);
  for (int i = 0; i < nfix; i++) free(fix[i]);
  free(fix);
  cJSON_Delete(man);
}

/* ---- Jinja features: tests/templates/features.json ---- */

static void test_reference_features(void) {
  cJSON *f = parse_file(TDIR "/features.json");
  CHECK(f != NULL);
  const cJSON *defaults = cJSON_GetObjectItem(f, "defaults"), *c;
  int total = 0, same = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(f, "cases")) {
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    cJSON *ctx = cJSON_Duplicate(defaults, 1);
    const cJSON *own = cJSON_GetObjectItem(c, "context");
    for (const cJSON *k = own ? own->child : NULL; k; k = k->next)
      merge_key(ctx, k);
    char base[512];
    snprintf(base, sizeof base, TDIR "/expected/features/%s", name);
    same += check_rendering(name, cJSON_GetObjectItem(c, "template")->valuestring, ctx, base);
    total++;
    cJSON_Delete(ctx);
  }
  printf("feature cases: %d of %d as the reference\n", same, total);
  CHECK(total >= 40);
  cJSON_Delete(f);
}

/* ---- the API around the renderer ---- */

static char *render(const char *src, const char *ctx_json, dsi_err *err, int *status) {
  dsi_tmpl *t = NULL;
  char *out = NULL;
  cJSON *ctx = ctx_json ? cJSON_Parse(ctx_json) : NULL;
  *status = dsi_tmpl_open(&t, src, err);
  if (!*status) *status = dsi_tmpl_render(t, ctx, &out, err);
  dsi_tmpl_free(t);
  cJSON_Delete(ctx);
  return out;
}

static void test_api(void) {
  /* the built-in template is the V3 checkpoint's, byte for byte */
  char *v3 = slurp(TDIR "/templates/deepseek-v3.jinja", NULL);
  CHECK(v3 && !strcmp(v3, dsi_tmpl_deepseek_v3()));
  free(v3);

  dsi_err err = {0};
  dsi_tmpl *t = NULL;
  char *out = NULL;
  cJSON *ctx = cJSON_Parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"bos_token\":\"<s>\","
                           "\"add_generation_prompt\":true}");
  /* no chat_template: the built-in V3 one */
  CHECK(dsi_tmpl_open_config(&t, NULL, &err) == 0);
  CHECK(dsi_tmpl_render(t, ctx, &out, &err) == 0);
  CHECK(out && !strcmp(out, "<s><｜User｜>hi<｜Assistant｜>"));
  free(out);
  dsi_tmpl_free(t);
  /* a string, and a list with "default" */
  cJSON *cfg = cJSON_Parse("{\"chat_template\":\"[{{ messages[0].content }}]\",\"bos_token\":{\"content\":\"<B>\"},"
                           "\"eos_token\":\"<E>\"}");
  CHECK(dsi_tmpl_open_config(&t, cfg, &err) == 0);
  CHECK(dsi_tmpl_render(t, ctx, &out, &err) == 0 && out && !strcmp(out, "[hi]"));
  free(out);
  dsi_tmpl_free(t);
  CHECK(!strcmp(dsi_tmpl_config_token(cfg, "bos_token"), "<B>"));
  CHECK(!strcmp(dsi_tmpl_config_token(cfg, "eos_token"), "<E>"));
  CHECK(dsi_tmpl_config_token(cfg, "pad_token") == NULL);
  cJSON_Delete(cfg);
  cfg = cJSON_Parse("{\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"T\"},{\"name\":\"default\",\"template\":\"D\"}]}");
  CHECK(dsi_tmpl_open_config(&t, cfg, &err) == 0);
  CHECK(dsi_tmpl_render(t, ctx, &out, &err) == 0 && out && !strcmp(out, "D"));
  free(out);
  dsi_tmpl_free(t);
  cJSON_Delete(cfg);
  cfg = cJSON_Parse("{\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"T\"}]}");
  CHECK_ERR(dsi_tmpl_open_config(&t, cfg, &err), DSI_E_CONFIG, err, "no entry named \"default\"");
  CHECK(t == NULL);
  cJSON_Delete(cfg);
  cfg = cJSON_Parse("{\"chat_template\":5}");
  CHECK_ERR(dsi_tmpl_open_config(&t, cfg, &err), DSI_E_CONFIG, err, "chat_template");
  cJSON_Delete(cfg);
  /* a context that is not an object */
  cJSON *arr = cJSON_Parse("[1]");
  CHECK(dsi_tmpl_open(&t, "x", &err) == 0);
  CHECK_ERR(dsi_tmpl_render(t, arr, &out, &err), DSI_E_INVAL, err, "JSON object");
  /* no context at all is an empty one */
  CHECK(dsi_tmpl_render(t, NULL, &out, &err) == 0 && out && !strcmp(out, "x"));
  free(out);
  dsi_tmpl_free(t);
  cJSON_Delete(arr);
  cJSON_Delete(ctx);
  dsi_tmpl_free(NULL);

  /* a template renders many times, each the same */
  int st;
  char *a = render("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
                   "{\"messages\":[1,2,3]}", &err, &st);
  CHECK(st == 0 && a && !strcmp(a, "3"));
  free(a);
  /* objects read as JavaScript reads them: integer keys first, a repeated
   * key in its first place with its last value */
  a = render("{{ o|tojson }}", "{\"o\":{\"b\":1,\"a\":2,\"b\":3,\"1\":4,\"0\":5}}", &err, &st);
  CHECK(st == 0 && a && !strcmp(a, "{\"0\": 5, \"1\": 4, \"b\": 3, \"a\": 2}"));
  free(a);
  /* a huge object costs little */
  cJSON *big = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(big, "o");
  for (int i = 0; i < 200000; i++) {
    char key[32];
    snprintf(key, sizeof key, i % 2 ? "k%d" : "%d", i);
    cJSON_AddNumberToObject(o, key, i);
  }
  double t0 = dsi_now();
  dsi_tmpl_open(&t, "{{ o|length }} {{ o['7'] }} {{ o['8'] }}", &err);
  CHECK(dsi_tmpl_render(t, big, &out, &err) == 0 && out && !strcmp(out, "200000  8"));
  CHECKF(dsi_now() - t0 < 5, "200000 keys took %.1f s", dsi_now() - t0);
  free(out);
  dsi_tmpl_free(t);
  cJSON_Delete(big);
  /* a context variable may not shadow a global */
  a = render("{{ true }}", "{\"true\": 1}", &err, &st);
  CHECK_ERR(st, DSI_E_INVAL, err, "already declared: true");
  free(a);
  /* NULs inside strings survive: the length tells */
  CHECK(dsi_tmpl_open(&t, "[{{ 'a\\x00b' }}]", &err) == 0);
  size_t n = 0;
  CHECK(dsi_tmpl_render_len(t, NULL, &out, &n, &err) == 0);
  CHECK(n == 5 && out && !memcmp(out, "[a\0b]", 5));
  free(out);
  dsi_tmpl_free(t);
}

/* ---- errors: syntax errors at open name line:column ---- */

static void expect_open_error(const char *src, const char *needle) {
  dsi_err err = {0};
  dsi_tmpl *t = (dsi_tmpl *)1;
  int st = dsi_tmpl_open(&t, src, &err);
  CHECKF(st == DSI_E_FORMAT && t == NULL, "open should fail: %s", src);
  CHECKF(strstr(err.msg, needle) != NULL, "message for %s: \"%s\" lacks \"%s\"", src, err.msg, needle);
}

static void expect_render_error(const char *src, const char *ctx, const char *needle) {
  dsi_err err = {0};
  int st;
  char *out = render(src, ctx, &err, &st);
  CHECKF(st == DSI_E_INVAL || st == DSI_E_CAPACITY, "render should fail: %s (status %d)", src, st);
  CHECKF(out == NULL, "no output on failure: %s", src);
  CHECKF(strstr(err.msg, needle) != NULL, "message for %s: \"%s\" lacks \"%s\"", src, err.msg, needle);
  free(out);
}

#define TEN "0,0,0,0,0,0,0,0,0,0"
#define HUNDRED TEN "," TEN "," TEN "," TEN "," TEN "," TEN "," TEN "," TEN "," TEN "," TEN
#define ONE_THOUSAND HUNDRED "," HUNDRED "," HUNDRED "," HUNDRED "," HUNDRED "," HUNDRED "," HUNDRED "," HUNDRED "," HUNDRED "," HUNDRED

static void test_errors(void) {
  expect_open_error("a\n{% if x %}\nb", "line 2:1: {% if %} is not closed (expected {% endif %})");
  expect_open_error("{% for m in messages %}x{% if y %}{% endfor %}", "line 1:35: unexpected {% endfor %} inside the {% if %} of line 1:25");
  expect_open_error("{% for m in messages %}x", "line 1:1: {% for %} is not closed");
  expect_open_error("ok {% endif %}", "line 1:4: unexpected {% endif %}: no block is open");
  expect_open_error("{{ x", "line 1:5: expected '}}', got the end of the template");
  expect_open_error("{{ x %}", "line 1:6: expected '}}', got '%}'");
  expect_open_error("text\n  {{ 1 + }}", "line 2:10: expected an expression, got '}}'");
  expect_open_error("{{ 'abc }}", "line 1:4: string literal is not closed");
  expect_open_error("{# never closed", "line 1:1: comment is not closed");
  expect_open_error("{% frobnicate %}", "line 1:4: unknown statement 'frobnicate'");
  expect_open_error("{{ a | }}", "line 1:8: expected an expression, got '}}'");
  expect_open_error("{{ a | 'x' }}", "line 1:8: expected a filter name after '|'");
  expect_open_error("{{ x is 5 }}", "expected a test name after 'is'");
  expect_open_error("{{ 'a\\q' }}", "unexpected escaped character '\\q'");
  expect_open_error("{{ @ }}", "line 1:4: unexpected character '@'");
  expect_open_error("{{ x[] }}", "expected a subscript");
  expect_open_error("{% set %}", "expected an expression, got '%}'");
  expect_open_error("{% for in x %}{% endfor %}", "expected 'in'");
  expect_open_error("{% macro f(a=1, b) %}{% endmacro %}", "without a default follows");
  expect_open_error("ü{{ ) }}", "line 1:5: expected an expression, got ')'");
  expect_open_error("{% if x %}{% else %}{% else %}{% endif %}", "unexpected {% else %} inside the {% if %}");
  /* nesting is bounded, not a stack overflow */
  char deep[4000] = "{{ ";
  for (int i = 0; i < 600; i++) strcat(deep, "(");
  strcat(deep, "1 }}");
  expect_open_error(deep, "nested more than");
  char deep2[16000] = "";
  for (int i = 0; i < 400; i++) strcat(deep2, "{% if x %}");
  expect_open_error(deep2, "nested more than");
  char notnot[4000] = "{{ ";
  for (int i = 0; i < 500; i++) strcat(notnot, "not ");
  strcat(notnot, "x }}");
  expect_open_error(notnot, "nested more than");

  /* run-time errors name where they happened */
  expect_render_error("line\n{{ 'x' | nosuchfilter }}", "{}", "line 2:10: Unknown StringValue filter: nosuchfilter");
  expect_render_error("{% for m in messages %}{{ raise_exception('bad role ' + m) }}{% endfor %}", "{\"messages\":[\"x\"]}",
                      "line 1:42: raise_exception: bad role x");
  expect_render_error("{{ nothing + 1 }}", "{}", "line 1:12: Cannot perform operation + on undefined values");
  expect_render_error("{% for c in 'abc' %}{% endfor %}", "{}", "Expected iterable or object type in for loop: got StringValue");
  expect_render_error("{{ 1 is frob }}", "{}", "Unknown test: frob");
  expect_render_error("{% break %}", "{}", "break or continue outside a loop");
  /* limits: recursion, time, memory, output */
  expect_render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", "recursion deeper than");
  expect_render_error("{% for a in xs %}{% for b in xs %}{% for c in xs %}{% endfor %}{% endfor %}{% endfor %}",
                      "{\"xs\":[" ONE_THOUSAND "]}", "steps");
  expect_render_error("{{ range(100000000) }}", "{}", "too long");
  expect_render_error("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                      "{}", "chat template");
  expect_render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}", "{}", "nested too deeply");
  expect_render_error("{% set s = 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy' %}"
                      "{% for i in range(1000000) %}{{ s }}{% endfor %}",
                      "{}", "output longer than");
}

/* ---- robustness: mutated real templates never crash ---- */

static void test_mutations(void) {
  static const char *files[] = {"deepseek-v3", "deepseek-r1", "deepseek-v3.1", "kimi-k2"};
  static const char *pieces[] = {"{%", "%}", "{{", "}}", "{#", "#}", "-", "'", "\"", "(", ")", "[", "]", "|", ".",
                                 " if ", " for ", "endfor", "endif", "else", " in ", " not ", "\\", "\n", "ns.", "~"};
  cJSON *ctx = parse_file(TDIR "/fixtures/17-tool-calls-three.json");
  cJSON_AddStringToObject(ctx, "bos_token", "<s>");
  dsi_rng rng;
  dsi_rng_seed(&rng, 42);
  int opened = 0, rendered = 0, total = 0;
  for (size_t f = 0; f < DSI_ARRAY_LEN(files); f++) {
    char path[256];
    snprintf(path, sizeof path, TDIR "/templates/%s.jinja", files[f]);
    size_t len = 0;
    char *src = slurp(path, &len);
    if (!CHECK(src != NULL)) continue;
    char *m = malloc(len + 64);
    for (int rep = 0; rep < 400; rep++) {
      memcpy(m, src, len + 1);
      size_t n = len;
      int edits = 1 + (int)(dsi_rng_u64(&rng) % 3);
      for (int e = 0; e < edits; e++) {
        size_t at = dsi_rng_u64(&rng) % (n + 1);
        switch (dsi_rng_u64(&rng) % 4) {
        case 0: if (n) { size_t k = 1 + dsi_rng_u64(&rng) % 8; k = DSI_MIN(k, n - DSI_MIN(at, n)); memmove(m + at, m + at + k, n - at - k + 1); n -= k; } break;
        case 1: { const char *p = pieces[dsi_rng_u64(&rng) % DSI_ARRAY_LEN(pieces)]; size_t k = strlen(p); if (n + k < len + 60) { memmove(m + at + k, m + at, n - at + 1); memcpy(m + at, p, k); n += k; } } break;
        case 2: if (at < n) m[at] = (char)(dsi_rng_u64(&rng) % 256 ? (int)(dsi_rng_u64(&rng) % 255) + 1 : 'x'); break;
        default: n = at; m[n] = 0; break; /* truncate */
        }
      }
      dsi_tmpl *t = NULL;
      dsi_err err = {0};
      char *out = NULL;
      total++;
      int st = dsi_tmpl_open(&t, m, &err);
      if (st) { CHECKF(err.msg[0] && st < 0, "mutant %d of %s: status %d, no message", rep, files[f], st); continue; }
      opened++;
      st = dsi_tmpl_render(t, ctx, &out, &err);
      if (!st) rendered++;
      else CHECKF(err.msg[0] && strstr(err.msg, "chat template"), "mutant %d of %s: %s", rep, files[f], err.msg);
      free(out);
      dsi_tmpl_free(t);
    }
    free(m);
    free(src);
  }
  printf("mutated templates: %d, %d parsed, %d rendered, the rest failed cleanly\n", total, opened, rendered);
  cJSON_Delete(ctx);
}

/* ---- output parsing ---- */

#define CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define CALLS_END "<｜tool▁calls▁end｜>"
#define CALL_BEGIN "<｜tool▁call▁begin｜>"
#define CALL_END "<｜tool▁call▁end｜>"
#define SEP "<｜tool▁sep｜>"
#define EOS "<｜end▁of▁sentence｜>"

typedef struct parse_case {
  const char *name, *text;
  int in_reasoning;
  const char *reasoning, *content; /* reasoning NULL: none */
  int n_calls;
  const char *call_name[3], *call_args[3];
  int call_valid[3], call_complete[3];
} parse_case;

static const parse_case PARSE_CASES[] = {
    {"plain answer", "  Hello there.\n", 0, NULL, "Hello there.", 0, {0}, {0}, {0}, {0}},
    {"R1: the prompt opened <think>", "Let me add 2 and 2.\nThat is 4.\n</think>\n\nThe answer is **4**.", 1,
     "Let me add 2 and 2.\nThat is 4.", "The answer is **4**.", 0, {0}, {0}, {0}, {0}},
    {"R1: the model repeats <think>", "<think>\nHmm.\n</think>\n\n4" EOS, 1, "Hmm.", "4", 0, {0}, {0}, {0}, {0}},
    {"<think> in the output", "<think>Short.</think>Done.", 0, "Short.", "Done.", 0, {0}, {0}, {0}, {0}},
    {"empty reasoning (V3.1 non-thinking style)", "<think></think>Answer", 0, "", "Answer", 0, {0}, {0}, {0}, {0}},
    {"reasoning cut off", "Still thinking about", 1, "Still thinking about", "", 0, {0}, {0}, {0}, {0}},
    {"ends at EOS", "Done." EOS "trailing junk", 0, NULL, "Done.", 0, {0}, {0}, {0}, {0}},
    {"a tag-like text is content", "a <b> and <thinking> c < d", 0, NULL, "a <b> and <thinking> c < d", 0, {0}, {0}, {0}, {0}},
    {"V3: two calls",
     "Let me check." CALLS_BEGIN CALL_BEGIN "function" SEP "get_weather\n```json\n{\"location\": \"Paris\"}\n```" CALL_END
     "\n" CALL_BEGIN "function" SEP "get_time\n```json\n{\"tz\": \"CET\"}\n```" CALL_END CALLS_END EOS,
     0, NULL, "Let me check.", 2, {"get_weather", "get_time"}, {"{\"location\": \"Paris\"}", "{\"tz\": \"CET\"}"}, {1, 1}, {1, 1}},
    {"R1: reasoning then a call",
     "I need the weather.\n</think>\n\n" CALLS_BEGIN CALL_BEGIN "function" SEP "get_weather\n```json\n{}\n```" CALL_END CALLS_END,
     1, "I need the weather.", "", 1, {"get_weather"}, {"{}"}, {1}, {1}},
    {"V3.1: calls without fences",
     CALLS_BEGIN CALL_BEGIN "get_weather" SEP "{\"location\": \"Tokyo\"}" CALL_END CALL_BEGIN "search" SEP
     "{\"q\": \"a\\\"b\"}" CALL_END CALLS_END EOS,
     0, NULL, "", 2, {"get_weather", "search"}, {"{\"location\": \"Tokyo\"}", "{\"q\": \"a\\\"b\"}"}, {1, 1}, {1, 1}},
    {"invalid JSON keeps the raw text",
     CALLS_BEGIN CALL_BEGIN "f" SEP "{\"a\": 1,}" CALL_END CALLS_END, 0, NULL, "", 1, {"f"}, {"{\"a\": 1,}"}, {0}, {1}},
    {"a call cut off", "x" CALLS_BEGIN CALL_BEGIN "f" SEP "{\"a\": ", 0, NULL, "x", 1, {"f"}, {"{\"a\":"}, {0}, {0}},
    {"a call without the calls tag", CALL_BEGIN "f" SEP "[1, 2]" CALL_END, 0, NULL, "", 1, {"f"}, {"[1, 2]"}, {1}, {1}},
    {"text after the calls", CALLS_BEGIN CALL_BEGIN "f" SEP "1" CALL_END CALLS_END " and more", 0, NULL, "and more", 1,
     {"f"}, {"1"}, {1}, {1}},
    {"unicode split anywhere", "<think>思考 😀</think> 答案 é", 0, "思考 😀", "答案 é", 0, {0}, {0}, {0}, {0}},
};

static void check_msg(const parse_case *c, const dsi_chat_msg *m, const char *how) {
  if (c->reasoning) CHECKF(m->reasoning_content && !strcmp(m->reasoning_content, c->reasoning), "%s (%s): reasoning [%s]", c->name, how, m->reasoning_content ? m->reasoning_content : "(null)");
  else CHECKF(m->reasoning_content == NULL, "%s (%s): reasoning should be absent, got [%s]", c->name, how, m->reasoning_content);
  CHECKF(m->content && !strcmp(m->content, c->content), "%s (%s): content [%s]", c->name, how, m->content);
  CHECKF(m->n_tool_calls == c->n_calls, "%s (%s): %d calls", c->name, how, m->n_tool_calls);
  for (int i = 0; i < c->n_calls && i < m->n_tool_calls; i++) {
    const dsi_chat_tool_call *t = &m->tool_calls[i];
    CHECKF(!strcmp(t->name, c->call_name[i]), "%s (%s): call %d name [%s]", c->name, how, i, t->name);
    CHECKF(!strcmp(t->arguments, c->call_args[i]), "%s (%s): call %d arguments [%s]", c->name, how, i, t->arguments);
    CHECKF(t->arguments_valid == c->call_valid[i], "%s (%s): call %d valid %d", c->name, how, i, t->arguments_valid);
    CHECKF(t->complete == c->call_complete[i], "%s (%s): call %d complete %d", c->name, how, i, t->complete);
    CHECKF(!strcmp(t->type, "function"), "%s (%s): call %d type [%s]", c->name, how, i, t->type);
  }
}

/* feed text in pieces cut at cuts[0..ncuts); the deltas must add up to the
 * whole parse, and never hold part of a tag */
static void stream_pieces(const parse_case *c, const size_t *cuts, int ncuts, const char *how) {
  dsi_chat_opts o = {.in_reasoning = c->in_reasoning};
  dsi_chat_stream *s;
  dsi_err err = {0};
  CHECK(dsi_chat_stream_open(&s, &o, &err) == 0);
  size_t len = strlen(c->text), prev = 0;
  char *r = calloc(1, len + 64), *t = calloc(1, len + 64);
  size_t nr = 0, nt = 0;
  int calls = 0, ok = 1;
  dsi_chat_delta d;
  for (int k = 0; k <= ncuts; k++) {
    size_t end = k < ncuts ? cuts[k] : len;
    if (k < ncuts) dsi_chat_stream_feed(s, c->text + prev, end - prev, &d, &err);
    else {
      dsi_chat_stream_feed(s, c->text + prev, end - prev, &d, &err);
      memcpy(r + nr, d.reasoning, d.reasoning_len), nr += d.reasoning_len;
      memcpy(t + nt, d.content, d.content_len), nt += d.content_len;
      ok &= d.tool_calls_from == calls;
      calls = d.tool_calls_to;
      dsi_chat_stream_finish(s, &d, &err);
    }
    ok &= d.tool_calls_from == calls;
    calls = d.tool_calls_to;
    /* a delta never ends inside a tag or a UTF-8 character */
    if (d.content_len) ok &= ((unsigned char)d.content[d.content_len - 1] & 0xC0) != 0xC0;
    if (d.reasoning_len) ok &= ((unsigned char)d.reasoning[d.reasoning_len - 1] & 0xC0) != 0xC0;
    memcpy(r + nr, d.reasoning, d.reasoning_len), nr += d.reasoning_len;
    memcpy(t + nt, d.content, d.content_len), nt += d.content_len;
    prev = end;
  }
  CHECKF(ok, "%s (%s): deltas out of order or split a tag", c->name, how);
  CHECKF(!strstr(t, "<｜tool") && !strstr(r, "</think"), "%s (%s): a tag leaked into the text", c->name, how);
  const dsi_chat_msg *m = dsi_chat_stream_msg(s);
  check_msg(c, m, how);
  CHECKF(!strcmp(r, m->reasoning_content ? m->reasoning_content : ""), "%s (%s): reasoning deltas [%s]", c->name, how, r);
  CHECKF(!strcmp(t, m->content), "%s (%s): content deltas [%s]", c->name, how, t);
  CHECKF(calls == m->n_tool_calls, "%s (%s): tool call deltas", c->name, how);
  free(r);
  free(t);
  dsi_chat_stream_free(s);
}

static void test_chat_parse(void) {
  for (size_t i = 0; i < DSI_ARRAY_LEN(PARSE_CASES); i++) {
    const parse_case *c = &PARSE_CASES[i];
    dsi_chat_opts o = {.in_reasoning = c->in_reasoning};
    dsi_chat_msg m;
    dsi_err err = {0};
    CHECK(dsi_chat_parse(c->text, strlen(c->text), &o, &m, &err) == 0);
    check_msg(c, &m, "whole");
    dsi_chat_msg_free(&m);
    /* every single split point, one byte at a time, and random cuts */
    size_t len = strlen(c->text);
    for (size_t cut = 0; cut <= len; cut++) stream_pieces(c, &cut, 1, "one split");
    size_t *all = malloc((len + 1) * sizeof *all);
    for (size_t k = 0; k < len; k++) all[k] = k;
    stream_pieces(c, all, (int)len, "byte by byte");
    dsi_rng rng;
    dsi_rng_seed(&rng, 7 + i);
    for (int rep = 0; rep < 20; rep++) {
      int n = 0;
      for (size_t k = 1; k < len; k++)
        if (dsi_rng_u64(&rng) % 5 == 0) all[n++] = k;
      stream_pieces(c, all, n, "random cuts");
    }
    free(all);
  }
  /* an output that continues a prefill keeps the leading white space of
   * the field it starts in (and looks for no <think> there), whole and
   * streamed through the public parser one byte at a time */
  static const struct {
    int flags;
    const char *text, *reasoning, *content;
  } cont[] = {
      {DSI_CHAT_OUT_CONTINUES, " world.\n", NULL, " world."},
      {DSI_CHAT_OUT_CONTINUES, "\n\n- two<think>", NULL, "\n\n- two<think>"},
      {DSI_CHAT_OUT_CONTINUES | DSI_CHAT_OUT_IN_REASONING, " more</think>\n\nAnswer", " more", "Answer"},
      {0, " world.\n", NULL, "world."},
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(cont); i++) {
    dsi_chat_out *o;
    dsi_chat_out_delta d;
    char rs[64] = "", ct[64] = "";
    CHECK(dsi_chat_out_open(&o, cont[i].flags, NULL) == 0);
    for (const char *p = cont[i].text; *p; p++) {
      CHECK(dsi_chat_out_feed(o, p, 1, &d, NULL) == 0);
      strncat(rs, d.reasoning ? d.reasoning : "", d.reasoning_len);
      strncat(ct, d.content ? d.content : "", d.content_len);
    }
    CHECK(dsi_chat_out_finish(o, &d, NULL) == 0);
    strncat(rs, d.reasoning ? d.reasoning : "", d.reasoning_len);
    strncat(ct, d.content ? d.content : "", d.content_len);
    const char *wr = dsi_chat_out_reasoning(o);
    CHECKF((cont[i].reasoning ? wr && !strcmp(wr, cont[i].reasoning) && !strcmp(rs, cont[i].reasoning) : !wr) &&
               !strcmp(dsi_chat_out_content(o), cont[i].content) && !strcmp(ct, cont[i].content),
           "continuation %zu: reasoning [%s] content [%s], streamed [%s] [%s]", i, wr ? wr : "(none)",
           dsi_chat_out_content(o), rs, ct);
    dsi_chat_out_free(o);
  }
  /* which prompts leave the model inside <think> */
  CHECK(dsi_chat_prompt_in_reasoning("<｜User｜>hi<｜Assistant｜><think>\n") == 1);      /* R1 */
  CHECK(dsi_chat_prompt_in_reasoning("<｜User｜>hi<｜Assistant｜><think>") == 1);        /* V3.1 thinking */
  CHECK(dsi_chat_prompt_in_reasoning("<｜User｜>hi<｜Assistant｜><think></think>") == 0); /* V3.1 non-thinking */
  CHECK(dsi_chat_prompt_in_reasoning("<｜User｜>hi<｜Assistant｜>") == 0);               /* V3 */
  CHECK(dsi_chat_prompt_in_reasoning("<｜Assistant｜><think>a</think>b<｜User｜>c<｜Assistant｜>") == 0);
  CHECK(dsi_chat_prompt_in_reasoning("no assistant") == 0);
  CHECK(dsi_chat_prompt_in_reasoning(NULL) == 0);
  /* the R1 template's generation prompt, rendered, drives the parser */
  char *src = slurp(TDIR "/templates/deepseek-r1.jinja", NULL);
  int st;
  dsi_err err = {0};
  char *prompt = render(src, "{\"messages\":[{\"role\":\"user\",\"content\":\"2+2?\"}],\"bos_token\":\"\","
                        "\"add_generation_prompt\":true,\"enable_thinking\":true}", &err, &st);
  CHECK(st == 0 && dsi_chat_prompt_in_reasoning(prompt) == 1);
  free(prompt);
  free(src);
  dsi_chat_msg_free(NULL);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  test_reference_renderings();
  test_reference_features();
  test_api();
  test_errors();
  test_mutations();
  test_chat_parse();
  return check_done();
}
