/* tools: the dsinfer command — dispatches to one function per subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsinfer.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "tools/commands.h"
#include "tools/cli.h"

static int run(int argc, char **argv);

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *help;
} k_commands[] = {
  {"bench", dsi_cmd_bench, "benchmark a model (prefill, decode, roofline), the kernels or the tokenizer"},
  {"chat", dsi_cmd_chat, "chat with a model in the terminal: multi-turn, Ctrl-C stops an answer"},
  {"detokenize", dsi_cmd_detokenize, "turn token ids back into text"},
  {"generate", dsi_cmd_generate, "generate token ids from a prompt of ids; report speed"},
  {"profile", dsi_cmd_profile, "profile one prefill and decode steps: time per op, Chrome trace"},
  {"logits", dsi_cmd_logits, "write every position's logits of one or more sequences"},
  {"plan", dsi_cmd_plan, "predict tokens/s and memory across nodes for each layout, from rates measured here"},
  {"perplexity", dsi_cmd_perplexity, "perplexity of a text file in windows (as llama-perplexity), --json"},
  {"run", dsi_cmd_run, "generate text from a prompt, streamed (with --chat: through the chat template)"},
  {"serve", dsi_cmd_serve, "serve the OpenAI API (chat, completions), metrics and a chat page over HTTP"},
  {"tokenize", dsi_cmd_tokenize, "turn text into token ids with a checkpoint's tokenizer"},
  {"mkmodel", dsi_cmd_mkmodel, "write a random-weight checkpoint (tiny, small, bench, v3slice)"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: dsinfer <command> [options]   (dsinfer <command> --help for its options)\n\ncommands:\n");
  for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
    fprintf(f, "  %-10s %s\n", k_commands[i].name, k_commands[i].help);
  fprintf(f, "  %-10s %s\n", "version", "print the version and the kernels chosen for this CPU");
}

int main(int argc, char **argv) {
  dsi_err err = {0};
  if (dsi_dist_init(&argc, &argv, &dsi_cli_dist, &err)) {
    fprintf(stderr, "dsinfer: %s\n", err.msg);
    return 1;
  }
  int rc = run(argc, argv);
  dsi_dist_free(dsi_cli_dist);
  return rc;
}

static int run(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    /* the best kernels this CPU runs, the cap DSINFER_ISA sets the commands,
     * and what BF16 and FP8 weights multiply on under it and DSINFER_BF16_DOT
     * (read as every command reads them) */
    dsi_engine_opts eo = {0};
    dsi_cli_env_opts(NULL, &eo);
    const dsi_kern *k = dsi_kern_get_dot(eo.isa ? (dsi_isa)dsi_isa_parse(eo.isa) : DSI_ISA_AMX, eo.bf16_dot);
    char route[64];
    if (k->amx) snprintf(route, sizeof route, "AMX tiles, the f32 FMAs under %d rows", DSI_AMX_MIN_ROWS);
    else snprintf(route, sizeof route, "%s", k->dot_bf16                 ? "vdpbf16ps"
                                             : k->level >= DSI_ISA_AVX2 ? "f32 FMAs"
                                                                        : "scalar");
    /* INT4 weights' kernel for 64 rows (on AMX CPUs as the race at start,
     * or DSINFER_AMX_INT4, decided) */
    int prep;
    const dsi_mat i4 = {.dtype = DSI_DTYPE_I4, .layout = DSI_LAYOUT_TILES, .block = 32};
    const char *why = k->amx_int8 ? dsi_amx_int4_choice() : "";
    printf("dsinfer %s (isa: %s%s%s; bf16/fp8 matmul: %s; int4 matmul: %s%s%s; mpi: %s)\n", DSINFER_VERSION, dsi_isa_name(),
           eo.isa ? "; DSINFER_ISA caps it at " : "", eo.isa ? eo.isa : "", route,
           dsi_gemm_kernel_name(dsi_gemm_pick(k, &i4, 64, DSI_ACT_RED_BF16, &prep)), why[0] ? ", " : "", why,
           dsi_dist_has_mpi() ? "yes" : "no");
    return 0;
  }
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "help") || !strcmp(cmd, "-h")) {
    usage(stdout);
    return 0;
  }
  for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
    if (!strcmp(cmd, k_commands[i].name)) return k_commands[i].fn(argc - 2, argv + 2);
  fprintf(stderr, "dsinfer: unknown command '%s' (see 'dsinfer --help')\n", cmd);
  return 2;
}
