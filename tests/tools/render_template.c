/* tests/tools/render_template: render one conversation with one chat
 * template through the C renderer, as the e2e test compares it with the
 * reference: render_template [-v KEY=VALUE]... TEMPLATE.jinja CONTEXT.json
 * -v sets string variables the context does not set (bos_token, eos_token).
 * The rendering goes to stdout; an error goes to stderr with exit 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/base.h"
#include "tokenizer/template.h"

/* set key c->string of ctx to a copy of c, replacing any there */
static void merge_key(cJSON *ctx, const cJSON *c) {
  cJSON *d = cJSON_Duplicate(c, 1);
  if (!cJSON_ReplaceItemInObjectCaseSensitive(ctx, c->string, d)) cJSON_AddItemToObject(ctx, c->string, d);
}

int main(int argc, char **argv) {
  cJSON *ctx = cJSON_CreateObject();
  int i = 1;
  for (; i + 1 < argc && !strcmp(argv[i], "-v"); i += 2) {
    char *eq = strchr(argv[i + 1], '=');
    if (!eq) { fprintf(stderr, "render_template: -v wants KEY=VALUE\n"); return 2; }
    *eq = 0;
    cJSON_AddStringToObject(ctx, argv[i + 1], eq + 1);
  }
  if (argc - i != 2) {
    fprintf(stderr, "usage: render_template [-v KEY=VALUE]... TEMPLATE.jinja CONTEXT.json\n");
    return 2;
  }
  dsi_err err = {0};
  char *src = NULL, *json = NULL, *out = NULL;
  size_t n;
  dsi_tmpl *t = NULL;
  int rc = 1;
  if (dsi_read_file(argv[i], &src, &n, &err) || dsi_read_file(argv[i + 1], &json, &n, &err)) goto done;
  cJSON *fix = cJSON_Parse(json);
  if (!cJSON_IsObject(fix)) {
    dsi_errf(&err, DSI_E_FORMAT, "%s: not a JSON object", argv[i + 1]);
    cJSON_Delete(fix);
    goto done;
  }
  for (cJSON *c = fix->child; c; c = c->next) /* the fixture's keys win */
    merge_key(ctx, c);
  cJSON_Delete(fix);
  if (dsi_tmpl_open(&t, src, &err) || dsi_tmpl_render_len(t, ctx, &out, &n, &err)) goto done;
  fwrite(out, 1, n, stdout);
  rc = 0;
done:
  if (rc) fprintf(stderr, "%s\n", err.msg);
  free(out);
  free(src);
  free(json);
  dsi_tmpl_free(t);
  cJSON_Delete(ctx);
  return rc;
}
