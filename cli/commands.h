/* The podsim subcommands. Each lives in its own file cli/cmd_<name>.c and is
 * called with argv[0] set to "podsim <name>"; it parses its own options with
 * GOptionContext, prints errors as one line "podsim: message" on stderr and
 * returns the exit status (0 ok, 1 a check that ran and failed, 2 bad input or
 * options). */
#ifndef PS_CLI_COMMANDS_H
#define PS_CLI_COMMANDS_H

#include <glib.h>

#include "partitioner/propagate/propagate.h"

typedef int (*PsCommandFn) (int argc, char **argv);

typedef struct {
  const char *name;
  const char *summary;
  PsCommandFn fn;
} PsCommand;

/* A command with sub-commands ("podsim", "podsim bench", ...). */
typedef struct {
  const char *prefix;        /* "podsim bench": the program name so far */
  const char *usage;         /* help text before the list of sub-commands */
  const char *footer;        /* help text after the list, or NULL */
  const PsCommand *commands;
  gsize n_commands;
} PsCommandGroup;

/* Runs the sub-command argv[1] of `g` with argv[0] (and the prgname) set to
 * "<prefix> <name>". --help/-h print the help on stdout (exit 0); no
 * sub-command prints it on stderr and an unknown one prints
 * "<prefix>: unknown command 'x' (one of: a, b; see '<prefix> --help')",
 * both exit 2. */
int ps_cli_dispatch (const PsCommandGroup *g, int argc, char **argv);

int ps_cmd_hlo (int argc, char **argv);
int ps_cmd_trace (int argc, char **argv);
int ps_cmd_propagate (int argc, char **argv);
int ps_cmd_conformance (int argc, char **argv);
int ps_cmd_partition (int argc, char **argv);
int ps_cmd_verify (int argc, char **argv);
int ps_cmd_simulate (int argc, char **argv);
int ps_cmd_bench (int argc, char **argv);
int ps_cmd_run (int argc, char **argv);
int ps_cmd_tables (int argc, char **argv);
int ps_cmd_sweep (int argc, char **argv);
int ps_cmd_search (int argc, char **argv);
int ps_cmd_autoshard (int argc, char **argv);
int ps_cmd_bench_matmul (int argc, char **argv);
int ps_cmd_bench_conv (int argc, char **argv);
int ps_cmd_bench_collective (int argc, char **argv);
int ps_cmd_conformance_propagation (int argc, char **argv);
int ps_cmd_conformance_partitioner (int argc, char **argv);

/* Shared helpers (cli/util.c). */

/* How a module read from a file enters the driver (driver/driver.h
 * PsDriverOptions: n_devices, to_output, to_parameters): the options
 * --devices/-n, --to-output and --to-parameters, declared here once for
 * partition, verify and propagate. */
typedef struct {
  gint64 devices;
  gboolean to_output, to_parameters;
  char *module_name;         /* --module; g_free it */
} PsCliModuleOptions;
/* Writes the entries to out (with_devices: 4, else 3: --devices, --to-output,
 * --to-parameters, --module); returns how many. */
int ps_cli_module_entries (PsCliModuleOptions *o, gboolean with_devices, GOptionEntry *out);
/* --module NAME: which module of a file holding several (every command
 * that reads an HLO file). */
GOptionEntry ps_cli_module_name_entry (char **name);
/* --devices/-n N: how many devices a module is partitioned for or runs on
 * (partition, verify, trace lower). */
GOptionEntry ps_cli_devices_entry (gint64 *devices);
void ps_cli_module_options_clear (PsCliModuleOptions *o);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (PsCliModuleOptions, ps_cli_module_options_clear)
/* Prints "podsim: <error message>" and returns PS_EXIT_USAGE. Frees error. */
int ps_cli_fail (GError *error);
/* The same for a message of the command's own: every error a command
 * reports goes through these two. */
int ps_cli_failf (const char *fmt, ...) G_GNUC_PRINTF (1, 2);
/* Parses options; on error prints it and returns FALSE (exit 2). */
gboolean ps_cli_parse (GOptionContext *ctx, int *argc, char ***argv);
/* Before parsing argv with entries from ps_cli_param_entries: a boolean
 * option takes its value only after '=', so "--key=true" and "--key=false"
 * become "--key" and "--no-key" (argv[i] then points to an interned
 * string); "--key=other", "--no-key=anything" and "--key true" (a value as
 * the next word) are refused with a message that says how to write it.
 * Every command that parses such entries calls it (ps_cli_parse does).
 * ps_cli_bool_option_add names a boolean option (without "--"; the
 * name is copied), as ps_cli_param_entries does for each it declares. */
void ps_cli_bool_option_add (const char *name);
gboolean ps_cli_param_argv_rewrite (int argc, char **argv, GError **error);
/* The same for a command of one operand (`what` names it: "FILE.hlo"):
 * another count is the usage error "podsim CMD: expected one WHAT (see
 * 'podsim CMD --help')", FALSE (exit 2). */
gboolean ps_cli_parse_one (GOptionContext *ctx, int *argc, char ***argv, const char *what);
/* Reads an HLO module (ps_hlo_load) that is still to be partitioned: an
 * already partitioned one (a per-device program) is a PS_ERROR_UNSUPPORTED
 * error that points to `podsim run FILE`. transfer full. */
PsModule *ps_cli_load_unpartitioned (const char *path, const char *module_name, GError **error);
/* Reads a whole file or, for "-", standard input. */
gboolean ps_cli_read_input (const char *path, char **out, gsize *len, GError **error);
/* Runs fn (data) in a forked child under a time limit, so that a crash or
 * a hang of one conformance case fails that case, not the run: the child
 * sends back the GString fn returns through a pipe. Returns what arrived
 * (transfer full, possibly partial) and sets *why to NULL when the child
 * finished, else to "timed out after N s", "crashed (signal N: name)" or
 * "exited with status N" (transfer full). Returns NULL with *why set when
 * it cannot fork or make a pipe. */
typedef GString *(*PsIsolatedFn) (gpointer data);
GString *ps_cli_run_isolated (PsIsolatedFn fn, gpointer data, gint64 timeout_s, char **why);
#endif
