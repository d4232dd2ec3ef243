/* podsim tables spatial|speech: the 3D U-Net's spatial-partitioning series
 * and the Conformer's weak and strong scaling (doc/validation.md, "Image"
 * and "Speech"). Every row is a child `podsim run --json` of a preset with
 * a few options changed (the command a user reruns); a row that does not
 * fit in HBM is shown as such, with the peak it would need. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/tables.h"
#include "common/error.h"

typedef struct {
  GPtrArray *args;          /* `podsim run` arguments (owned strings) */
  gboolean fits;
  double step_s, items_per_s, mfu, mxu, peak_bytes;
} Run;

static void
run_init (Run *r, const char *preset)
{
  memset (r, 0, sizeof *r);
  r->args = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (r->args, g_strdup ("--preset"));
  g_ptr_array_add (r->args, g_strdup (preset));
}

static void
run_arg (Run *r, const char *option, const char *fmt, ...) G_GNUC_PRINTF (3, 4);

static void
run_arg (Run *r, const char *option, const char *fmt, ...)
{
  g_ptr_array_add (r->args, g_strdup (option));
  if (!fmt)
    return;
  va_list ap;
  va_start (ap, fmt);
  g_ptr_array_add (r->args, g_strdup_vprintf (fmt, ap));
  va_end (ap);
}

/* The smallest slice with at least n cores; the program leaves the rest
 * idle when it has fewer. */
static void
run_slice (Run *r, int64_t n)
{
  static const int64_t slices[] = { 8, 32, 64, 128, 256, 512, 1024, 2048 };
  int64_t s = slices[G_N_ELEMENTS (slices) - 1];
  for (gsize i = 0; i < G_N_ELEMENTS (slices); i++)
    if (slices[i] >= n)
      {
        s = slices[i];
        break;
      }
  run_arg (r, "--slice", "v3-%" G_GINT64_FORMAT, s);
  if (n < s)
    run_arg (r, "--idle-cores", NULL);
}

/* The command line of a row, for progress and errors. transfer full. */
static char *
run_text (const Run *r)
{
  GString *s = g_string_new ("podsim run");
  for (guint i = 0; i < r->args->len; i++)
    g_string_append_printf (s, " %s", (const char *) r->args->pdata[i]);
  return g_string_free (s, FALSE);
}

/* Runs every row (a progress line on a terminal); FALSE on an error other
 * than not fitting, naming the row's command. */
static gboolean
run_all (Run *runs, int n, const PsTablesOptions *o, GError **error)
{
  for (int i = 0; i < n; i++)
    {
      Run *r = &runs[i];
      g_autofree char *cmd = run_text (r);
      ps_progress (o->progress, NULL);
      ps_progress (o->progress, "podsim tables: %d/%d: %s ...", i + 1, n, cmd);
      g_ptr_array_add (r->args, NULL);
      GError *local = NULL;
      g_autoptr (JsonParser) parser = ps_tables_run ((const char *const *) r->args->pdata, o, &local);
      g_ptr_array_remove_index (r->args, r->args->len - 1);
      if (!parser && !g_error_matches (local, PS_ERROR, PS_ERROR_NO_FIT))
        {
          ps_progress (o->progress, NULL);
          g_propagate_prefixed_error (error, local, "%s: ", cmd);
          return FALSE;
        }
      if (!parser)
        {
          r->peak_bytes = ps_tables_peak_of_message (local->message);
          g_error_free (local);
          continue;
        }
      JsonObject *j = json_node_get_object (json_parser_get_root (parser));
      r->fits = TRUE;
      r->step_s = ps_study_json_double (j, "step_time_s");
      r->items_per_s = ps_study_json_double (j, "throughput_per_s");
      r->mfu = ps_study_json_double (j, "model_flops_utilization");
      r->mxu = ps_study_json_double (j, "mxu_utilization");
      r->peak_bytes = ps_study_json_double (j, "peak_hbm_bytes");
    }
  ps_progress (o->progress, NULL);
  return TRUE;
}

static void
runs_free (Run *runs, int n)
{
  for (int i = 0; i < n; i++)
    g_ptr_array_free (runs[i].args, TRUE);
}

