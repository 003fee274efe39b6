/* tests: the profiler — logits are the same with it on and off; in its
 * trace, each step's wall time matches a clock outside the engine, and the
 * ops' spans on the calling thread plus the reported dispatch time add up
 * to it; a full buffer stops recording and says so. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "check.h"
#include "dsinfer.h"
#include "graph/prof.h"

#define N_PROMPT 24
#define N_DECODE 5
#define N_STEPS (1 + N_DECODE)

static int argmax_f(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

/* one prefill and N_DECODE greedy steps; the last-token logits of each
 * step into lg[N_STEPS][V], each step's wall time (outside the engine) into wall */
static void run(dsi_engine *e, int V, float *lg, double *wall) {
  int s = dsi_seq_new(e);
  int32_t toks[N_PROMPT], seqv[N_PROMPT];
  for (int i = 0; i < N_PROMPT; i++) toks[i] = (int32_t)((i * 37 + 11) % V), seqv[i] = s;
  float *logits = malloc((size_t)N_PROMPT * V * sizeof(float));
  dsi_batch b = {.n_tokens = N_PROMPT, .tokens = toks, .seq = seqv};
  double t0 = dsi_now();
  DSI_ASSERT(dsi_engine_forward(e, &b, logits) == 0);
  wall[0] = dsi_now() - t0;
  memcpy(lg, logits + (size_t)(N_PROMPT - 1) * V, V * sizeof(float));
  for (int i = 1; i < N_STEPS; i++) {
    int32_t tok = argmax_f(lg + (size_t)(i - 1) * V, V);
    dsi_batch d = {.n_tokens = 1, .tokens = &tok, .seq = &s};
    t0 = dsi_now();
    DSI_ASSERT(dsi_engine_forward(e, &d, logits) == 0);
    wall[i] = dsi_now() - t0;
    memcpy(lg + (size_t)i * V, logits, V * sizeof(float));
  }
  free(logits);
  dsi_seq_free(e, s);
}

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : -1;
}
static const char *str(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}

/* the trace's steps against the outside clock, and ops + dispatch = wall */
static void check_trace(const char *path, const double *wall) {
  char *text;
  size_t len;
  dsi_err err = {0};
  if (!CHECK(dsi_read_file(path, &text, &len, &err) == 0)) return;
  cJSON *root = cJSON_ParseWithLength(text, len);
  free(text);
  if (!CHECK(root)) return;
  const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "traceEvents"), *ev;
  CHECK(cJSON_IsArray(evs));
  double step_ts[N_STEPS], step_dur[N_STEPS], step_disp[N_STEPS], ops0[N_STEPS] = {0};
  int n_steps = 0, has_core = 0, has_lm = 0, outside = 0;
  cJSON_ArrayForEach(ev, evs) {
    if (strcmp(str(ev, "ph"), "X") || strcmp(str(ev, "cat"), "step")) continue;
    if (!CHECK(n_steps < N_STEPS)) break;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
    CHECK(!strcmp(str(ev, "name"), n_steps == 0 ? "prefill" : "decode"));
    step_ts[n_steps] = num(ev, "ts");
    step_dur[n_steps] = num(ev, "dur");
    step_disp[n_steps++] = num(args, "dispatch_us");
  }
  CHECK(n_steps == N_STEPS);
  cJSON_ArrayForEach(ev, evs) {
    if (strcmp(str(ev, "ph"), "X") || !strcmp(str(ev, "cat"), "step")) continue;
    has_core |= !strcmp(str(ev, "name"), "attn_core");
    has_lm |= !strcmp(str(ev, "name"), "lm_head");
    if (num(ev, "tid") != 0) continue;
    double ts = num(ev, "ts"), dur = num(ev, "dur");
    int k = 0;
    while (k < n_steps && !(ts >= step_ts[k] && ts + dur <= step_ts[k] + step_dur[k] + 0.01)) k++;
    if (k < n_steps) ops0[k] += dur;
    else outside++;
  }
  CHECK(has_core && has_lm);
  CHECKF(outside == 0, "%d spans of thread 0 outside every step", outside);
  double sum_wall = 0, sum_dur = 0, sum_acc = 0;
  for (int k = 0; k < n_steps; k++) {
    double w = wall[k] * 1e6, slack = 0.03 * step_dur[k] + 2000; /* a few %, a few ms for tiny steps */
    CHECKF(step_dur[k] <= w + 1 && step_dur[k] >= w - slack, "step %d: trace %.1f us, clock %.1f us", k,
           step_dur[k], w);
    CHECKF(step_disp[k] >= -0.01, "step %d: dispatch %.1f us", k, step_disp[k]);
    CHECKF(fabs(ops0[k] + step_disp[k] - step_dur[k]) <= slack,
           "step %d: ops %.1f + dispatch %.1f us vs wall %.1f us", k, ops0[k], step_disp[k], step_dur[k]);
    sum_wall += w;
    sum_dur += step_dur[k];
    sum_acc += ops0[k] + step_disp[k];
  }
  CHECKF(fabs(sum_acc - sum_wall) <= 0.03 * sum_wall + 2000, "all steps: ops + dispatch %.1f us, clock %.1f us",
         sum_acc, sum_wall);
  CHECK(sum_dur <= sum_wall + 1);
  cJSON_Delete(root);
}

