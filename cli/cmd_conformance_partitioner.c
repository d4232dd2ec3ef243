/* podsim conformance partitioner FILE.jsonl [--json]
 *
 * Runs XLA's SPMD-partitioner test vectors (format in
 * tests/data/conformance/README.md) through podsim: parse, propagate (with
 * XLA's defaults: no propagation to the output or the parameters unless the
 * module header allows it), partition for the case's num_devices, then check
 * with the reference interpreter that the partitioned program computes what
 * the original computes, that every parameter's local shape is its
 * sharding's tile shape, and, where the upstream test names the root's shape
 * with op::Shape("..."), that the partitioned root has it. A case whose
 * upstream test expects partitioning to fail (EXPECT_FALSE(status.ok()))
 * passes when podsim's partitioner rejects it with an error containing the
 * text the test names (HasSubstr, compared ignoring case). A case without
 * num_devices (the propagation test files) runs on as many devices as its
 * shardings name. The partitioner runs with XLA's default options as its
 * test harness sets them (windowed einsum above 256 MiB), overridden by the
 * case's partition_args (threshold_for_windowed_einsum_mib,
 * bidirectional_windowed_einsum, conv_halo_exchange_always_on_lhs).
 *
 * Each case runs in a child process with a time limit, so a crash or a hang
 * in any stage fails that case only. Output: one line per failing case and
 * the final line "N passed, N failed" (or one JSON document with --json).
 * Exit status 0 when every case passes, 1 when one fails, 2 on bad input. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-glib/json-glib.h>

#include "cli/commands.h"
#include "driver/driver.h"
#include "common/error.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/ir/sharding.h"
#include "partitioner/interp/shrink.h"
#include "partitioner/spmd/spmd.h"
#include "partitioner/interp/verify.h"

typedef struct {
  gint64 max_work;
  gint64 timeout_s;
  gboolean no_fork;
  gboolean no_propagate;
  gboolean no_scale;
  gint64 seed;
  gboolean progress;     /* "case i/N: name" on stderr (ps_progress_on) */
} CaseOptions;

/* ---- expectations ----------------------------------------------------------- */

/* Skips a balanced (), [] or {} group or a string starting at p; returns the
 * position after it. */
static const char *
skip_group (const char *p)
{
  int depth = 0;
  for (; *p; p++)
    {
      if (*p == '"')
        {
          for (p++; *p && *p != '"'; p++)
            if (*p == '\\' && p[1])
              p++;
          if (!*p)
            return p;
          if (depth == 0)
            return p + 1;
          continue;
        }
      if (*p == '(' || *p == '[' || *p == '{')
        depth++;
      else if (*p == ')' || *p == ']' || *p == '}')
        {
          if (--depth <= 0)
            return p + 1;
        }
      else if (depth == 0)
        return p + 1;
    }
  return p;
}

/* The shape in a top-level op::Shape("...") of matcher text m (itself, or
 * one argument of a top-level AllOf(...)). transfer full, or NULL. */
static char *
root_shape_of_matcher (const char *m)
{
  while (*m == ' ' || *m == '\n')
    m++;
  if (g_str_has_prefix (m, "op::Shape(\""))
    {
      const char *s = m + strlen ("op::Shape(\"");
      const char *e = strchr (s, '"');
      return e ? g_strndup (s, e - s) : NULL;
    }
  const char *allof = NULL;
  if (g_str_has_prefix (m, "AllOf("))
    allof = m + 6;
  else if (g_str_has_prefix (m, "::testing::AllOf("))
    allof = m + 17;
  if (!allof)
    return NULL;
  /* Walk the top-level arguments. */
  const char *p = allof;
  while (*p && *p != ')')
    {
      while (*p == ' ' || *p == '\n' || *p == ',')
        p++;
      const char *start = p;
      while (*p && *p != ',' && *p != ')')
        {
          if (*p == '(' || *p == '[' || *p == '{' || *p == '"')
            p = skip_group (p);
          else
            p++;
        }
      char *arg = g_strndup (start, p - start);
      char *r = NULL;
      if (g_str_has_prefix (arg, "op::Shape(\""))
        r = root_shape_of_matcher (arg);
      g_free (arg);
      if (r)
        return r;
    }
  return NULL;
}

