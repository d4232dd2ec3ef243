/* podsim verify FILE.hlo --devices N [--seed S] [--no-scale] [--dump-scaled OUT.hlo]
 *
 * Propagates shardings, partitions for N devices, then runs the original
 * module and the SPMD program on the same random inputs with the reference
 * interpreter and says whether every output agrees. A module over the
 * interpreter's limits is checked on a scaled copy that partitions into the
 * same program (partitioner/interp/shrink.h) unless --no-scale. Exit 0: they agree;
 * 1: they do not; 2: bad input (unreadable file, partitioner or interpreter
 * error, too large to check). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "driver/driver.h"
#include "common/error.h"
#include "partitioner/hlo/hlo_printer.h"
#include "partitioner/interp/shrink.h"
#include "partitioner/spmd/spmd.h"
#include "partitioner/interp/verify.h"

/* --max-work takes a count as its help writes it: 2000000000, 2e9, 1.5e8. */
static gint64 max_work_value;

static gboolean
parse_max_work (const char *name, const char *value, gpointer data, GError **error)
{
  (void) data;
  char *end = NULL;
  double v = g_ascii_strtod (value, &end);
  if (!end || end == value || *end || !(v >= 0) || v > 4.6e18 || v != floor (v))
    {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "%s %s: expected a whole number "
                   ">= 0 such as 2000000000 or 2e9", name, value);
      return FALSE;
    }
  max_work_value = (gint64) v;
  return TRUE;
}

int
ps_cmd_verify (int argc, char **argv)
{
  gint64 seed = 1, max_work = 0;
  gboolean no_scale = FALSE;
  g_auto (PsCliModuleOptions) mod = { 0 };
  char *dump_scaled = NULL;
  GOptionEntry entries[] = {
    { 0 }, { 0 }, { 0 }, { 0 }, /* ps_cli_module_entries */
    { "seed", 's', 0, G_OPTION_ARG_INT64, &seed, "Seed of the random inputs (default 1)", "S" },
    { "max-work", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) parse_max_work,
      "Give up after this many interpreted element operations (default 2e9)", "OPS" },
    { "no-scale", 0, 0, G_OPTION_ARG_NONE, &no_scale,
      "Fail when the module is over the interpreter's limits instead of checking a scaled copy", NULL },
    { "dump-scaled", 0, 0, G_OPTION_ARG_FILENAME, &dump_scaled,
      "Write a scaled copy of the (propagated) module to OUT.hlo and check the module "
      "through that copy", "OUT.hlo" },
    { NULL, 0, 0, 0, NULL, NULL, NULL }
  };
  ps_cli_module_entries (&mod, TRUE, entries);
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE.hlo - check a partitioning by running it");
  g_option_context_set_summary (ctx,
    "Propagates shardings through FILE.hlo and partitions it for N devices, then runs the\n"
    "original module and the SPMD program on the same random inputs with the reference\n"
    "interpreter and compares every device's piece of every output: exactly for integers\n"
    "and pred, within a relative + absolute tolerance for floats (f32: 1e-4 + 1e-3,\n"
    "bf16: 2e-2 + 1e-1, f16: 1e-2 + 5e-2, f64: 1e-9 + 1e-9; see doc/interpreter.md).\n"
    "A module over the interpreter's limits is checked on a scaled copy: dims whose size the\n"
    "program does not depend on are made smaller (keeping their remainder modulo the shard\n"
    "counts), and the copy must partition into the same program as the original.\n"
    "Exit status: 0 all outputs agree, 1 an output differs, 2 bad input or too large.");
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!ps_cli_parse_one (ctx, &argc, &argv, "FILE.hlo"))
    return PS_EXIT_USAGE;
  /* The interpreter runs every device: 65536 devices of a tiny module took
   * 25 s and 2.9 GB (doc/robustness.md). */
  gint64 devices = mod.devices;
  if (devices < 1 || devices > PS_VERIFY_MAX_DEVICES)
    {
      return ps_cli_failf ("--devices N is required and must be between 1 and %d", PS_VERIFY_MAX_DEVICES);
    }
  max_work = max_work_value;
  if (seed < 0 || max_work < 0)
    {
      return ps_cli_failf ("--seed and --max-work must not be negative");
    }
  const char *path = argv[1];
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_cli_load_unpartitioned (path, mod.module_name, &error);
  if (!m)
    return ps_cli_fail (error);
  g_autoptr (GHashTable) choices = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  PsSpmdOptions so;
  ps_spmd_options_init (&so);
  so.choices = choices;
  PsDriverOptions dopts;
  ps_driver_options_init (&dopts);
  dopts.module = m;
  dopts.n_devices = devices;
  dopts.to_output = mod.to_output;
  dopts.to_parameters = mod.to_parameters;
  dopts.spmd = &so;
  dopts.stop_after = PS_STAGE_PARTITION;
  dopts.keep_spmd = TRUE;
  g_autoptr (PsDriverResult) r = ps_driver_run (&dopts, NULL, &error);
  if (!r)
    return ps_cli_fail (error);
  const PsModule *part = r->spmd;
  PsVerifyOptions vopts;
  ps_verify_options_init (&vopts);
  vopts.seed = (guint64) seed;
  vopts.interp.rng_seed = (guint64) seed;
  vopts.interp.max_work = max_work;
  PsVerifyResult res;
  /* With --dump-scaled, one copy (remainders kept modulo the shard counts
   * and the device count) is both written and checked; otherwise
   * ps_shrink_verify tries its copies in turn. */
  PsShrinkOptions shrink_opts;
  ps_shrink_options_init (&shrink_opts);
  shrink_opts.num_devices = devices;
  if (dump_scaled)
    {
      g_autoptr (PsModule) small = ps_shrink_module (m, &shrink_opts, NULL, &error);
      if (!small)
        {
          g_prefix_error (&error, "%s: ", path);
          return ps_cli_fail (error);
        }
      g_autofree char *text = ps_hlo_print (small, NULL);
      if (!ps_write_file_atomic (dump_scaled, text, strlen (text), &error))
        return ps_cli_fail (error);
    }
  if (dump_scaled || !ps_verify_spmd (m, part, devices, &vopts, &res, &error))
    {
      if (!dump_scaled && (no_scale || !g_error_matches (error, PS_ERROR, PS_ERROR_LIMIT)))
        {
          g_prefix_error (&error, "%s: ", path);
          return ps_cli_fail (error);
        }
      g_clear_error (&error);
      PsShrinkReport rep;
      so.replay_choices = TRUE;
      if (!ps_shrink_verify (m, part, devices, &so, dump_scaled ? &shrink_opts : NULL, &vopts, &res,
                             &rep, &error))
        {
          g_prefix_error (&error, "%s: ", path);
          return ps_cli_fail (error);
        }
      printf ("%s: checked on a scaled copy (largest value %" G_GINT64_FORMAT " elements, originally %"
              G_GINT64_FORMAT "; %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT " classes of equal dims made smaller)\n",
              path, rep.max_elements_after, rep.max_elements_before, rep.n_shrunk, rep.n_classes);
    }
  int status;
  if (res.agree)
    {
      printf ("%s: %s\n", path, res.message);
      status = 0;
    }
  else
    {
      printf ("%s: MISMATCH: %s\n", path, res.message);
      status = 1;
    }
  ps_verify_result_clear (&res);
  return status;
}
