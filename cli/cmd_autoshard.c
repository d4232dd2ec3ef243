/* podsim autoshard: the annotations for a user's HLO program that give the
 * shortest simulated step under the HBM limit (driver/autoshard.h). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <json-glib/json-glib.h>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "common/error.h"
#include "driver/autoshard.h"
#include "driver/driver.h"
#include "driver/target.h"

typedef struct {
  char *out;
  gboolean json, quiet;
  int top;
  gint64 limit;
  int jobs;
  int full_runs;
  int internal;
  double budget;
  char *solver;
  int dp_width, dp_rounds;
  gboolean tie_shapes;
  gboolean mesh_auto;     /* --mesh auto (taken out of argv before parsing) */
} AutoshardOptions;

/* The command line as podsim run's: autoshard's own options dropped. */
static char **
run_argv (int argc, char **argv)
{
  static const char *const with_value[] = { "-o", "--output", "--top", "--exhaustive-limit", "-j", "--jobs", "--full-runs", "--internal", "--budget", "--solver", "--dp-width", "--dp-rounds", NULL };
  static const char *const alone[] = { "--json", "-q", "--quiet", "--tie-shapes", NULL };
  GPtrArray *out = g_ptr_array_new ();
  for (int i = 1; i < argc; i++)
    {
      gboolean drop = FALSE;
      for (int k = 0; with_value[k]; k++)
        {
          size_t n = strlen (with_value[k]);
          if (strcmp (argv[i], with_value[k]) == 0)
            {
              drop = TRUE;
              i++;
            }
          else if (strncmp (argv[i], with_value[k], n) == 0 && (argv[i][n] == '=' || (n == 2 && argv[i][n])))
            drop = TRUE;
        }
      for (int k = 0; alone[k]; k++)
        drop = drop || strcmp (argv[i], alone[k]) == 0;
      if (!drop && i < argc)
        g_ptr_array_add (out, g_strdup (argv[i]));
    }
  g_ptr_array_add (out, NULL);
  return (char **) g_ptr_array_free (out, FALSE);
}

/* --mesh auto: the search on every factorization of the slice's cores (the
 * 1-D mesh and each AxB with A, B >= 2, both orders: the device order
 * makes them differ); the mesh whose best is fastest wins and is set in p
 * (for -o). `summary` gets a line per mesh. */
static PsAutoshardResult *
search_meshes (PsParams *p, char **base, const PsAutoshardOptions *ao, GString *summary, GError **error)
{
  g_autoptr (PsTarget) target = ps_target_from_params (p, error);
  if (!target)
    return NULL;
  if (!target->slice)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--mesh auto: give the slice (--slice S)");
      return NULL;
    }
  int n = ps_slice_n_cores (target->slice);
  PsAutoshardResult *best = NULL;
  g_autofree char *best_mesh = NULL;
  for (int a = 1; a <= n; a++)
    {
      if (n % a != 0 || (a > 1 && a == n) || (a == 1 && n == 1))
        continue;
      g_autofree char *mesh = a == 1 ? g_strdup_printf ("%d", n) : g_strdup_printf ("%dx%d", a, n / a);
      g_autoptr (PsParams) q = ps_params_copy (p);
      if (!ps_params_set (q, "mesh", mesh, "--mesh", error))
        return ps_autoshard_result_free (best), NULL;
      g_autoptr (GPtrArray) argv = g_ptr_array_new_with_free_func (g_free);
      for (int i = 0; base[i]; i++)
        g_ptr_array_add (argv, g_strdup (base[i]));
      g_ptr_array_add (argv, g_strdup_printf ("--mesh=%s", mesh));
      g_ptr_array_add (argv, NULL);
      if (ao->progress)
        fprintf (stderr, "autoshard: --mesh auto: mesh %s\n", mesh);
      PsAutoshardResult *r = ps_autoshard_search (q, (char **) argv->pdata, ao, error);
      if (!r)
        return ps_autoshard_result_free (best), NULL;
      const PsAutoshardCandidate *c = r->ranked->len ? r->ranked->pdata[0] : NULL;
      const PsAutoshardCandidate *b = best && best->ranked->len ? best->ranked->pdata[0] : NULL;
      if (c && c->ok)
        g_string_append_printf (summary, "mesh %-8s best step %12.6f ms  (%d costed cheaply, %d run in full)\n",
                                mesh, c->step_time_s * 1e3, r->n_estimated, r->n_evaluated);
      else
        g_string_append_printf (summary, "mesh %-8s nothing fits  (%d costed cheaply, %d run in full)\n", mesh,
                                r->n_estimated, r->n_evaluated);
      if (c && c->ok && (!b || !b->ok || c->step_time_s < b->step_time_s))
        {
          ps_autoshard_result_free (best);
          best = r;
          g_free (best_mesh);
          best_mesh = g_strdup (mesh);
        }
      else if (!best)
        {
          best = r;
          best_mesh = g_strdup (mesh);
        }
      else
        ps_autoshard_result_free (r);
    }
  if (best && !ps_params_set (p, "mesh", best_mesh, "--mesh", error))
    return ps_autoshard_result_free (best), NULL;
  g_string_append_printf (summary, "mesh %s wins\n", best_mesh ? best_mesh : "(none)");
  return best;
}