/* Names the upstream test binds to the root instruction ("root"). */
static GPtrArray *
root_names (JsonObject *c)
{
  GPtrArray *names = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (names, g_strdup ("root"));
  JsonArray *b = json_object_has_member (c, "bindings")
                 ? json_object_get_array_member (c, "bindings") : NULL;
  for (guint i = 0; b && i < json_array_get_length (b); i++)
    {
      const char *t = json_array_get_string_element (b, i);
      if (!t || !strstr (t, "root_instruction()") || strstr (t, "->operand(")
          || strstr (t, "->mutable_operand("))
        continue;
      const char *eq = strchr (t, '=');
      if (!eq)
        continue;
      const char *e = eq;
      while (e > t && (e[-1] == ' '))
        e--;
      const char *s = e;
      while (s > t && (g_ascii_isalnum (s[-1]) || s[-1] == '_'))
        s--;
      if (e > s)
        g_ptr_array_add (names, g_strndup (s, e - s));
    }
  return names;
}

/* The root's expected local shape from EXPECT_THAT(root, ...) statements
 * that apply unconditionally; NULL if none names one. transfer full. */
/* The texts of the case's expectations that apply unconditionally (no
 * "when"). transfer container: the strings belong to the case. */
static GPtrArray *
unconditional_expectations (JsonObject *c)
{
  GPtrArray *texts = g_ptr_array_new ();
  JsonArray *ex = json_object_has_member (c, "expect")
                  ? json_object_get_array_member (c, "expect") : NULL;
  for (guint i = 0; ex && i < json_array_get_length (ex); i++)
    {
      JsonNode *n = json_array_get_element (ex, i);
      if (!JSON_NODE_HOLDS_OBJECT (n))
        continue;
      JsonObject *o = json_node_get_object (n);
      if (json_object_has_member (o, "when") && !json_object_get_null_member (o, "when"))
        continue;
      g_ptr_array_add (texts, (gpointer) json_object_get_string_member_with_default (o, "text", ""));
    }
  return texts;
}

static char *
expected_root_shape (JsonObject *c)
{
  g_autoptr (GPtrArray) texts = unconditional_expectations (c);
  GPtrArray *names = root_names (c);
  char *found = NULL;
  for (guint i = 0; i < texts->len && !found; i++)
    {
      const char *t = texts->pdata[i];
      const char *p = strstr (t, "EXPECT_THAT(");
      if (!p)
        continue;
      p += strlen ("EXPECT_THAT(");
      while (*p == ' ' || *p == '\n')
        p++;
      for (guint k = 0; k < names->len && !found; k++)
        {
          const char *nm = names->pdata[k];
          size_t ln = strlen (nm);
          if (strncmp (p, nm, ln) == 0 && (p[ln] == ',' || p[ln] == ' '))
            {
              const char *m = p + ln;
              while (*m == ' ' || *m == ',' || *m == '\n')
                m++;
              found = root_shape_of_matcher (m);
            }
        }
    }
  g_ptr_array_free (names, TRUE);
  return found;
}

/* Shape text without layouts and spaces, for comparison. */
static char *
normalize_shape (const char *s)
{
  GString *o = g_string_new (NULL);
  for (const char *p = s; *p; p++)
    {
      if (*p == ' ' || *p == '\n')
        continue;
      if (*p == '{' && p > s && p[-1] == ']')
        {
          int depth = 0;
          for (; *p; p++)
            {
              if (*p == '{')
                depth++;
              else if (*p == '}' && --depth == 0)
                break;
            }
          if (!*p)
            break;
          continue;
        }
      g_string_append_c (o, *p);
    }
  return g_string_free (o, FALSE);
}

/* ---- one case ------------------------------------------------------------------ */

/* The case's num_devices; for a case without one (the propagation test
 * files), as many devices as its shardings name (at least 1). */
static gint64
case_devices (JsonObject *c, const PsModule *m)
{
  gint64 nd = json_object_get_int_member_with_default (c, "num_devices", 0);
  if (nd > 0 || json_object_has_member (c, "num_devices"))
    return nd;
  nd = 1;
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *comp = m->computations->pdata[k];
      for (guint i = 0; i < comp->instrs->len; i++)
        {
          const PsInstr *in = comp->instrs->pdata[i];
          if (in->sharding)
            nd = MAX (nd, ps_sharding_min_devices (in->sharding));
        }
    }
  return nd;
}

/* The partitioner options of an upstream case: XLA's test harness uses
 * SpmdPartitionerOptions' defaults (windowed einsum above 256 MiB) unless
 * the case's partition_args set threshold_for_windowed_einsum_mib (>= 0),
 * bidirectional_windowed_einsum or conv_halo_exchange_always_on_lhs. */