typedef enum { TEXT, CSV, MARKDOWN } Format;

/* A number, or the mark of a missing one: "" in CSV, "-" otherwise. */
static char *
num (Format f, gboolean have, const char *fmt, double v)
{
  if (!have)
    return g_strdup (f == CSV ? "" : "-");
  char buf[64];
  g_snprintf (buf, sizeof buf, fmt, v);
  return g_strdup (buf);
}

/* One row's cells, joined as the format wants; `widths` for text. */
static void
print_cells (Format f, int n, char **cells, const int *widths)
{
  for (int i = 0; i < n; i++)
    {
      if (f == CSV)
        printf ("%s%s", i ? "," : "", cells[i]);
      else if (f == MARKDOWN)
        printf ("%s %s", i ? " |" : "|", cells[i]);
      else
        printf ("%s%*s", i ? " " : "", widths[i], cells[i]);
    }
  puts (f == MARKDOWN ? " |" : "");
}

static void
print_header (Format f, int n, const char *const *text, const char *const *csv, const int *widths)
{
  print_cells (f, n, (char **) (f == CSV ? csv : text), widths);
  if (f == MARKDOWN)
    {
      for (int i = 0; i < n; i++)
        fputs ("|---", stdout);
      puts ("|");
    }
}

static const double GIB = 1024.0 * 1024.0 * 1024.0;

/* Whether a row fits in HBM: 1/0 in CSV, yes/no otherwise. */
static char *
fits_cell (Format f, gboolean fits)
{
  return g_strdup (f == CSV ? (fits ? "1" : "0") : fits ? "yes" : "no");
}

/* The last two cells of every row: whether it fits, and its peak HBM in
 * GiB (marked "> HBM" when it does not fit). */
static void
fit_cells (Format f, gboolean fits, double peak_bytes, char **cells)
{
  cells[0] = fits_cell (f, fits);
  cells[1] = f == CSV ? g_strdup_printf ("%.3f", peak_bytes / GIB)
                      : g_strdup_printf ("%.2f GiB%s", peak_bytes / GIB, fits ? "" : " > HBM");
}

/* Prints one row's n cells and frees them. */
static void
print_row (Format f, int n, char **cells, const int *widths)
{
  print_cells (f, n, cells, widths);
  for (int c = 0; c < n; c++)
    g_free (cells[c]);
}

/* ---- spatial -------------------------------------------------------------- */

/* The GSPMD paper's figures (../shared/reference/seed-figures.md). */
#define SEED_SPEEDUP_16 15.7
#define SEED_UTIL_32 2.0

typedef struct {
  int64_t image, batch, split[3];
} SpatialRow;

