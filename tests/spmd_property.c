/* Property test of the partitioner: random small programs with random
 * shardings, partitioned and run on the reference interpreter against the
 * original (tests/spmd_testutil.c, doc/robustness.md).
 *
 * Each case is a function of its seed alone: 1 to 3 parameters of rank 1 to
 * 3 (dims 1 .. 8, f32), then 2 to 8 ops drawn from element-wise unary and
 * binary ops, dots (with and without batch dims), reductions (sum, max),
 * reshapes (merge, split), transposes, slices (strided), concatenates,
 * pads, broadcasts and 1-D and 2-D convolutions (window, padding, stride,
 * base and window dilation), each
 * result annotated with a random sharding one time in three: tiled over
 * random dims (uneven tiles included) with an explicit device order or an
 * iota, partially replicated, replicated, or on one device. Parameters get
 * a sharding two times in three. Propagation completes the rest, the
 * partitioner partitions for 2, 3, 4, 6 or 8 devices (every fourth case with
 * windowed einsums for all dots, every fourth without all-gather), and
 * verify compares every
 * device's piece of the output with the original's.
 *
 *   spmd_property [--seed S] [--cases N] [--verbose]
 *
 * prints the text of every case that fails (with its seed; rerun one with
 * --seed S --cases 1) and exits 1 if any did. make check runs 500 cases from
 * seed 1; make fuzz-property runs more.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/spmd_testutil.h"

#define MAX_VALS 32
#define MAX_RANK 4

typedef struct {
  char name[16];
  int rank;
  int64_t dims[MAX_RANK];
  gboolean used;     /* an operand of a later instruction */
} Val;

typedef struct {
  GRand *r;
  int ndev;
  GString *params;   /* parameter lines, in order */
  GString *body;     /* the other lines */
  int n_params, n_instrs;
  Val vals[MAX_VALS];
  int n_vals;
} Gen;

static int
rnd (Gen *g, int lo, int hi) /* inclusive */
{
  return g_rand_int_range (g->r, lo, hi + 1);
}

/* "a,b,c" */
static void
int_list (GString *s, int n, const int64_t *v)
{
  for (int i = 0; i < n; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? "," : "", v[i]);
}

static void
shape_text (GString *s, int rank, const int64_t *dims)
{
  g_string_append (s, "f32[");
  int_list (s, rank, dims);
  g_string_append_c (s, ']');
}