static void
case_spmd_options (JsonObject *c, PsSpmdOptions *so)
{
  ps_spmd_options_init (so);
  so->windowed_einsum_threshold_bytes = (int64_t) 256 << 20;
  JsonObject *a = json_object_has_member (c, "partition_args")
                  && JSON_NODE_HOLDS_OBJECT (json_object_get_member (c, "partition_args"))
                  ? json_object_get_object_member (c, "partition_args") : NULL;
  if (!a)
    return;
  JsonNode *n = json_object_get_member (a, "threshold_for_windowed_einsum_mib");
  if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_INT64
      && json_node_get_int (n) >= 0)
    so->windowed_einsum_threshold_bytes = json_node_get_int (n) << 20;
  n = json_object_get_member (a, "bidirectional_windowed_einsum");
  if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_BOOLEAN)
    so->windowed_einsum_bidirectional = json_node_get_boolean (n);
  n = json_object_get_member (a, "conv_halo_exchange_always_on_lhs");
  if (n && JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_BOOLEAN)
    so->conv_halo_exchange_always_on_lhs = json_node_get_boolean (n);
}

/* How a passing case was checked (bit flags). */
enum { CASE_SCALED = 1, CASE_WIDENED = 2 };

/* Whether the upstream test expects partitioning to fail
 * (EXPECT_FALSE(....status().ok())), and the text it expects the error to
 * contain (HasSubstr("...") on the status), or NULL. transfer full. */
static gboolean
expects_failure (JsonObject *c, char **substr)
{
  *substr = NULL;
  g_autoptr (GPtrArray) texts = unconditional_expectations (c);
  gboolean fails = FALSE;
  for (guint i = 0; i < texts->len; i++)
    {
      const char *t = texts->pdata[i];
      if (strstr (t, "EXPECT_FALSE(") && strstr (t, "status") && strstr (t, ".ok()"))
        fails = TRUE;
      const char *h = strstr (t, "HasSubstr(\"");
      if (h && strstr (t, "status") && !*substr)
        {
          h += strlen ("HasSubstr(\"");
          const char *e = strchr (h, '"');
          if (e)
            *substr = g_strndup (h, (gsize) (e - h));
        }
    }
  if (!fails)
    g_clear_pointer (substr, g_free);
  return fails;
}

/* A case runs through the driver as `podsim partition` does, up to the
 * partitioned program (propagation first unless --no-propagate). */
static void
case_driver_options (PsDriverOptions *o, PsModule *m, gint64 nd, const CaseOptions *co, const PsSpmdOptions *so)
{
  ps_driver_options_init (o);
  o->module = m;
  o->n_devices = nd;
  o->skip_propagate = co->no_propagate;
  o->spmd = so;
  o->stop_after = PS_STAGE_PARTITION;
}

/* Runs one case. On success *how says whether the values were checked on a
 * scaled copy (the original being over the interpreter's limits) and
 * whether they agree only in f64 arithmetic (verify.h). */
