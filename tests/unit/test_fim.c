/* tests: /v1/completions' suffix (fill in the middle). A prompt and a
 * suffix become the checkpoint's FIM layout, [BOS] <｜fim▁begin｜> prompt
 * <｜fim▁hole｜> suffix <｜fim▁end｜>, token for token, for text and id prompts
 * and a list of them; the layout's length is what is checked against the
 * context; a suffix that is not a string, a suffix with echo, and a
 * tokenizer without the FIM tokens are 400s naming the cause. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "check.h"
#include "dsinfer.h"
#include "server/server_impl.h"
#include "tokenizer/tokenizer.h"
#include "test_tiny.h"

static const char *const k_fim[3] = {"<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"};

/* dir/tokenizer.json with the three FIM tokens added after its largest id */
static void add_fim_tokens(const char *dir, int first_id) {
  char path[300];
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  FILE *f = fopen(path, "rb");
  DSI_ASSERT(f);
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  cJSON *root = cJSON_Parse(buf);
  DSI_ASSERT(root);
  cJSON *added = cJSON_GetObjectItem(root, "added_tokens");
  for (int i = 0; i < 3; i++) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "id", first_id + i);
    cJSON_AddStringToObject(t, "content", k_fim[i]);
    cJSON_AddBoolToObject(t, "single_word", 0);
    cJSON_AddBoolToObject(t, "lstrip", 0);
    cJSON_AddBoolToObject(t, "rstrip", 0);
    cJSON_AddBoolToObject(t, "normalized", 1);
    cJSON_AddBoolToObject(t, "special", 0);
    cJSON_AddItemToArray(added, t);
  }
  char *out = cJSON_PrintUnformatted(root);
  f = fopen(path, "wb");
  DSI_ASSERT(f && out);
  fputs(out, f);
  fclose(f);
  free(out);
  cJSON_Delete(root);
}

static dsi_server g_srv;

/* body parsed: 0 with the request, or the reply's status */
static unsigned parse(const char *body, compl_req *cr) {
  reply rp = {0};
  if (api_completions_parse(&g_srv, body, strlen(body), cr, &rp) == 0) return 0;
  unsigned st = rp.status;
  if (rp.resp) MHD_destroy_response(rp.resp);
  return st;
}

static void encode(const char *text, int32_t **ids, size_t *n) {
  dsi_err err = {0};
  DSI_ASSERT(dsi_tok_encode(g_srv.tok, text, strlen(text), DSI_TOK_REPLACE_INVALID, ids, n, &err) == 0);
}

/* got == [bos?] fim_begin pre fim_hole suf fim_end */
static int is_layout(const int32_t *got, size_t n_got, int bos, const int32_t *pre, size_t np, const int32_t *suf,
                     size_t ns, const int32_t fim[3]) {
  int32_t want[600];
  size_t k = 0;
  if (bos >= 0) want[k++] = bos;
  want[k++] = fim[0];
  for (size_t i = 0; i < np; i++) want[k++] = pre[i];
  want[k++] = fim[1];
  for (size_t i = 0; i < ns; i++) want[k++] = suf[i];
  want[k++] = fim[2];
  return n_got == k && !memcmp(got, want, k * sizeof *got);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  char dir[] = "/tmp/test_fim_XXXXXX";
  DSI_ASSERT(mkdtemp(dir));
  dsi_err err = {0};
  dsi_tok_made made;
  DSI_ASSERT(dsi_tok_write_checkpoint(dir, NULL, 0, 512, &made, &err) == 0);
  dsi_tok *plain;
  tiny_tokenizer(dir, &plain, NULL);
  g_srv = (dsi_server){.tok = plain, .o = {.ctx = 64}, .n_valid = dsi_tok_vocab_size(plain), .model_name = "tiny",
                      .model_names = "tiny"};

  /* without the FIM tokens: refused, naming them */
  compl_req cr;
  CHECK(parse("{\"prompt\":\"def f(x):\",\"suffix\":\"  return y\"}", &cr) == 400);

  int first = dsi_tok_vocab_size(plain);
  dsi_tok_free(plain);
  add_fim_tokens(dir, first);
  dsi_tok *tok;
  tiny_tokenizer(dir, &tok, NULL);
  g_srv.tok = tok;
  g_srv.n_valid = dsi_tok_vocab_size(tok);
  int32_t fim[3];
  for (int i = 0; i < 3; i++) fim[i] = dsi_tok_token_to_id(tok, k_fim[i]);
  CHECKF(fim[0] == first && fim[1] == first + 1 && fim[2] == first + 2, "FIM ids %d %d %d", fim[0], fim[1], fim[2]);
  int bos = dsi_tok_bos_id(tok);

  int32_t *pre, *suf;
  size_t np, ns;
  encode("def f(x):", &pre, &np);
  encode("  return y", &suf, &ns);
  /* a text prompt: BOS (the tokenizer adds it), then the layout */
  CHECK(parse("{\"prompt\":\"def f(x):\",\"suffix\":\"  return y\",\"max_tokens\":4}", &cr) == 0);
  CHECKF(cr.ps.n == 1 && is_layout(cr.ps.ids[0], cr.ps.len[0], bos, pre, np, suf, ns, fim),
         "text prompt: %zu ids in the FIM layout", cr.ps.len[0]);
  compl_req_free(&cr);
  /* token ids without BOS, an empty suffix; and a list of two prompts */
  CHECK(parse("{\"prompt\":[5,6,7],\"suffix\":\"\",\"max_tokens\":4}", &cr) == 0);
  int32_t ids[3] = {5, 6, 7};
  CHECK(cr.ps.n == 1 && is_layout(cr.ps.ids[0], cr.ps.len[0], -1, ids, 3, NULL, 0, fim));
  compl_req_free(&cr);
  CHECK(parse("{\"prompt\":[\"def f(x):\",[5,6,7]],\"suffix\":\"  return y\",\"max_tokens\":4}", &cr) == 0);
  CHECK(cr.ps.n == 2 && is_layout(cr.ps.ids[0], cr.ps.len[0], bos, pre, np, suf, ns, fim) &&
        is_layout(cr.ps.ids[1], cr.ps.len[1], -1, ids, 3, suf, ns, fim));
  compl_req_free(&cr);

  /* the layout's length against the context: 40 ids fit 64 alone, not
   * with a suffix of 30 words */
  char body[2048];
  int k = snprintf(body, sizeof body, "{\"prompt\":[");
  for (int i = 0; i < 40; i++) k += snprintf(body + k, sizeof body - k, "%s5", i ? "," : "");
  snprintf(body + k, sizeof body - k, "],\"max_tokens\":4}");
  CHECK(parse(body, &cr) == 0);
  compl_req_free(&cr);
  k = (int)strlen(body) - (int)strlen("}");
  snprintf(body + k, sizeof body - k, ",\"suffix\":\"%s\"}",
           "one two three four five six seven eight nine ten one two three four five six seven eight nine ten "
           "one two three four five six seven eight nine ten");
  CHECK(parse(body, &cr) == 400);

  /* refused: a suffix that is not a string, a suffix with echo */
  CHECK(parse("{\"prompt\":\"x\",\"suffix\":5}", &cr) == 400);
  CHECK(parse("{\"prompt\":\"x\",\"suffix\":\"y\",\"echo\":true}", &cr) == 400);

  free(pre);
  free(suf);
  dsi_tok_free(tok);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) {}
  return check_done();
}
