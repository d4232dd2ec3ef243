/* podsim: entry point. Dispatches to one subcommand per file (cli/cmd_*.c). */
#include "config.h"

#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "driver/target.h"
#include "common/error.h"

static const PsCommand commands[] = {
  { "hlo", "read an HLO text module, validate it and print it canonically", ps_cmd_hlo },
  { "trace", "step-trace tools (check, dump, lower)", ps_cmd_trace },
  { "propagate", "complete the sharding of every instruction of an HLO module", ps_cmd_propagate },
  { "partition", "partition an HLO module into one SPMD program", ps_cmd_partition },
  { "verify", "run original and partitioned program and compare results", ps_cmd_verify },
  { "conformance", "run XLA's sharding test vectors (propagation|partitioner)", ps_cmd_conformance },
  { "simulate", "replay a step trace on a TPU v3 slice", ps_cmd_simulate },
  { "bench", "micro-benchmarks of the machine model (collective|matmul|conv)", ps_cmd_bench },
  { "run", "build, partition and simulate a model training step", ps_cmd_run },
  { "tables", "published runs next to simulated ones (dense, moe, pipeline, ...)", ps_cmd_tables },
  { "search", "rank the strategies (meshes, shardings, ...) for a model on a slice", ps_cmd_search },
  { "autoshard", "find the annotations of an HLO program: shortest simulated step under HBM", ps_cmd_autoshard },
  { "sweep", "run a grid of configurations in parallel (CSV/JSONL rows; Slurm arrays)", ps_cmd_sweep },
};

static const PsCommandGroup podsim = {
  "podsim",
  "Usage: podsim COMMAND [OPTIONS] [ARGS]\n"
  "\n"
  "Predicts how ML training steps run on a TPU v3 pod: a GSPMD-style\n"
  "partitioner and a SimGrid model of the pod, joined by step traces.\n",
  "Options:\n"
  "  -h, --help     show this help\n"
  "  --version      show the version\n"
  "\n"
  "Run 'podsim COMMAND --help' for the options of a command.\n"
  "The manual is in doc/ of the source tree.\n",
  commands, G_N_ELEMENTS (commands)
};

static int command_status; /* a command's non-zero status: it reported its error */

/* What a command printed is only known to have arrived once standard output
 * is flushed and closed: a full disk (or /dev/full) shows up here, and the
 * run must then fail instead of exiting 0 with output lost. Registered with
 * atexit, so it covers every command, --help and --version. */
static void
close_stdout (void)
{
  int err = fflush (stdout) != 0 ? errno : 0;
  gboolean failed = err != 0 || ferror (stdout);
  if (fclose (stdout) != 0 && !failed)
    {
      err = errno;
      failed = TRUE;
    }
  if (failed && command_status == 0)
    {
      fprintf (stderr, "podsim: cannot write standard output%s%s\n", err ? ": " : "",
               err ? g_strerror (err) : "");
      _exit (PS_EXIT_USAGE);
    }
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "C");
  /* Numbers are written the C way, but option values are UTF-8 text: GLib
   * converts string options from the locale's character set, which in the
   * C locale is ASCII, so `--hw café.ini` was refused ("Invalid byte
   * sequence in conversion input"), and so was a sweep's child with such a
   * value. CHARSET is GLib's override where no UTF-8 C locale exists. */
  if (!setlocale (LC_CTYPE, "C.UTF-8") && !setlocale (LC_CTYPE, "C.utf8"))
    g_setenv ("CHARSET", "UTF-8", TRUE);
  atexit (close_stdout);
  if (argc >= 2 && strcmp (argv[1], "--version") == 0)
    {
      printf ("podsim %s\n", PACKAGE_VERSION);
      return 0;
    }
  if (argc >= 2 && strcmp (argv[1], "help") == 0)
    argv[1] = (char *) "--help";
  ps_target_init ();
  command_status = ps_cli_dispatch (&podsim, argc, argv);
  return command_status;
}