int
ps_tables_spatial (gboolean csv, gboolean markdown, const PsTablesOptions *o)
{
  /* 128^3 at batch 1 over 1 to 16 partitions (each doubling splits the
   * next dim: D, then H, then W, then D again), and a 256^3 image on one
   * core and 32-way (4 x 4 x 2) at batches 1 to 32. */
  static const SpatialRow rows[] = {
    { 128, 1, { 1, 1, 1 } }, { 128, 1, { 2, 1, 1 } }, { 128, 1, { 2, 2, 1 } }, { 128, 1, { 2, 2, 2 } },
    { 128, 1, { 4, 2, 2 } },
    { 256, 1, { 1, 1, 1 } }, { 256, 1, { 4, 4, 2 } }, { 256, 2, { 4, 4, 2 } }, { 256, 4, { 4, 4, 2 } },
    { 256, 8, { 4, 4, 2 } }, { 256, 16, { 4, 4, 2 } }, { 256, 32, { 4, 4, 2 } },
  };
  enum { N = G_N_ELEMENTS (rows) };
  Run runs[N];
  for (int i = 0; i < N; i++)
    {
      const SpatialRow *s = &rows[i];
      run_init (&runs[i], s->image == 128 ? "Unet3d128" : "Unet3d256S32");
      run_arg (&runs[i], "--batch", "%" G_GINT64_FORMAT, s->batch);
      run_arg (&runs[i], "--spatial", "%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT,
               s->split[0], s->split[1], s->split[2]);
      run_slice (&runs[i], s->split[0] * s->split[1] * s->split[2]);
    }
  GError *error = NULL;
  if (!run_all (runs, N, o, &error))
    {
      runs_free (runs, N);
      return ps_cli_fail (error);
    }
  const Run *base = &runs[0];
  /* The 32-way row with the largest batch that fits: the seed's "larger
   * per-device batch". */
  int best32 = -1;
  for (int i = 0; i < N; i++)
    if (rows[i].image == 256 && rows[i].split[0] * rows[i].split[1] * rows[i].split[2] == 32 && runs[i].fits)
      best32 = i;
  Format f = csv ? CSV : markdown ? MARKDOWN : TEXT;
  static const char *const head[] = { "image", "batch", "partitions", "D x H x W", "step (ms)", "images/s",
                                      "speedup", "seed speedup", "efficiency", "FLOPS util", "util / 1 part.",
                                      "seed util", "MXU util", "fits", "peak HBM/core" };
  static const char *const head_csv[] = { "image", "batch", "partitions", "split", "step_time_s", "images_per_s",
                                          "speedup", "seed_speedup", "efficiency", "flops_utilization",
                                          "utilization_vs_1_partition", "seed_utilization_vs_1_partition",
                                          "mxu_utilization", "fits", "peak_hbm_gib" };
  static const int widths[] = { 5, 5, 10, 9, 10, 8, 7, 12, 10, 10, 14, 9, 8, 4, 15 };
  enum { C = G_N_ELEMENTS (head) };
  print_header (f, C, head, head_csv, widths);
  for (int i = 0; i < N; i++)
    {
      const SpatialRow *s = &rows[i];
      const Run *r = &runs[i];
      int64_t parts = s->split[0] * s->split[1] * s->split[2];
      gboolean ok = r->fits, same = ok && s->image == 128 && base->fits;
      double speedup = same ? base->step_s / r->step_s : 0;
      gboolean seed_s = s->image == 128 && parts == 16, seed_u = i == best32;
      char *cells[C];
      cells[0] = g_strdup_printf ("%" G_GINT64_FORMAT "^3", s->image);
      cells[1] = g_strdup_printf ("%" G_GINT64_FORMAT, s->batch);
      cells[2] = g_strdup_printf ("%" G_GINT64_FORMAT, parts);
      cells[3] = g_strdup_printf ("%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, s->split[0],
                                  s->split[1], s->split[2]);
      if (ok)
        cells[4] = f == CSV ? g_strdup_printf ("%.6f", r->step_s) : g_strdup_printf ("%.1f", 1e3 * r->step_s);
      else
        cells[4] = g_strdup (f == CSV ? "" : "no fit");
      cells[5] = num (f, ok, f == CSV ? "%.4f" : "%.1f", r->items_per_s);
      cells[6] = num (f, same, f == CSV ? "%.4f" : "%.2fx", speedup);
      cells[7] = num (f, seed_s, f == CSV ? "%.1f" : "%.1fx", SEED_SPEEDUP_16);
      cells[8] = num (f, same, f == CSV ? "%.4f" : "%.0f %%", f == CSV ? speedup / parts : 100 * speedup / parts);
      cells[9] = num (f, ok, f == CSV ? "%.4f" : "%.1f %%", f == CSV ? r->mfu : 100 * r->mfu);
      cells[10] = num (f, ok && base->fits, f == CSV ? "%.4f" : "%.2fx", r->mfu / base->mfu);
      cells[11] = num (f, seed_u, f == CSV ? "%.1f" : "%.1fx", SEED_UTIL_32);
      cells[12] = num (f, ok, f == CSV ? "%.4f" : "%.1f %%", f == CSV ? r->mxu : 100 * r->mxu);
      fit_cells (f, ok, r->peak_bytes, cells + 13);
      print_row (f, C, cells, widths);
    }
  runs_free (runs, N);
  return 0;
}

/* ---- speech --------------------------------------------------------------- */

/* Weak scaling: ConformerL at its 8 utterances per core, data parallel
 * over every core. Strong scaling: a fixed batch of STRONG_BATCH
 * utterances, data parallel up to one utterance per core, then 2-D
 * sharding over [STRONG_BATCH, cores / STRONG_BATCH]. */