static gboolean
run_case (JsonObject *c, const CaseOptions *co, char **reason, int *how)
{
  *how = 0;
  const char *name = json_object_get_string_member_with_default (c, "name", "?");
  const char *hlo = json_object_get_string_member_with_default (c, "hlo", NULL);
  GError *error = NULL;
  if (!hlo)
    {
      *reason = g_strdup ("case has no hlo");
      return FALSE;
    }
  g_autoptr (PsModule) m = ps_hlo_parse (hlo, strlen (hlo), name, &error);
  if (!m)
    {
      *reason = g_strdup_printf ("parse: %s", error->message);
      g_error_free (error);
      return FALSE;
    }
  gint64 nd = case_devices (c, m);
  if (nd < 1 || nd > PS_VERIFY_MAX_DEVICES)
    {
      *reason = g_strdup_printf ("num_devices is %" G_GINT64_FORMAT " (1 .. %d)", nd,
                                 PS_VERIFY_MAX_DEVICES);
      return FALSE;
    }
  /* The partitioner's cost-based decisions are recorded so that a scaled
   * copy (below) can be partitioned the same way. */
  g_autoptr (GHashTable) choices = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  PsSpmdOptions so;
  case_spmd_options (c, &so);
  so.choices = choices;
  PsDriverOptions dopts;
  case_driver_options (&dopts, m, nd, co, &so);
  dopts.keep_spmd = TRUE;
  PsStage failed = PS_STAGE_BUILD;
  g_autoptr (PsDriverResult) r = ps_driver_run (&dopts, &failed, &error);
  if (!r && failed == PS_STAGE_PROPAGATE)
    {
      *reason = g_strdup_printf ("propagation: %s", error->message);
      g_error_free (error);
      return FALSE;
    }
  const PsModule *part = r ? r->spmd : NULL;
  g_autofree char *want_error = NULL;
  gboolean want_fail = expects_failure (c, &want_error);
  if (!part)
    {
      /* A rejection the upstream test expects passes; its text must
       * contain the expected words (ignoring case). */
      gboolean ok = FALSE;
      if (want_fail)
        {
          g_autofree char *have = g_utf8_strdown (error->message, -1);
          g_autofree char *want = want_error ? g_utf8_strdown (want_error, -1) : NULL;
          ok = !want || strstr (have, want) != NULL;
        }
      if (!ok)
        *reason = want_fail ? g_strdup_printf ("partitioner: %s (the upstream test expects an error "
                                               "containing \"%s\")", error->message, want_error)
                            : g_strdup_printf ("partitioner: %s", error->message);
      g_error_free (error);
      return ok;
    }
  if (want_fail)
    {
      *reason = g_strdup_printf ("partitioned, but the upstream test expects partitioning to fail%s%s",
                                 want_error ? " with " : "", want_error ? want_error : "");
      return FALSE;
    }
  /* Parameters keep their sharding's tile shape. */
  if (m->entry->params->len != part->entry->params->len)
    {
      *reason = g_strdup_printf ("partitioned program has %u parameters, the original %u",
                                 part->entry->params->len, m->entry->params->len);
      return FALSE;
    }
  for (guint p = 0; p < m->entry->params->len; p++)
    {
      const PsInstr *op = m->entry->params->pdata[p], *pp = part->entry->params->pdata[p];
      PsShape *want = ps_verify_local_shape (op->sharding, op->shape);
      gboolean same = ps_shape_equal (want, pp->shape);
      if (!same)
        {
          char *w = ps_shape_to_string (want, FALSE), *h = ps_shape_to_string (pp->shape, FALSE);
          *reason = g_strdup_printf ("parameter %s: local shape %s, its sharding's tile shape is %s",
                                     op->name, h, w);
          g_free (w);
          g_free (h);
        }
      ps_shape_free (want);
      if (!same)
        return FALSE;
    }
  g_autofree char *root_want = expected_root_shape (c);
  if (root_want)
    {
      g_autofree char *want = normalize_shape (root_want);
      g_autofree char *have_raw = ps_shape_to_string (part->entry->root->shape, FALSE);
      g_autofree char *have = normalize_shape (have_raw);
      if (strcmp (want, have) != 0)
        {
          *reason = g_strdup_printf ("root has local shape %s, the upstream test expects %s", have, want);
          return FALSE;
        }
    }
  PsVerifyOptions vo;
  ps_verify_options_init (&vo);
  vo.seed = (guint64) co->seed;
  vo.interp.rng_seed = (guint64) co->seed;
  vo.interp.max_work = co->max_work;
  /* Keep each case under about 2 GiB of interpreter values (cases with 128
   * devices hold 10^8 elements at once; one case reached 10 GB uncapped). */
  vo.interp.max_elements = 64 * 1024 * 1024;
  vo.interp.max_live_elements = 256 * 1024 * 1024;
  PsVerifyResult res;
  if (!ps_verify_spmd (m, part, nd, &vo, &res, &error))
    {
      if (co->no_scale || !g_error_matches (error, PS_ERROR, PS_ERROR_LIMIT))
        {
          *reason = g_strdup_printf ("%s", error->message);
          g_error_free (error);
          return FALSE;
        }
      /* Too large to run: check a scaled copy that partitions into the same
       * program (shrink.h). */
      GError *serr = NULL;
      so.replay_choices = TRUE;
      if (!ps_shrink_verify (m, part, nd, &so, NULL, &vo, &res, NULL, &serr))
        {
          *reason = g_strdup_printf ("%s; %s", error->message, serr->message);
          g_error_free (serr);
          g_error_free (error);
          return FALSE;
        }
      g_error_free (error);
      *how |= CASE_SCALED;
    }
  gboolean ok = res.agree;
  if (ok && res.widened)
    *how |= CASE_WIDENED;
  if (!ok)
    *reason = g_strdup_printf ("values differ: %s", res.message);
  ps_verify_result_clear (&res);
  return ok;
}