/* a profiler with room for 8 spans stops at the 9th and says so */
static void check_full(void) {
  dsi_prof *p = dsi_prof_new(2, 8);
  dsi_prof_step_begin(p);
  int op = dsi_prof_op(p, "tiny\"op", DSI_PROF_OTHER, 0, 0, "f32[1,8]");
  dsi_prof_op_cost(p, op, 1, 1, 1);
  for (int i = 0; i < 8; i++) dsi_prof_span(p, op, i % 2, dsi_now(), dsi_now());
  dsi_prof_step_end(p, 0, 1, 1);
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  dsi_prof_summary(p, f);
  fclose(f);
  CHECKF(!strstr(buf, "filled up") && strstr(buf, "decode"), "%s", buf);
  free(buf);
  dsi_prof_step_begin(p);
  dsi_prof_span(p, op, 0, dsi_now(), dsi_now());
  dsi_prof_step_end(p, 0, 1, 1);
  f = open_memstream(&buf, &n);
  dsi_prof_summary(p, f);
  fclose(f);
  CHECKF(strstr(buf, "filled up") && strstr(buf, "1 step,"), "%s", buf);
  free(buf);
  /* the quote in the op's name is escaped */
  char path[64];
  snprintf(path, sizeof path, "/tmp/dsinfer_test_prof_full_%d.json", (int)getpid());
  dsi_err err = {0};
  CHECK(dsi_prof_write_trace(p, path, &err) == 0);
  char *text;
  size_t len;
  if (CHECK(dsi_read_file(path, &text, &len, &err) == 0)) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    CHECK(root && strstr(text, "tiny\\\"op"));
    cJSON_Delete(root);
    free(text);
  }
  unlink(path);
  dsi_prof_free(p);
}

int main(void) {
  dsi_model *m;
  dsi_err err = {0};
  if (dsi_model_open(&m, "golden/tiny-bf16/model", NULL, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  dsi_model_info info;
  dsi_model_get_info(m, &info);
  int V = info.vocab_size;
  float *lg_off = malloc((size_t)N_STEPS * V * sizeof(float)), *lg_on = malloc((size_t)N_STEPS * V * sizeof(float));
  double wall_off[N_STEPS], wall_on[N_STEPS];
  dsi_engine *e;
  dsi_engine_opts o = {.n_threads = 2, .kv_block_size = 4};
  DSI_ASSERT(dsi_engine_open(&e, m, &o, &err) == 0);
  run(e, V, lg_off, wall_off);
  CHECK(dsi_engine_profile_write(e, "/dev/null", &err) == DSI_E_INVAL);
  dsi_engine_free(e);

  o.profile = 1;
  DSI_ASSERT(dsi_engine_open(&e, m, &o, &err) == 0);
  run(e, V, lg_on, wall_on); /* a warm-up that the reset forgets */
  dsi_engine_profile_reset(e);
  run(e, V, lg_on, wall_on);
  CHECK(memcmp(lg_on, lg_off, (size_t)N_STEPS * V * sizeof(float)) == 0);
  char path[64];
  snprintf(path, sizeof path, "/tmp/dsinfer_test_prof_%d.json", (int)getpid());
  CHECK(dsi_engine_profile_write(e, path, &err) == 0);
  check_trace(path, wall_on);
  unlink(path);
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  dsi_engine_profile_summary(e, f);
  fclose(f);
  CHECKF(strstr(buf, "prefill: 1 step,") && strstr(buf, "decode: 5 steps,") && strstr(buf, "dispatch") &&
             strstr(buf, "attention") && strstr(buf, "top ops"),
         "%s", buf);
  free(buf);
  dsi_engine_free(e);
  check_full();
  free(lg_off);
  free(lg_on);
  dsi_model_free(m);
  return check_done();
}