#define WEAK_PER_CORE 8
#define STRONG_BATCH 256

typedef struct {
  gboolean weak;
  int64_t cores, data, model, batch;
} SpeechRow;

int
ps_tables_speech (gboolean csv, gboolean markdown, const PsTablesOptions *o)
{
  enum { N_CORES = 9, N = 2 * N_CORES };
  SpeechRow rows[N];
  Run runs[N];
  for (int i = 0; i < N; i++)
    {
      SpeechRow *s = &rows[i];
      s->weak = i < N_CORES;
      s->cores = (int64_t) 8 << (i % N_CORES);
      s->batch = s->weak ? WEAK_PER_CORE * s->cores : STRONG_BATCH;
      s->data = MIN (s->cores, s->batch);
      s->model = s->cores / s->data;
      run_init (&runs[i], "ConformerL");
      run_arg (&runs[i], "--batch", "%" G_GINT64_FORMAT, s->batch);
      run_arg (&runs[i], "--mesh", "%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, s->data, s->model);
      run_arg (&runs[i], "--sharding", "%s", s->model == 1 ? "dp" : "2d");
      run_slice (&runs[i], s->cores);
    }
  GError *error = NULL;
  if (!run_all (runs, N, o, &error))
    {
      runs_free (runs, N);
      return ps_cli_fail (error);
    }
  Format f = csv ? CSV : markdown ? MARKDOWN : TEXT;
  static const char *const head[] = { "scaling", "cores", "mesh", "sharding", "batch", "step (s)",
                                      "utterances/s", "per core", "FLOPS util", "MXU util", "efficiency",
                                      "fits", "peak HBM/core" };
  static const char *const head_csv[] = { "scaling", "cores", "mesh", "sharding", "global_batch", "step_time_s",
                                          "utterances_per_s", "utterances_per_s_per_core", "flops_utilization",
                                          "mxu_utilization", "scaling_efficiency", "fits", "peak_hbm_gib" };
  static const int widths[] = { 7, 5, 7, 8, 6, 8, 12, 8, 10, 8, 10, 4, 15 };
  enum { C = G_N_ELEMENTS (head) };
  print_header (f, C, head, head_csv, widths);
  for (int i = 0; i < N; i++)
    {
      const SpeechRow *s = &rows[i];
      const Run *r = &runs[i], *base = &runs[s->weak ? 0 : N_CORES];
      gboolean ok = r->fits, eff_ok = ok && base->fits;
      /* weak: throughput per core against the 8-core row's; strong: the
       * speedup over 8 cores against the cores' ratio (both the same). */
      double per_core = r->items_per_s / (double) s->cores;
      double eff = eff_ok ? per_core / (base->items_per_s / 8.0) : 0;
      char *cells[C];
      cells[0] = g_strdup (s->weak ? "weak" : "strong");
      cells[1] = g_strdup_printf ("%" G_GINT64_FORMAT, s->cores);
      cells[2] = g_strdup_printf ("%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT, s->data, s->model);
      cells[3] = g_strdup (s->model == 1 ? "dp" : "2d");
      cells[4] = g_strdup_printf ("%" G_GINT64_FORMAT, s->batch);
      cells[5] = ok ? g_strdup_printf (f == CSV ? "%.6f" : "%.3f", r->step_s) : g_strdup (f == CSV ? "" : "no fit");
      cells[6] = num (f, ok, f == CSV ? "%.2f" : "%.0f", r->items_per_s);
      cells[7] = num (f, ok, f == CSV ? "%.4f" : "%.1f", per_core);
      cells[8] = num (f, ok, f == CSV ? "%.4f" : "%.1f %%", f == CSV ? r->mfu : 100 * r->mfu);
      cells[9] = num (f, ok, f == CSV ? "%.4f" : "%.1f %%", f == CSV ? r->mxu : 100 * r->mxu);
      cells[10] = num (f, eff_ok, f == CSV ? "%.4f" : "%.0f %%", f == CSV ? eff : 100 * eff);
      fit_cells (f, ok, r->peak_bytes, cells + 11);
      print_row (f, C, cells, widths);
    }
  runs_free (runs, N);
  return 0;
}