typedef struct {
  JsonObject *c;
  const CaseOptions *co;
} IsolatedCase;

/* The child's message: "P<how>" or "F<reason>". */
static GString *
run_case_cb (gpointer data)
{
  const IsolatedCase *ic = data;
  char *r = NULL;
  int h = 0;
  gboolean ok = run_case (ic->c, ic->co, &r, &h);
  GString *msg = g_string_new (ok ? "P" : "F");
  if (ok)
    g_string_append_c (msg, (char) ('0' + h));
  if (!ok && r)
    g_string_append (msg, r);
  g_free (r);
  return msg;
}

/* Runs a case in a child process: a crash or hang there fails the case. */
static gboolean
run_case_isolated (JsonObject *c, const CaseOptions *co, char **reason, int *how)
{
  *how = 0;
  if (co->no_fork)
    return run_case (c, co, reason, how);
  IsolatedCase ic = { c, co };
  char *why = NULL;
  GString *buf = ps_cli_run_isolated (run_case_cb, &ic, co->timeout_s, &why);
  gboolean ok = FALSE;
  if (buf == NULL || why)
    *reason = g_strdup_printf ("case process %s", why);
  else if (buf->len > 1 && buf->str[0] == 'P')
    {
      ok = TRUE;
      *how = buf->str[1] - '0';
    }
  else if (buf->len > 0)
    *reason = g_strdup (buf->str + 1);
  else
    *reason = g_strdup ("case process gave no result");
  g_free (why);
  if (buf)
    g_string_free (buf, TRUE);
  return ok;
}

/* ---- --fallbacks: replicate-then-slice totals ------------------------------------ */

typedef struct {
  GHashTable *instrs;   /* opcode name (static) -> instructions */
  GHashTable *modules;  /* opcode name (static) -> modules */
  int n_modules;        /* modules with any fallback */
  gint64 n_instrs;
} FallbackTotals;

/* Partitions case c again in this process, as run_case does, and adds what
 * took the fallback to t. Cases that do not partition count nothing. */
static void
count_fallbacks (JsonObject *c, const CaseOptions *co, FallbackTotals *t)
{
  const char *name = json_object_get_string_member_with_default (c, "name", "?");
  const char *hlo = json_object_get_string_member_with_default (c, "hlo", NULL);
  if (!hlo)
    return;
  g_autoptr (PsModule) m = ps_hlo_parse (hlo, strlen (hlo), name, NULL);
  if (!m)
    return;
  gint64 nd = case_devices (c, m);
  if (nd < 1)
    return;
  PsSpmdOptions so;
  case_spmd_options (c, &so);
  PsDriverOptions dopts;
  case_driver_options (&dopts, m, nd, co, &so);
  g_autoptr (PsDriverResult) r = ps_driver_run (&dopts, NULL, NULL);
  const PsSpmdReport *rep = r ? &r->spmd_report : NULL;
  gboolean part = r != NULL;
  if (part && rep->n_fallbacks > 0 && rep->fallback_ops)
    {
      t->n_modules++;
      t->n_instrs += rep->n_fallbacks;
      GHashTableIter it;
      gpointer k, v;
      g_hash_table_iter_init (&it, rep->fallback_ops);
      while (g_hash_table_iter_next (&it, &k, &v))
        {
          g_hash_table_insert (t->instrs, k, GINT_TO_POINTER (
            GPOINTER_TO_INT (g_hash_table_lookup (t->instrs, k)) + GPOINTER_TO_INT (v)));
          g_hash_table_insert (t->modules, k, GINT_TO_POINTER (
            GPOINTER_TO_INT (g_hash_table_lookup (t->modules, k)) + 1));
        }
    }
}

static int
compare_opcode_totals (gconstpointer a, gconstpointer b, gpointer instrs)
{
  int na = GPOINTER_TO_INT (g_hash_table_lookup (instrs, *(gpointer const *) a));
  int nb = GPOINTER_TO_INT (g_hash_table_lookup (instrs, *(gpointer const *) b));
  if (na != nb)
    return nb - na;
  return strcmp (*(const char *const *) a, *(const char *const *) b);
}

