/* tools: one function per `dsinfer` subcommand; each returns the process
 * exit code (0 ok, 1 failure, 2 usage error). */
#ifndef DSI_COMMANDS_H
#define DSI_COMMANDS_H

int dsi_cmd_logits(int argc, char **argv);
int dsi_cmd_generate(int argc, char **argv);
int dsi_cmd_mkmodel(int argc, char **argv);
int dsi_cmd_bench(int argc, char **argv);
/* cmd_tokenize.c; argv holds the options only (after "tokenize", or after
 * "bench tokenizer" for the benchmark) */
int dsi_cmd_tokenize(int argc, char **argv);
int dsi_cmd_detokenize(int argc, char **argv);
int dsi_cmd_bench_tokenizer(int argc, char **argv);
/* cmd_run.c: text in, text out */
int dsi_cmd_run(int argc, char **argv);
int dsi_cmd_chat(int argc, char **argv);

#endif