static int
autoshard (AutoshardOptions *o, PsModelOptions *mo, int argc, char **argv, char **base)
{
  GError *error = NULL;
  g_autoptr (PsParams) p = ps_model_options_params_argv (mo, argc, argv, &error);
  if (!p)
    return ps_cli_fail (error);
  if (strcmp (ps_params_family (p)->name, "hlo") != 0 || !*ps_params_str (p, "file"))
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "podsim autoshard FILE.hlo: give an HLO module "
                   "(a model family's unannotated program: podsim run FAMILY --sharding none --dump-hlo F)");
      return ps_cli_fail (error);
    }
  PsAutoshardOptions ao = { 0 };
  ao.progress = !o->quiet;
  ao.max_exhaustive = o->limit;
  ao.jobs = o->jobs;
  ao.full_runs = o->full_runs;
  ao.max_internal = o->internal;
  ao.budget_s = o->budget;
  ao.dp_width = o->dp_width;
  ao.dp_rounds = o->dp_rounds;
  ao.tie_shapes = o->tie_shapes;
  static const char *const solvers[] = { "auto", "exhaustive", "dp", "local", NULL };
  int which = -1;
  for (int k = 0; solvers[k]; k++)
    if (strcmp (o->solver ? o->solver : "auto", solvers[k]) == 0)
      which = k;
  if (which < 0)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--solver: '%s' is not auto, exhaustive, dp or local", o->solver);
      return ps_cli_fail (error);
    }
  ao.solver = (PsAutoshardSolver) which;
  if (o->internal < -1 || o->budget < 0 || o->full_runs < 0 || o->dp_width < 0 || o->dp_rounds < 0)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "%s must not be negative",
                   o->internal < -1 ? "--internal" : o->budget < 0 ? "--budget" : o->full_runs < 0 ? "--full-runs"
                   : o->dp_width < 0 ? "--dp-width" : "--dp-rounds");
      return ps_cli_fail (error);
    }
  g_autoptr (GString) meshes = g_string_new ("");
  g_autoptr (PsAutoshardResult) r = o->mesh_auto ? search_meshes (p, base, &ao, meshes, &error)
                                                 : ps_autoshard_search (p, base, &ao, &error);
  if (!r)
    return ps_cli_fail (error);
  PsAutoshardCandidate *best = r->ranked->len ? r->ranked->pdata[0] : NULL;
  if (!best || !best->ok)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_NO_FIT, "autoshard: no candidate of %" G_GINT64_FORMAT
                   " ran and fit: %s", r->space, best && best->why ? best->why : "no parameters to shard");
      return ps_cli_fail (error);
    }
  if (o->out)
    {
      /* The best annotations run once more, writing the annotated module. */
      g_autoptr (PsParams) q = ps_params_copy (p);
      g_autoptr (PsTarget) target = NULL;
      if (!ps_params_set (q, "shard", best->shard, "autoshard", &error)
          || !(target = ps_target_from_params (q, &error)))
        return ps_cli_fail (error);
      PsDriverFamily fb = { q, target };
      PsDriverOptions d;
      ps_driver_options_init (&d);
      d.build = ps_driver_build_family;
      d.build_data = &fb;
      d.target = target;
      d.stop_after = PS_STAGE_PROPAGATE;
      d.dump_hlo = o->out;
      g_autoptr (PsDriverResult) dr = ps_driver_run (&d, NULL, &error);
      if (!dr)
        return ps_cli_fail (error);
    }
  int top = o->top > 0 ? o->top : 10;
  if (o->json)
    {
      g_autoptr (JsonBuilder) b = json_builder_new ();
      json_builder_begin_object (b);
      if (o->mesh_auto)
        {
          g_autofree char *mesh = ps_params_text (p, "mesh");
          json_builder_set_member_name (b, "mesh");
          json_builder_add_string_value (b, mesh);
        }
      json_builder_set_member_name (b, "params");
      json_builder_add_int_value (b, r->n_params);
      json_builder_set_member_name (b, "internal");
      json_builder_add_int_value (b, r->n_internal);
      json_builder_set_member_name (b, "space");
      json_builder_add_int_value (b, r->space);
      json_builder_set_member_name (b, "solver");
      json_builder_add_string_value (b, r->solver);
      if (r->dp_chain > 0)
        {
          json_builder_set_member_name (b, "dp_chain");
          json_builder_add_int_value (b, r->dp_chain);
          json_builder_set_member_name (b, "dp_rounds");
          json_builder_add_int_value (b, r->dp_rounds);
          json_builder_set_member_name (b, "dp_measured");
          json_builder_add_int_value (b, r->dp_measured);
          json_builder_set_member_name (b, "dp_pairs");
          json_builder_add_int_value (b, r->dp_pairs);
          json_builder_set_member_name (b, "dp_best_cheap_step_s");
          json_builder_add_double_value (b, r->dp_best_s);
        }
      json_builder_set_member_name (b, "evaluated");
      json_builder_add_int_value (b, r->n_evaluated);
      json_builder_set_member_name (b, "stopped_by_budget");
      json_builder_add_boolean_value (b, r->stopped);
      json_builder_set_member_name (b, "estimated");
      json_builder_add_int_value (b, r->n_estimated);
      if (r->exhaustive)
        {
          json_builder_set_member_name (b, "cheap_rank_correlation");
          json_builder_add_double_value (b, r->rank_correlation);
          json_builder_set_member_name (b, "cheap_best_full_rank");
          json_builder_add_int_value (b, r->cheap_best_rank);
        }
      json_builder_set_member_name (b, "ranking");
      json_builder_begin_array (b);
      for (guint i = 0; i < r->ranked->len && (int) i < top; i++)
        {
          PsAutoshardCandidate *c = r->ranked->pdata[i];
          json_builder_begin_object (b);
          json_builder_set_member_name (b, "shard");
          json_builder_add_string_value (b, c->shard);
          json_builder_set_member_name (b, "full");
          json_builder_add_boolean_value (b, c->full);
          if (c->full)
            {
              json_builder_set_member_name (b, "ok");
              json_builder_add_boolean_value (b, c->ok);
              json_builder_set_member_name (b, "step_time_s");
              json_builder_add_double_value (b, c->step_time_s);
              json_builder_set_member_name (b, "peak_hbm_bytes");
              json_builder_add_int_value (b, (gint64) c->peak_hbm_bytes);
            }
          json_builder_set_member_name (b, "cheap_fits");
          json_builder_add_boolean_value (b, c->est_ran && c->est_fits);
          json_builder_set_member_name (b, "cheap_step_time_s");
          json_builder_add_double_value (b, c->est_step_s);
          json_builder_set_member_name (b, "cheap_peak_hbm_bytes");
          json_builder_add_int_value (b, (gint64) c->est_peak_hbm_bytes);
          if (c->why)
            {
              json_builder_set_member_name (b, "why");
              json_builder_add_string_value (b, c->why);
            }
          json_builder_end_object (b);
        }
      json_builder_end_array (b);
      json_builder_end_object (b);
      g_autoptr (JsonGenerator) gen = json_generator_new ();
      g_autoptr (JsonNode) root = json_builder_get_root (b);
      json_generator_set_root (gen, root);
      json_generator_set_pretty (gen, TRUE);
      g_autofree char *text = json_generator_to_data (gen, NULL);
      printf ("%s\n", text);
      return 0;
    }
  g_autofree char *space = r->space == G_MAXINT64 ? g_strdup ("over 9e18")
                                                  : g_strdup_printf ("%" G_GINT64_FORMAT, r->space);
  g_autofree char *how = r->exhaustive ? g_strdup ("every one enumerated")
                         : g_strdup_printf ("%s%s", strcmp (r->solver, "local-search") == 0 ? "local search" : r->solver,
                                            r->stopped ? " (stopped by --budget)" : "");
  printf ("autoshard: %d parameters and %d internal tensors, %s combinations, %s, %d costed cheaply, %d run "
          "through the pipeline\n", r->n_params, r->n_internal, space, how, r->n_estimated, r->n_evaluated);
  if (r->dp_chain > 0)
    {
      g_autofree char *dp_best = r->dp_best_s > 0 ? g_strdup_printf ("%.6f ms", r->dp_best_s * 1e3)
                                                  : g_strdup ("nothing that fits");
      printf ("dp: %d variables in the chain (tensors of one shape share one), %d round%s, %d measured (%d neighbour pairs); its best (cheap) %s%s\n",
              r->dp_chain, r->dp_rounds, r->dp_rounds == 1 ? "" : "s", r->dp_measured, r->dp_pairs, dp_best,
              r->dp_fallback ? "; then the local search from no annotation" : "");
    }
  fputs (meshes->str, stdout);
  if (r->exhaustive && r->rank_correlation <= 1)
    printf ("cheap cost against the full run: Spearman rank correlation %.3f over those that fit; its best is "
            "the full run's #%d\n", r->rank_correlation, r->cheap_best_rank);
  for (guint i = 0; i < r->ranked->len && (int) i < top; i++)
    {
      PsAutoshardCandidate *c = r->ranked->pdata[i];
      const char *text = *c->shard ? c->shard : "(no annotation)";
      g_autofree char *cheap = c->est_ran && c->est_fits ? g_strdup_printf ("cheap %10.6f ms", c->est_step_s * 1e3)
                                                         : g_strdup_printf ("cheap %13s", c->est_ran ? "no fit" : "failed");
      if (!c->full)
        printf ("%2u  %s  peak %12" G_GUINT64_FORMAT " B  %s  (not run in full: cheap cost behind the best %d)\n",
                i + 1, cheap, c->est_peak_hbm_bytes, text, r->n_evaluated);
      else if (c->ok)
        printf ("%2u  step %10.6f ms  %s  peak %12" G_GUINT64_FORMAT " B  %s%s\n", i + 1, c->step_time_s * 1e3,
                cheap, c->peak_hbm_bytes, text,
                i == 0 ? "" : c->step_time_s == best->step_time_s ? "  (same step; higher peak or more annotations)"
                                                                    : "  (slower)");
      else
        printf ("%2u  lost: %s  %s\n", i + 1, c->why ? c->why : "did not run", text);
    }
  if (o->out)
    printf ("wrote %s (podsim run %s --slice ... --mesh ... runs it)\n", o->out, o->out);
  return 0;
}