/* "fallbacks: M modules, I instructions" and one "  opcode I in M modules"
 * line per opcode, most frequent first (ties by name: deterministic). */
static void
print_fallbacks (const FallbackTotals *t)
{
  printf ("fallbacks: %d modules, %" G_GINT64_FORMAT " instructions\n", t->n_modules, t->n_instrs);
  guint n = 0;
  gpointer *keys = g_hash_table_get_keys_as_array (t->instrs, &n);
  g_qsort_with_data (keys, (gint) n, sizeof (gpointer), compare_opcode_totals, t->instrs);
  for (guint i = 0; i < n; i++)
    printf ("  %-22s %d in %d modules\n", (const char *) keys[i],
            GPOINTER_TO_INT (g_hash_table_lookup (t->instrs, keys[i])),
            GPOINTER_TO_INT (g_hash_table_lookup (t->modules, keys[i])));
  g_free (keys);
}

static char *
one_line (const char *s)
{
  char *r = g_strdup (s ? s : "");
  for (char *p = r; *p; p++)
    if (*p == '\n' || *p == '\r')
      *p = ' ';
  return r;
}

/* ---- the driver ------------------------------------------------------------------ */

/* Every case of the file (only the one named `only`, and those whose names
 * contain `match`, when given) as JSON
 * nodes. The whole file is parsed before any case runs, so a malformed one
 * fails (exit 2) without a partial report. NULL after printing the error. */
static GPtrArray *
load_cases (const char *path, const char *only, const char *match)
{
  char *text = NULL;
  gsize len = 0;
  GError *error = NULL;
  if (!ps_cli_read_input (path, &text, &len, &error))
    {
      ps_cli_fail (error);
      return NULL;
    }
  GPtrArray *cases = g_ptr_array_new_with_free_func ((GDestroyNotify) json_node_unref);
  g_auto (GStrv) lines = g_strsplit (text, "\n", -1);
  g_free (text);
  for (int i = 0; lines[i]; i++)
    {
      const char *l = lines[i];
      while (*l == ' ' || *l == '\t' || *l == '\r')
        l++;
      if (!*l)
        continue;
      if (!ps_json_depth_ok (lines[i], path, i + 1, &error))
        {
          ps_cli_fail (error);
          g_ptr_array_free (cases, TRUE);
          return NULL;
        }
      g_autoptr (JsonParser) jp = json_parser_new ();
      if (!json_parser_load_from_data (jp, lines[i], -1, &error) || !JSON_NODE_HOLDS_OBJECT (json_parser_get_root (jp)))
        {
          ps_cli_failf ("%s:%d: %s", path, i + 1, error ? error->message : "a case must be a JSON object");
          g_clear_error (&error);
          g_ptr_array_free (cases, TRUE);
          return NULL;
        }
      JsonObject *o = json_node_get_object (json_parser_get_root (jp));
      if (!json_object_has_member (o, "name") || !json_object_has_member (o, "hlo"))
        {
          ps_cli_failf ("%s:%d: a case needs \"name\" and \"hlo\"", path, i + 1);
          g_ptr_array_free (cases, TRUE);
          return NULL;
        }
      const char *name = json_object_get_string_member_with_default (o, "name", "");
      if ((only && strcmp (name, only) != 0) || (match && !strstr (name, match)))
        continue;
      g_ptr_array_add (cases, json_node_copy (json_parser_get_root (jp)));
    }
  return cases;
}

/* What the run found. */
typedef struct {
  int passed, failed, too_large, n_scaled, n_widened;
  JsonBuilder *jb;            /* --json: the "cases" array is being built */
} Tally;

/* Runs every case isolated; prints a line per failure (or adds a JSON
 * object per case). */