/* A random permutation of 0 .. n-1. */
static void
shuffle (Gen *g, int n, int64_t *perm)
{
  for (int i = 0; i < n; i++)
    perm[i] = i;
  for (int i = n - 1; i > 0; i--)
    {
      int j = rnd (g, 0, i);
      int64_t t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
}

/* A random sharding of an array of `rank` dims on g->ndev devices, or
 * nothing (empty string). */
static void
sharding_text (Gen *g, GString *s, int rank)
{
  int kind = rnd (g, 0, 19);
  if (kind == 0)
    {
      g_string_append (s, ", sharding={replicated}");
      return;
    }
  if (kind == 1)
    {
      g_string_append_printf (s, ", sharding={maximal device=%d}", rnd (g, 0, g->ndev - 1));
      return;
    }
  if (rank == 0)
    return;
  /* Split the device count's prime factors over the dims and perhaps a
   * trailing replicated dim. */
  gboolean partial = rnd (g, 0, 3) == 0;
  int slots = rank + (partial ? 1 : 0);
  int tiles[MAX_RANK + 1];
  for (int i = 0; i < slots; i++)
    tiles[i] = 1;
  for (int n = g->ndev, f = 2; n > 1;)
    if (n % f == 0)
      {
        tiles[rnd (g, 0, slots - 1)] *= f;
        n /= f;
      }
    else
      f++;
  if (partial && tiles[slots - 1] == 1)
    partial = FALSE, slots--;
  g_string_append (s, ", sharding={devices=[");
  for (int i = 0; i < slots; i++)
    g_string_append_printf (s, "%s%d", i ? "," : "", tiles[i]);
  g_string_append_c (s, ']');
  if (rnd (g, 0, 1) == 0)
    g_string_append_printf (s, "<=[%d]", g->ndev);
  else
    {
      int64_t perm[8];
      shuffle (g, g->ndev, perm);
      int_list (s, g->ndev, perm);
    }
  if (partial)
    g_string_append (s, " last_tile_dim_replicate");
  g_string_append_c (s, '}');
}

static Val *
new_val (Gen *g, int rank, const int64_t *dims)
{
  Val *v = &g->vals[g->n_vals++];
  v->used = FALSE;
  v->rank = rank;
  memcpy (v->dims, dims, sizeof (int64_t) * (gsize) rank);
  return v;
}

static Val *
param (Gen *g, int rank, const int64_t *dims)
{
  Val *v = new_val (g, rank, dims);
  g_snprintf (v->name, sizeof v->name, "p%d", g->n_params);
  g_string_append_printf (g->params, "  %s = ", v->name);
  shape_text (g->params, rank, dims);
  g_string_append_printf (g->params, " parameter(%d)", g->n_params++);
  if (rnd (g, 0, 2) != 0)
    sharding_text (g, g->params, rank);
  g_string_append_c (g->params, '\n');
  return v;
}

static Val *
random_param (Gen *g)
{
  int64_t dims[MAX_RANK];
  int rank = rnd (g, 1, 3);
  for (int i = 0; i < rank; i++)
    dims[i] = rnd (g, 1, 8);
  return param (g, rank, dims);
}

/* Starts the line of a new instruction of the given shape; the caller
 * appends the opcode and operands, then calls end_instr. */
static Val *
begin_instr (Gen *g, int rank, const int64_t *dims)
{
  Val *v = new_val (g, rank, dims);
  g_snprintf (v->name, sizeof v->name, "v%d", g->n_instrs++);
  g_string_append_printf (g->body, "  %s = ", v->name);
  shape_text (g->body, rank, dims);
  g_string_append_c (g->body, ' ');
  return v;
}

static void
end_instr (Gen *g, const Val *v)
{
  if (rnd (g, 0, 2) == 0)
    sharding_text (g, g->body, v->rank);
  g_string_append_c (g->body, '\n');
}

static void
ints (GString *s, int n, const int64_t *v)
{
  g_string_append_c (s, '{');
  int_list (s, n, v);
  g_string_append_c (s, '}');
}

static gboolean
same_dims (const Val *a, const Val *b)
{
  return a->rank == b->rank && memcmp (a->dims, b->dims, sizeof (int64_t) * (gsize) a->rank) == 0;
}

/* Op number `op` on value a; FALSE when it does not apply. */
static gboolean
op_on (Gen *g, Val a, int op)
{
  int64_t d[MAX_RANK];
  if (a.rank == 0 && op > 1 && op < 11)
    return FALSE; /* scalars (full reductions) only feed element-wise ops */
  switch (op)
    {
    case 0: /* unary element-wise */
      {
        static const char *ops[] = { "negate", "abs", "exponential", "tanh", "floor" };
        Val *v = begin_instr (g, a.rank, a.dims);
        g_string_append_printf (g->body, "%s(%s)", ops[rnd (g, 0, 4)], a.name);
        end_instr (g, v);
        return TRUE;
      }
    case 1: /* binary element-wise, with a same-shaped value or a new parameter */
      {
        static const char *ops[] = { "add", "multiply", "subtract", "maximum", "minimum" };
        const Val *b = NULL;
        for (int k = 0; k < g->n_vals && !b; k++)
          if (same_dims (&g->vals[k], &a) && strcmp (g->vals[k].name, a.name) != 0 && rnd (g, 0, 1))
            {
              b = &g->vals[k];
              g->vals[k].used = TRUE;
            }
        Val bb = b ? *b : *param (g, a.rank, a.dims);
        Val *v = begin_instr (g, a.rank, a.dims);
        g_string_append_printf (g->body, "%s(%s, %s)", ops[rnd (g, 0, 4)], a.name, bb.name);
        end_instr (g, v);
        return TRUE;
      }
    case 2: /* dot: a's dim c contracted with a new weight [c, n] or, with a
             * batch dim b, [a.b, a.c, n] */
      {
        int c = rnd (g, 0, a.rank - 1);
        int b = a.rank >= 2 && rnd (g, 0, 1) ? (c + rnd (g, 1, a.rank - 1)) % a.rank : -1;
        int64_t n = rnd (g, 1, 8);
        int64_t wd[3];
        int wr = 0;
        if (b >= 0)
          wd[wr++] = a.dims[b];
        wd[wr++] = a.dims[c];
        wd[wr++] = n;
        Val w = *param (g, wr, wd);
        int r = 0;
        if (b >= 0)
          d[r++] = a.dims[b];
        for (int i = 0; i < a.rank; i++)
          if (i != c && i != b)
            d[r++] = a.dims[i];
        d[r++] = n;
        if (r > MAX_RANK)
          return FALSE;
        Val *v = begin_instr (g, r, d);
        g_string_append_printf (g->body, "dot(%s, %s), lhs_contracting_dims={%d}, rhs_contracting_dims={%d}",
                                a.name, w.name, c, b >= 0 ? 1 : 0);
        if (b >= 0)
          g_string_append_printf (g->body, ", lhs_batch_dims={%d}, rhs_batch_dims={0}", b);
        end_instr (g, v);
        return TRUE;
      }
    case 3: /* reduce over a random non-empty set of dims */
      {
        int64_t rd[MAX_RANK];
        int nrd = 0, r = 0;
        for (int i = 0; i < a.rank; i++)
          if (rnd (g, 0, 1))
            rd[nrd++] = i;
          else
            d[r++] = a.dims[i];
        if (nrd == 0)
          {
            rd[nrd++] = 0;
            r = 0;
            for (int i = 1; i < a.rank; i++)
              d[r++] = a.dims[i];
          }
        gboolean max = rnd (g, 0, 2) == 0;
        Val *v = begin_instr (g, r, d);
        g_string_append_printf (g->body, "reduce(%s, %s), dimensions=", a.name, max ? "ninf" : "zero");
        ints (g->body, nrd, rd);
        g_string_append_printf (g->body, ", to_apply=%s", max ? "%max" : "%add");
        end_instr (g, v);
        return TRUE;
      }
    case 4: /* reshape: merge two adjacent dims, or split one */
      {
        int r = 0;
        if (a.rank >= 2 && rnd (g, 0, 1))
          {
            int i = rnd (g, 0, a.rank - 2);
            for (int k = 0; k < a.rank; k++)
              if (k == i)
                d[r++] = a.dims[k] * a.dims[k + 1];
              else if (k != i + 1)
                d[r++] = a.dims[k];
          }
        else
          {
            int i = rnd (g, 0, a.rank - 1);
            int64_t f = 0;
            for (int64_t k = 2; k < a.dims[i] && !f; k++)
              if (a.dims[i] % k == 0)
                f = k;
            if (!f || a.rank >= MAX_RANK)
              return FALSE;
            for (int k = 0; k < a.rank; k++)
              if (k == i)
                {
                  d[r++] = f;
                  d[r++] = a.dims[k] / f;
                }
              else
                d[r++] = a.dims[k];
          }
        Val *v = begin_instr (g, r, d);
        g_string_append_printf (g->body, "reshape(%s)", a.name);
        end_instr (g, v);
        return TRUE;
      }
    case 5: /* transpose */
      {
        int64_t perm[MAX_RANK];
        shuffle (g, a.rank, perm);
        for (int i = 0; i < a.rank; i++)
          d[i] = a.dims[perm[i]];
        Val *v = begin_instr (g, a.rank, d);
        g_string_append_printf (g->body, "transpose(%s), dimensions=", a.name);
        ints (g->body, a.rank, perm);
        end_instr (g, v);
        return TRUE;
      }
    case 6: /* slice */
      {
        GString *spec = g_string_new ("{");
        for (int i = 0; i < a.rank; i++)
          {
            int64_t lo = rnd (g, 0, (int) a.dims[i] - 1), hi = rnd (g, (int) lo + 1, (int) a.dims[i]);
            int64_t st = rnd (g, 1, 3);
            d[i] = (hi - lo + st - 1) / st;
            g_string_append_printf (spec, "%s[%" G_GINT64_FORMAT ":%" G_GINT64_FORMAT ":%" G_GINT64_FORMAT "]",
                                    i ? "," : "", lo, hi, st);
          }
        g_string_append_c (spec, '}');
        Val *v = begin_instr (g, a.rank, d);
        g_string_append_printf (g->body, "slice(%s), slice=%s", a.name, spec->str);
        g_string_free (spec, TRUE);
        end_instr (g, v);
        return TRUE;
      }
    case 7: /* concatenate with a new parameter along a random dim */
      {
        int k = rnd (g, 0, a.rank - 1);
        int64_t bd[MAX_RANK];
        memcpy (bd, a.dims, sizeof bd);
        bd[k] = rnd (g, 1, 6);
        Val b = *param (g, a.rank, bd);
        memcpy (d, a.dims, sizeof d);
        d[k] += bd[k];
        Val *v = begin_instr (g, a.rank, d);
        g_string_append_printf (g->body, "concatenate(%s, %s), dimensions={%d}", a.name, b.name, k);
        end_instr (g, v);
        return TRUE;
      }
    case 8: /* pad (edge padding may be negative, interior too) */
      {
        GString *spec = g_string_new (NULL);
        for (int i = 0; i < a.rank; i++)
          {
            int64_t lo = rnd (g, -1, 2), hi = rnd (g, -1, 2), in = rnd (g, 0, 1);
            d[i] = a.dims[i] + lo + hi + (a.dims[i] - 1) * in;
            if (d[i] < 1)
              {
                g_string_free (spec, TRUE);
                return FALSE;
              }
            g_string_append_printf (spec, "%s%" G_GINT64_FORMAT "_%" G_GINT64_FORMAT "_%" G_GINT64_FORMAT,
                                    i ? "x" : "", lo, hi, in);
          }
        Val *v = begin_instr (g, a.rank, d);
        g_string_append_printf (g->body, "pad(%s, zero), padding=%s", a.name, spec->str);
        g_string_free (spec, TRUE);
        end_instr (g, v);
        return TRUE;
      }
    case 9: /* broadcast: a new dim at a random place */
      {
        if (a.rank >= MAX_RANK - 1)
          return FALSE;
        int at = rnd (g, 0, a.rank);
        int64_t map[MAX_RANK];
        int r = 0;
        for (int i = 0; i <= a.rank; i++)
          if (i == at)
            d[r++] = rnd (g, 2, 4);
          else
            {
              map[i < at ? i : i - 1] = r;
              d[r++] = a.dims[i < at ? i : i - 1];
            }
        Val *v = begin_instr (g, r, d);
        g_string_append_printf (g->body, "broadcast(%s), dimensions=", a.name);
        ints (g->body, a.rank, map);
        end_instr (g, v);
        return TRUE;
      }
    case 10: /* convolution of a [b, s.., f] value (1 or 2 spatial dims) with a new
              * kernel [w.., f, o]: window size, padding, stride, and sometimes
              * base (lhs) or window (rhs) dilation */
      {
        if (a.rank != 3 && a.rank != 4)
          return FALSE;
        int ns = a.rank - 2;
        int64_t kd[4];
        GString *size = g_string_new (NULL), *stride = g_string_new (NULL), *pad = g_string_new (NULL),
                *lhs = g_string_new (NULL), *rhs = g_string_new (NULL);
        gboolean dilated = FALSE, fits = TRUE;
        d[0] = a.dims[0];
        for (int i = 0; i < ns; i++)
          {
            int64_t w = rnd (g, 1, 3), lo = rnd (g, 0, 2), hi = rnd (g, 0, 2), st = rnd (g, 1, 2);
            int64_t ld = rnd (g, 0, 3) ? 1 : 2, rd = rnd (g, 0, 3) ? 1 : 2;
            int64_t in = (a.dims[1 + i] - 1) * ld + 1 + lo + hi, span = (w - 1) * rd + 1;
            fits = fits && in >= span;
            dilated = dilated || ld > 1 || rd > 1;
            kd[i] = w;
            d[1 + i] = fits ? (in - span) / st + 1 : 0;
            const char *x = i ? "x" : "";
            g_string_append_printf (size, "%s%" G_GINT64_FORMAT, x, w);
            g_string_append_printf (stride, "%s%" G_GINT64_FORMAT, x, st);
            g_string_append_printf (pad, "%s%" G_GINT64_FORMAT "_%" G_GINT64_FORMAT, x, lo, hi);
            g_string_append_printf (lhs, "%s%" G_GINT64_FORMAT, x, ld);
            g_string_append_printf (rhs, "%s%" G_GINT64_FORMAT, x, rd);
          }
        if (fits)
          {
            int64_t o = rnd (g, 1, 4);
            kd[ns] = a.dims[a.rank - 1];
            kd[ns + 1] = o;
            Val k = *param (g, ns + 2, kd);
            d[ns + 1] = o;
            Val *v = begin_instr (g, a.rank, d);
            g_string_append_printf (g->body, "convolution(%s, %s), window={size=%s stride=%s pad=%s",
                                    a.name, k.name, size->str, stride->str, pad->str);
            if (dilated)
              g_string_append_printf (g->body, " lhs_dilate=%s rhs_dilate=%s", lhs->str, rhs->str);
            g_string_append_printf (g->body, "}, dim_labels=%s",
                                    ns == 1 ? "b0f_0io->b0f" : "b01f_01io->b01f");
            end_instr (g, v);
          }
        g_string_free (size, TRUE);
        g_string_free (stride, TRUE);
        g_string_free (pad, TRUE);
        g_string_free (lhs, TRUE);
        g_string_free (rhs, TRUE);
        return fits;
      }
    default: /* a rank-3 or rank-4 value for the convolutions to use */
      {
        int64_t pd[4] = { rnd (g, 1, 4), rnd (g, 1, 8), rnd (g, 1, 6), rnd (g, 1, 4) };
        if (rnd (g, 0, 1))
          param (g, 3, (int64_t[]) { pd[0], pd[1], pd[3] });
        else
          param (g, 4, pd);
        return TRUE;
      }
    }
}

/* One random op on existing values; FALSE when it did not apply. */
static gboolean
random_op (Gen *g)
{
  if (g->n_vals >= MAX_VALS - 3)
    return FALSE;
  /* Mostly one of the last three values, so that ops chain. */
  int back = rnd (g, 1, 3);
  int ai = rnd (g, 0, 2) ? MAX (0, g->n_vals - back) : rnd (g, 0, g->n_vals - 1);
  int op = rnd (g, 0, 11);
  if (!op_on (g, g->vals[ai], op))
    return FALSE;
  if (op == 11)
    return TRUE; /* made a parameter, consumed nothing */
  g->vals[ai].used = TRUE;
  return TRUE;
}

/* The text of case `seed` and its device count. transfer full. */
static char *
make_case (guint32 seed, int *ndev)
{
  Gen g = { 0 };
  g.r = g_rand_new_with_seed (seed);
  static const int ndevs[] = { 2, 3, 4, 6, 8 };
  g.ndev = ndevs[rnd (&g, 0, 4)];
  g.params = g_string_new (NULL);
  g.body = g_string_new (NULL);
  int np = rnd (&g, 1, 3);
  for (int i = 0; i < np; i++)
    random_param (&g);
  int want = rnd (&g, 2, 8);
  for (int tries = 0, done = 0; done < want && tries < 50; tries++)
    done += random_op (&g);
  if (g.n_instrs == 0)
    {
      Val a = g.vals[0];
      Val *v = begin_instr (&g, a.rank, a.dims);
      g_string_append_printf (g.body, "negate(%s)", a.name);
      end_instr (&g, v);
    }
  GString *s = g_string_new (NULL);
  g_string_append_printf (s, "HloModule property_%u, num_partitions=%d\n\n", seed, g.ndev);
  g_string_append (s, "%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
                      "  %b = f32[] parameter(1)\n  ROOT %r = f32[] add(%a, %b)\n}\n\n"
                      "%max (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
                      "  %b = f32[] parameter(1)\n  ROOT %r = f32[] maximum(%a, %b)\n}\n\n"
                      "ENTRY %e {\n");
  g_string_append (s, g.params->str);
  g_string_append (s, "  zero = f32[] constant(0)\n  ninf = f32[] constant(-inf)\n");
  g_string_append (s, g.body->str);
  /* The root: every result no later instruction uses, so that every op is
   * checked, each copied so that it can carry its own sharding. */
  GString *tuple_shape = g_string_new ("("), *tuple_ops = g_string_new (NULL);
  int n_out = 0;
  for (int k = 0; k < g.n_vals; k++)
    {
      const Val *v = &g.vals[k];
      if (v->used || v->name[0] != 'v')
        continue;
      g_string_append_printf (s, "  out%d = ", n_out);
      shape_text (s, v->rank, v->dims);
      g_string_append_printf (s, " copy(%s)", v->name);
      if (rnd (&g, 0, 1))
        sharding_text (&g, s, v->rank);
      g_string_append_c (s, '\n');
      g_string_append (tuple_shape, n_out ? ", " : "");
      shape_text (tuple_shape, v->rank, v->dims);
      g_string_append_printf (tuple_ops, "%sout%d", n_out ? ", " : "", n_out);
      n_out++;
    }
  g_string_append_printf (s, "  ROOT out = %s) tuple(%s)\n}\n", tuple_shape->str, tuple_ops->str);
  g_string_free (tuple_shape, TRUE);
  g_string_free (tuple_ops, TRUE);
  *ndev = g.ndev;
  g_string_free (g.params, TRUE);
  g_string_free (g.body, TRUE);
  g_rand_free (g.r);
  return g_string_free (s, FALSE);
}

int
main (int argc, char **argv)
{
  gint64 seed = 1, cases = 500;
  gboolean verbose = FALSE;
  GOptionEntry entries[] = {
    { "seed", 0, 0, G_OPTION_ARG_INT64, &seed, "First seed (default 1)", "S" },
    { "cases", 0, 0, G_OPTION_ARG_INT64, &cases, "Number of cases (default 500)", "N" },
    { "verbose", 'v', 0, G_OPTION_ARG_NONE, &verbose, "Print every case", NULL },
    { NULL, 0, 0, 0, NULL, NULL, NULL }
  };
  GOptionContext *ctx = g_option_context_new ("- partitioner property test");
  g_option_context_add_main_entries (ctx, entries, NULL);
  GError *error = NULL;
  if (!g_option_context_parse (ctx, &argc, &argv, &error))
    {
      fprintf (stderr, "spmd_property: %s\n", error->message);
      return 2;
    }
  g_option_context_free (ctx);
  int failed = 0, with_collectives = 0;
  for (gint64 k = 0; k < cases; k++)
    {
      guint32 s = (guint32) (seed + k);
      int ndev = 0;
      g_autofree char *text = make_case (s, &ndev);
      g_autofree char *spmd = NULL;
      if (verbose)
        printf ("---- seed %u, %d devices\n%s", s, ndev, text);
      /* Partitioner options vary with the seed too: windowed einsums for
       * every dot (one way or both), dynamic-update-slice + all-reduce
       * instead of all-gather. */
      PsSpmdOptions so;
      ps_spmd_options_init (&so);
      so.windowed_einsum_threshold_bytes = s % 4 == 1 ? 0 : -1;
      so.windowed_einsum_bidirectional = s % 8 == 5;
      so.use_all_gather = s % 4 != 2;
      if (!spmd_test_verify_text (text, ndev, TRUE, &so, &spmd, &error))
        {
          printf ("FAIL seed %u (%d devices): %s\n%s\n", s, ndev, error->message, text);
          g_clear_error (&error);
          failed++;
        }
      else if (strstr (spmd, "all-reduce(") || strstr (spmd, "all-gather(") || strstr (spmd, "all-to-all(")
               || strstr (spmd, "collective-permute(") || strstr (spmd, "reduce-scatter("))
        with_collectives++;
      if (verbose && spmd)
        printf ("---- partitioned\n%s", spmd);
    }
  /* A generator whose programs never needed a collective would test little. */
  printf ("%" G_GINT64_FORMAT " cases from seed %" G_GINT64_FORMAT ": %" G_GINT64_FORMAT
          " passed (%d of them with collectives), %d failed\n", cases, seed, cases - failed,
          with_collectives, failed);
  if (cases >= 100 && with_collectives < cases / 4)
    {
      printf ("too few cases needed a collective\n");
      return 1;
    }
  return failed ? 1 : 0;
}
