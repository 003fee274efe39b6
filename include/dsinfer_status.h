/* dsinfer_status.h — status codes and error messages, the part of the
 * public API (dsinfer.h) that every layer of the engine reports through.
 * Self-contained: the library's lowest layer includes it alone. */
#ifndef DSINFER_STATUS_H
#define DSINFER_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status codes: 0 is success, failures a user can cause are negative ---- */
enum {
  DSI_OK = 0,
  DSI_E_INVAL = -1,       /* bad argument or request */
  DSI_E_IO = -2,          /* file missing, unreadable, short */
  DSI_E_FORMAT = -3,      /* malformed file (safetensors header, JSON) */
  DSI_E_CONFIG = -4,      /* config.json key missing, wrong type or inconsistent */
  DSI_E_NOMEM = -5,       /* allocation failed */
  DSI_E_CAPACITY = -6,    /* over a limit: KV blocks, context length */
  DSI_E_UNSUPPORTED = -7, /* valid but not supported by this build */
};
const char *dsi_status_str(int status);

/* An error: the status and a message that names the thing at fault. */
typedef struct dsi_err {
  int status;
  char msg[1024];
} dsi_err;

#ifdef __cplusplus
}
#endif
#endif