static void
run_cases (GPtrArray *cases, const CaseOptions *co, Tally *t)
{
  for (guint i = 0; i < cases->len; i++)
    {
      JsonObject *c = json_node_get_object (cases->pdata[i]);
      const char *name = json_object_get_string_member_with_default (c, "name", "?");
      g_autofree char *reason = NULL;
      int how = 0;
      ps_progress (co->progress, "podsim conformance: case %u/%u: %s", i + 1, cases->len, name);
      gboolean ok = run_case_isolated (c, co, &reason, &how);
      g_autofree char *r1 = one_line (reason);
      if (ok)
        {
          t->passed++;
          t->n_scaled += (how & CASE_SCALED) != 0;
          t->n_widened += (how & CASE_WIDENED) != 0;
        }
      else
        {
          t->failed++;
          if (strstr (r1, "interpreter's limit") || strstr (r1, "work limit of"))
            t->too_large++;
          if (!t->jb)
            {
              ps_progress (co->progress, NULL);
              printf ("FAIL %s: %s\n", name, r1);
            }
        }
      if (t->jb)
        {
          JsonBuilder *jb = t->jb;
          json_builder_begin_object (jb);
          json_builder_set_member_name (jb, "name");
          json_builder_add_string_value (jb, name);
          json_builder_set_member_name (jb, "passed");
          json_builder_add_boolean_value (jb, ok);
          json_builder_set_member_name (jb, "scaled");
          json_builder_add_boolean_value (jb, (how & CASE_SCALED) != 0);
          json_builder_set_member_name (jb, "widened");
          json_builder_add_boolean_value (jb, (how & CASE_WIDENED) != 0);
          if (!ok)
            {
              json_builder_set_member_name (jb, "reason");
              json_builder_add_string_value (jb, r1);
            }
          json_builder_end_object (jb);
        }
      fflush (stdout);
    }
  ps_progress (co->progress, NULL);
}

/* Ends the JSON document begun by the driver and prints it. */
static void
print_json_report (Tally *t, const FallbackTotals *fbt)
{
  JsonBuilder *jb = t->jb;
  json_builder_end_array (jb);
  json_builder_set_member_name (jb, "passed");
  json_builder_add_int_value (jb, t->passed);
  json_builder_set_member_name (jb, "failed");
  json_builder_add_int_value (jb, t->failed);
  json_builder_set_member_name (jb, "too_large");
  json_builder_add_int_value (jb, t->too_large);
  json_builder_set_member_name (jb, "scaled");
  json_builder_add_int_value (jb, t->n_scaled);
  json_builder_set_member_name (jb, "widened");
  json_builder_add_int_value (jb, t->n_widened);
  if (fbt->instrs)
    {
      /* opcode -> [instructions, modules] */
      json_builder_set_member_name (jb, "fallbacks");
      json_builder_begin_object (jb);
      GHashTableIter it;
      gpointer k, v;
      g_hash_table_iter_init (&it, fbt->instrs);
      while (g_hash_table_iter_next (&it, &k, &v))
        {
          json_builder_set_member_name (jb, k);
          json_builder_begin_array (jb);
          json_builder_add_int_value (jb, GPOINTER_TO_INT (v));
          json_builder_add_int_value (jb, GPOINTER_TO_INT (g_hash_table_lookup (fbt->modules, k)));
          json_builder_end_array (jb);
        }
      json_builder_end_object (jb);
    }
  json_builder_end_object (jb);
  JsonGenerator *gen = json_generator_new ();
  json_generator_set_pretty (gen, TRUE);
  JsonNode *root = json_builder_get_root (jb);
  json_generator_set_root (gen, root);
  char *out = json_generator_to_data (gen, NULL);
  printf ("%s\n", out);
  g_free (out);
  json_node_unref (root);
  g_object_unref (gen);
}

static void
print_text_report (const Tally *t, const FallbackTotals *fbt)
{
  if (t->n_scaled)
    printf ("note: %d of the passing cases were over the interpreter's limits and were "
            "checked on a scaled copy that partitions into the same program "
            "(doc/interpreter.md)\n", t->n_scaled);
  if (t->n_widened)
    printf ("note: %d of the passing cases agree in f64 arithmetic only: with the "
            "float types as written, partial sums rounded differently differ by more "
            "than the tolerance (doc/interpreter.md)\n", t->n_widened);
  if (t->too_large)
    printf ("note: %d of the failing cases exceed the interpreter's limits "
            "(see --max-work)\n", t->too_large);
  if (fbt->instrs)
    print_fallbacks (fbt);
  printf ("%d passed, %d failed\n", t->passed, t->failed);
}

