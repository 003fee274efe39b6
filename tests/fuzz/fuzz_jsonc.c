/* tests/fuzz: JSON Schemas from untrusted bytes (response_format
 * json_schema, guided_json), and the text held to them. The input is a
 * schema, a NUL, then text. A schema is compiled or refused with a message
 * that says json_schema; a compiled one's recognizer is fed the text byte
 * by byte and whole, which must agree. A value it accepts whole is JSON
 * (cJSON parses it) unless the schema has an x-dsinfer-prefix, nothing may
 * follow it, and every prefix of what was accepted was accepted. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <string.h>

#include "engine/jsonc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static dsi_jsonc g_a, g_b;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t ns = nul ? (size_t)(nul - data) : size;
  const char *text = nul ? (const char *)nul + 1 : "";
  size_t nt = nul ? size - ns - 1 : 0;
  dsi_jschema *sc;
  dsi_err err = {0};
  if (dsi_jschema_compile(&sc, (const char *)data, ns, &err)) {
    DSI_ASSERT(err.status == DSI_E_INVAL && strstr(err.msg, "json_schema"));
    return 0;
  }
  /* byte by byte: how far it goes */
  dsi_jsonc_init(&g_a, sc);
  size_t ok = 0;
  int done = 0;
  while (ok < nt) {
    dsi_jsonc_copy(&g_b, &g_a);
    if (dsi_jsonc_feed(&g_b, text + ok, 1)) break;
    DSI_ASSERT(!done); /* nothing follows a whole value */
    dsi_jsonc_copy(&g_a, &g_b);
    ok++;
    done = dsi_jsonc_done(&g_a);
  }
  /* whole: the same verdict */
  dsi_jsonc_init(&g_b, sc);
  int whole = !dsi_jsonc_feed(&g_b, text, nt);
  DSI_ASSERT(whole == (ok == nt));
  if (whole) DSI_ASSERT(dsi_jsonc_done(&g_b) == done);
  if (whole && done && !memmem(data, ns, "x-dsinfer-prefix", 16)) { /* (a prefix is text before the JSON) */
    cJSON *v = cJSON_ParseWithLength(text, nt);
    DSI_ASSERT(v);
    cJSON_Delete(v);
  }
  dsi_jschema_free(sc);
  return 0;
}