int
ps_cmd_autoshard (int argc, char **argv)
{
  AutoshardOptions o = { 0 };
  o.internal = -1;
  GOptionEntry entries[] = {
    { "output", 'o', 0, G_OPTION_ARG_FILENAME, &o.out, "Write the module with the best annotations", "OUT.hlo" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &o.json, "Print the ranking as one JSON object", NULL },
    { "top", 0, 0, G_OPTION_ARG_INT, &o.top, "Rows of the ranking to print (default 10)", "N" },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &o.quiet, "No progress lines on stderr", NULL },
    { "jobs", 'j', 0, G_OPTION_ARG_INT, &o.jobs, "Pipeline runs in parallel (default: the processors)", "N" },
    { "exhaustive-limit", 0, 0, G_OPTION_ARG_INT64, &o.limit, "Enumerate every combination up to this many (each run in full), else the DP under the cheap cost (default 256)", "N" },
    { "internal", 0, 0, G_OPTION_ARG_INT, &o.internal, "Search the shardings of up to N internal tensors too, largest first: the values while loops carry that are not parameters, then the first dot or convolution result of each shape (default 8; 0: parameters only)", "N" },
    { "tie-shapes", 0, 0, G_OPTION_ARG_NONE, &o.tie_shapes, "Internal tensors: every dot or convolution result or operand of each of the --internal shapes, the shapes chosen from the operands too, one variable per shape for the DP (an MoE's dispatch masks and expert inputs; off by default: doc/manual.md)", NULL },
    { "budget", 0, 0, G_OPTION_ARG_DOUBLE, &o.budget, "Stop the DP or the local search after this many seconds and run its best so far in full (default: no limit)", "S" },
    { "full-runs", 0, 0, G_OPTION_ARG_INT, &o.full_runs, "DP and local search: run this many of the cheapest candidates through the full pipeline (default 8)", "N" },
    { "solver", 0, 0, G_OPTION_ARG_STRING, &o.solver, "auto (default: exhaustive up to --exhaustive-limit combinations, else dp), exhaustive, dp (a dynamic program over the chain of tensors, in rounds) or local (the local search of many-tensor moves)", "NAME" },
    { "dp-width", 0, 0, G_OPTION_ARG_INT, &o.dp_width, "DP: candidates kept per variable (the tensors of one shape) besides its base, half by step, half by peak (default 4)", "N" },
    { "dp-rounds", 0, 0, G_OPTION_ARG_INT, &o.dp_rounds, "DP: rounds, the first around no annotation, each later one around the best so far, until one gains under 0.01 % (default: at most 8)", "N" },
    { NULL }
  };
  /* --mesh auto is no mesh to the parser: taken out here, searched over. */
  for (int i = 1; i < argc; i++)
    {
      int drop = strcmp (argv[i], "--mesh=auto") == 0 ? 1
                 : strcmp (argv[i], "--mesh") == 0 && i + 1 < argc && strcmp (argv[i + 1], "auto") == 0 ? 2 : 0;
      if (drop)
        {
          o.mesh_auto = TRUE;
          memmove (argv + i, argv + i + drop, sizeof (char *) * (size_t) (argc - i - drop + 1));
          argc -= drop;
          i--;
        }
    }
  g_auto (GStrv) base = run_argv (argc, argv);
  g_autoptr (PsModelOptions) mo = ps_model_options_new (argc, argv, entries, NULL);
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE.hlo --slice S --mesh AxB|auto - find the annotations");
  g_option_context_set_main_group (ctx, ps_model_options_group (mo));
  g_option_context_set_description (ctx,
    "Enumerates candidate shardings of every entry parameter (replicated, one dimension\n"
    "over one mesh axis, two dimensions over two axes), runs each combination through\n"
    "propagation, partitioning, the exact memory analysis and the replay on the slice,\n"
    "and ranks them by simulated step time among those that fit in HBM. Every\n"
    "combination is run when there are at most 256. Otherwise, under a cheap cost (the\n"
    "same pipeline in this process up to the trace, its compute and collectives costed\n"
    "in closed form), a dynamic program over the chain of tensors in the order the\n"
    "layer structure uses them (a cost per tensor's choice and per neighbour pair,\n"
    "measured; the HBM limit by Lagrangian relaxation), in rounds around the best so far;\n"
    "--solver local: a local search moving many tensors at once instead. The best few\n"
    "(--full-runs) are run in full.\n"
    "--mesh auto searches every factorization of the slice's cores (the 1-D mesh and\n"
    "each AxB) and keeps the fastest.\n"
    "Example: podsim autoshard prog.hlo --slice v3-8 --mesh 2x4 -o best.hlo\n"
    "See doc/manual.md (Automatic sharding).\n");
  int rc = PS_EXIT_USAGE;
  if (ps_cli_parse (ctx, &argc, &argv))
    rc = autoshard (&o, mo, argc, argv, base);
  g_free (o.out);
  g_free (o.solver);
  return rc;
}