int
ps_cmd_conformance_partitioner (int argc, char **argv)
{
  gboolean json = FALSE, fallbacks = FALSE, quiet = FALSE;
  CaseOptions co = { 1000000000, 120, FALSE, FALSE, FALSE, 1, FALSE };
  char *only = NULL, *match = NULL;
  GOptionEntry entries[] = {
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print the results as one JSON document", NULL },
    /* --match, --case and --in-process as conformance propagation has them. */
    { "match", 0, 0, G_OPTION_ARG_STRING, &match, "Only run cases whose name contains TEXT", "TEXT" },
    { "case", 0, 0, G_OPTION_ARG_STRING, &only, "Only run the case named exactly NAME", "NAME" },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet, "No progress on stderr (shown on a terminal: the case being run)", NULL },
    { "seed", 0, 0, G_OPTION_ARG_INT64, &co.seed, "Seed of the random inputs (default 1)", "S" },
    { "max-work", 0, 0, G_OPTION_ARG_INT64, &co.max_work,
      "Interpreter budget per case in element operations (default 1e9)", "OPS" },
    { "timeout", 0, 0, G_OPTION_ARG_INT64, &co.timeout_s,
      "Seconds a case may take before it fails (default 120)", "S" },
    { "in-process", 0, 0, G_OPTION_ARG_NONE, &co.no_fork,
      "Run cases in this process (no crash or time-limit isolation; for debuggers; --no-fork: the same)", NULL },
    { "no-fork", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &co.no_fork, NULL, NULL },
    { "no-propagate", 0, 0, G_OPTION_ARG_NONE, &co.no_propagate,
      "Partition the module as written, as XLA's partitioner tests do", NULL },
    { "no-scale", 0, 0, G_OPTION_ARG_NONE, &co.no_scale,
      "Fail cases over the interpreter's limits instead of checking a scaled copy", NULL },
    { "fallbacks", 0, 0, G_OPTION_ARG_NONE, &fallbacks,
      "Also print, per opcode, how many instructions (in how many cases) took the "
      "replicate-then-slice fallback (cases are partitioned again in this process)", NULL },
    { NULL, 0, 0, 0, NULL, NULL, NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE.jsonl - run SPMD partitioner test vectors");
  g_option_context_set_summary (ctx,
    "For every case: parse, propagate, partition on the case's num_devices, then check with\n"
    "the reference interpreter that the SPMD program computes what the original computes,\n"
    "that each parameter's local shape is its sharding's tile shape and that the root has\n"
    "the local shape the upstream test names. Cases over the interpreter's limits are\n"
    "checked on a scaled copy that partitions into the same program; a case whose\n"
    "upstream test expects an error passes when podsim rejects it with those words; a\n"
    "case without num_devices runs on as many devices as its shardings name. The\n"
    "partitioner gets XLA's test options (windowed einsum above 256 MiB) and the case's\n"
    "partition_args. See doc/interpreter.md. Prints one line per failing case and the\n"
    "final line 'N passed, N failed'. Exit status 0 when all pass, 1 otherwise.");
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!ps_cli_parse (ctx, &argc, &argv))
    return PS_EXIT_USAGE;
  if (argc != 2)
    {
      g_free (only);
      g_free (match);
      return ps_cli_failf ("conformance partitioner needs exactly one .jsonl file");
    }
  if (co.timeout_s < 1 || co.max_work < 0)
    {
      g_free (only);
      g_free (match);
      return ps_cli_failf ("--timeout must be at least 1 and --max-work not negative");
    }
  g_autoptr (GPtrArray) cases = load_cases (argv[1], only, match);
  g_free (only);
  g_free (match);
  if (!cases)
    return PS_EXIT_USAGE;
  Tally t = { 0 };
  if (json)
    {
      t.jb = json_builder_new ();
      json_builder_begin_object (t.jb);
      json_builder_set_member_name (t.jb, "file");
      json_builder_add_string_value (t.jb, argv[1]);
      json_builder_set_member_name (t.jb, "cases");
      json_builder_begin_array (t.jb);
    }
  co.progress = ps_progress_on (quiet);
  run_cases (cases, &co, &t);
  FallbackTotals fbt = { NULL, NULL, 0, 0 };
  if (fallbacks)
    {
      fbt.instrs = g_hash_table_new (g_str_hash, g_str_equal);
      fbt.modules = g_hash_table_new (g_str_hash, g_str_equal);
      for (guint i = 0; i < cases->len; i++)
        count_fallbacks (json_node_get_object (cases->pdata[i]), &co, &fbt);
    }
  if (t.jb)
    {
      print_json_report (&t, &fbt);
      g_object_unref (t.jb);
    }
  else
    print_text_report (&t, &fbt);
  if (fbt.instrs)
    {
      g_hash_table_destroy (fbt.instrs);
      g_hash_table_destroy (fbt.modules);
    }
  return t.failed ? 1 : 0;
}
