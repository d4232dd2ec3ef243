/* podsim conformance propagation FILE.jsonl [--json]: runs XLA's sharding
 * propagation test vectors (tests/data/conformance/README.md) through
 * ps_propagate and checks every expectation.
 *
 * Each run is executed in a forked child with a time limit, so that a crash
 * or a hang in one case is reported as that case failing and the remaining
 * cases still run. The child sends one line per expectation back through a
 * pipe: "<0|1>\t<kind>\t<detail>". */
#include "config.h"

#include <errno.h>
#include <json-glib/json-glib.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/error.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/ir/sharding.h"

#define CASE_TIME_LIMIT_S 20

/* ---- evaluation (in the child) ------------------------------------------ */

static gboolean
is_core_kind (const char *k)
{
  return strcmp (k, "sharding") == 0 || strcmp (k, "no_sharding") == 0
         || strcmp (k, "has_sharding") == 0;
}

static const PsInstr *
resolve_ref (const PsModule *m, JsonObject *e)
{
  const char *ref = json_object_has_member (e, "ref") ? json_object_get_string_member (e, "ref")
                                                      : NULL;
  const char *instr = json_object_has_member (e, "instr")
                          ? json_object_get_string_member (e, "instr") : NULL;
  const PsInstr *cur = NULL;
  const char *p = ref;
  if (p && g_str_has_prefix (p, "FindInstruction(\""))
    {
      p += strlen ("FindInstruction(\"");
      const char *q = strchr (p, '"');
      if (!q)
        return NULL;
      g_autofree char *name = g_strndup (p, q - p);
      cur = ps_module_find_instr (m, name);
      p = q + 2;
    }
  else if (p && g_str_has_prefix (p, "entry.root"))
    {
      cur = m->entry ? m->entry->root : NULL;
      p += strlen ("entry.root");
    }
  else if (p && g_str_has_prefix (p, "entry.param("))
    {
      p += strlen ("entry.param(");
      int k = atoi (p);
      cur = m->entry && k >= 0 && (guint) k < m->entry->params->len
                ? g_ptr_array_index (m->entry->params, k) : NULL;
      p = strchr (p, ')');
      p = p ? p + 1 : "";
    }
  else if (instr)
    return ps_module_find_instr (m, instr);
  else
    return NULL;
  while (cur && p && g_str_has_prefix (p, ".operand("))
    {
      p += strlen (".operand(");
      int k = atoi (p);
      cur = k >= 0 && k < cur->n_operands ? cur->operands[k] : NULL;
      p = strchr (p, ')');
      p = p ? p + 1 : "";
    }
  return cur;
}

static PsSharding *
sub_by_path (const PsSharding *s, const PsShape *shape, JsonObject *e)
{
  if (!s)
    return NULL;
  if (!json_object_has_member (e, "tuple_path"))
    return ps_sharding_copy (s);
  JsonArray *path = json_object_get_array_member (e, "tuple_path");
  guint n = path ? json_array_get_length (path) : 0;
  if (n == 0)
    return ps_sharding_copy (s);
  /* The upstream tests index a tuple sharding's flattened leaves
   * (tuple_elements()[k]) with a one-element path. */
  if (n == 1 && s->kind == PS_SHARDING_TUPLE)
    {
      int k = (int) json_array_get_int_element (path, 0);
      return k >= 0 && k < s->n_elems ? ps_sharding_copy (s->elems[k]) : NULL;
    }
  /* Walk the tuple shape to the leaf range of the path. */
  int first = 0;
  const PsShape *cur = shape;
  for (guint k = 0; k < n; k++)
    {
      int idx = (int) json_array_get_int_element (path, k);
      if (!ps_shape_is_tuple (cur) || idx < 0 || idx >= cur->n_elems)
        return NULL;
      for (int j = 0; j < idx; j++)
        first += ps_shape_leaf_count (cur->elems[j]);
      cur = cur->elems[idx];
    }
  if (s->kind != PS_SHARDING_TUPLE)
    return ps_sharding_copy (s);
  int count = ps_shape_leaf_count (cur);
  if (first + count > s->n_elems)
    return NULL;
  if (!ps_shape_is_tuple (cur))
    return ps_sharding_copy (s->elems[first]);
  PsSharding **el = g_new (PsSharding *, count > 0 ? count : 1);
  for (int j = 0; j < count; j++)
    el[j] = ps_sharding_copy (s->elems[first + j]);
  PsSharding *r = ps_sharding_tuple (count, el);
  g_free (el);
  return r;
}

static gboolean
sharding_matches (const PsSharding *actual, const PsSharding *expected)
{
  if (!actual || !expected)
    return FALSE;
  if (ps_sharding_equal_layout (actual, expected))
    return TRUE;
  /* A single sharding on a tuple-shaped instruction means every leaf. */
  if (actual->kind == PS_SHARDING_TUPLE && expected->kind != PS_SHARDING_TUPLE)
    {
      for (int k = 0; k < actual->n_elems; k++)
        if (!ps_sharding_equal_layout (actual->elems[k], expected))
          return FALSE;
      return actual->n_elems > 0;
    }
  if (expected->kind == PS_SHARDING_TUPLE && actual->kind != PS_SHARDING_TUPLE)
    {
      for (int k = 0; k < expected->n_elems; k++)
        if (!ps_sharding_equal_layout (expected->elems[k], actual))
          return FALSE;
      return expected->n_elems > 0;
    }
  return FALSE;
}

static char *
sh_text (const PsSharding *s)
{
  return s ? ps_sharding_to_string (s) : g_strdup ("(none)");
}

static void
emit (GString *out, gboolean ok, const char *kind, const char *fmt, ...) G_GNUC_PRINTF (4, 5);

static void
emit (GString *out, gboolean ok, const char *kind, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  for (char *c = msg; *c; c++)
    if (*c == '\n' || *c == '\t')
      *c = ' ';
  g_string_append_printf (out, "%d\t%s\t%s\n", ok ? 1 : 0, kind, msg);
}

static void
check_one (GString *out, const PsModule *m, JsonObject *e, gboolean changed)
{
  const char *kind = json_object_get_string_member (e, "kind");
  const char *name = json_object_has_member (e, "instr") ? json_object_get_string_member (e, "instr")
                                                         : "";
  if (strcmp (kind, "error_substr") == 0)
    {
      emit (out, FALSE, kind, "expected an error containing '%s', the pass succeeded",
            json_object_get_string_member (e, "substr"));
      return;
    }
  if (strcmp (kind, "pass_changed") == 0)
    {
      gboolean want = json_object_get_boolean_member (e, "value");
      emit (out, want == changed, kind, "pass changed: expected %s, got %s",
            want ? "true" : "false", changed ? "true" : "false");
      return;
    }
  const char *ref = json_object_has_member (e, "ref") ? json_object_get_string_member (e, "ref") : "";
  if (g_str_has_prefix (ref, "ALL instructions"))
    {
      gboolean entry_only = strstr (ref, "entry") != NULL;
      gboolean ok = TRUE;
      g_autofree char *bad = NULL;
      g_autoptr (PsSharding) want = NULL;
      if (json_object_has_member (e, "sharding"))
        want = ps_sharding_from_string (json_object_get_string_member (e, "sharding"),
                                        "expectation", NULL);
      for (guint ck = 0; ck < m->computations->len && ok; ck++)
        {
          PsComputation *c = g_ptr_array_index (m->computations, ck);
          if (entry_only && c != m->entry)
            continue;
          for (guint k = 0; k < c->instrs->len && ok; k++)
            {
              PsInstr *i = g_ptr_array_index (c->instrs, k);
              gboolean good;
              if (strcmp (kind, "has_sharding") == 0)
                good = i->sharding != NULL;
              else if (strcmp (kind, "sharding_all_leaves") == 0)
                good = sharding_matches (i->sharding, want);
              else if (strcmp (kind, "sharding_pred") == 0)
                {
                  const char *pred = json_object_get_string_member (e, "pred");
                  gboolean v = FALSE;
                  if (i->sharding && strcmp (pred, "IsManual") == 0)
                    v = ps_sharding_is_manual (i->sharding);
                  else if (i->sharding && strcmp (pred, "IsReplicated") == 0)
                    v = ps_sharding_is_replicated (i->sharding);
                  good = v == json_object_get_boolean_member (e, "value");
                }
              else
                good = TRUE;
              if (!good)
                {
                  ok = FALSE;
                  g_autofree char *t = sh_text (i->sharding);
                  bad = g_strdup_printf ("%s has %s", i->name, t);
                }
            }
        }
      emit (out, ok, kind, "all instructions: %s", ok ? "ok" : bad);
      return;
    }
  const PsInstr *i = resolve_ref (m, e);
  if (strcmp (kind, "exists") == 0)
    {
      emit (out, i != NULL, kind, "%s %s", name, i ? "exists" : "does not exist");
      return;
    }
  if (strcmp (kind, "not_exists") == 0)
    {
      emit (out, i == NULL, kind, "%s %s", name, i ? "exists" : "does not exist");
      return;
    }
  if (!i)
    {
      emit (out, FALSE, kind, "%s: no such instruction", name);
      return;
    }
  if (strcmp (kind, "sharding") == 0)
    {
      const char *want_text = json_object_get_string_member (e, "sharding");
      GError *err = NULL;
      g_autoptr (PsSharding) want = ps_sharding_from_string (want_text, "expectation", &err);
      if (!want)
        {
          emit (out, FALSE, kind, "%s: cannot parse expected sharding: %s", name, err->message);
          g_error_free (err);
          return;
        }
      g_autoptr (PsSharding) got = sub_by_path (i->sharding, i->shape, e);
      g_autofree char *gt = sh_text (got);
      gboolean ok = sharding_matches (got, want);
      emit (out, ok, kind, "%s: expected %s, got %s", name, want_text, gt);
      return;
    }
  if (strcmp (kind, "no_sharding") == 0 || strcmp (kind, "has_sharding") == 0)
    {
      gboolean want = strcmp (kind, "has_sharding") == 0;
      g_autofree char *gt = sh_text (i->sharding);
      emit (out, (i->sharding != NULL) == want, kind, "%s: expected %s, got %s", name,
            want ? "a sharding" : "no sharding", gt);
      return;
    }
  if (strcmp (kind, "metadata") == 0)
    {
      g_autoptr (PsSharding) got = sub_by_path (i->sharding, i->shape, e);
      g_auto (GStrv) names = ps_sharding_op_names (got);
      JsonArray *want = json_object_get_array_member (e, "op_names");
      guint nw = want ? json_array_get_length (want) : 0;
      gboolean ok = g_strv_length (names) == nw;
      for (guint k = 0; ok && k < nw; k++)
        ok = strcmp (names[k], json_array_get_string_element (want, k)) == 0;
      g_autofree char *gotj = g_strjoinv (",", names);
      GString *wj = g_string_new (NULL);
      for (guint k = 0; k < nw; k++)
        g_string_append_printf (wj, "%s%s", k ? "," : "", json_array_get_string_element (want, k));
      emit (out, ok, kind, "%s: expected op names [%s], got [%s]", name, wj->str, gotj);
      g_string_free (wj, TRUE);
      return;
    }
  if (strcmp (kind, "same_sharding") == 0 || strcmp (kind, "different_sharding") == 0)
    {
      const char *n2 = json_object_get_string_member (e, "instr2");
      const PsInstr *j = ps_module_find_instr (m, n2);
      gboolean same = j && i->sharding && j->sharding
                      && ps_sharding_equal_layout (i->sharding, j->sharding);
      gboolean want = strcmp (kind, "same_sharding") == 0;
      emit (out, j && same == want, kind, "%s vs %s: %s", name, n2,
            same ? "same sharding" : "different shardings");
      return;
    }
  if (strcmp (kind, "sharding_pred") == 0)
    {
      const char *pred = json_object_get_string_member (e, "pred");
      g_autoptr (PsSharding) got = sub_by_path (i->sharding, i->shape, e);
      gboolean v = FALSE;
      if (got && strcmp (pred, "IsManual") == 0)
        v = ps_sharding_is_manual (got);
      else if (got && strcmp (pred, "IsReplicated") == 0)
        v = ps_sharding_is_replicated (got);
      gboolean want = json_object_get_boolean_member (e, "value");
      g_autofree char *gt = sh_text (got);
      emit (out, v == want, kind, "%s: %s expected %s, sharding %s", name, pred,
            want ? "true" : "false", gt);
      return;
    }
  if (strcmp (kind, "shape") == 0)
    {
      g_autofree char *s = ps_shape_to_string (i->shape, FALSE);
      const char *want = json_object_get_string_member (e, "shape");
      emit (out, strcmp (s, want) == 0, kind, "%s: expected shape %s, got %s", name, want, s);
      return;
    }
  if (strcmp (kind, "opcode") == 0)
    {
      const char *want = json_object_get_string_member (e, "opcode");
      emit (out, strcmp (ps_opcode_name (i->opcode), want) == 0, kind, "%s: opcode %s", name,
            ps_opcode_name (i->opcode));
      return;
    }
  emit (out, FALSE, kind, "unknown expectation kind");
}

static gboolean *
bool_list (JsonObject *params, const char *key, int *n)
{
  *n = 0;
  if (!params || !json_object_has_member (params, key))
    return NULL;
  JsonNode *node = json_object_get_member (params, key);
  if (JSON_NODE_HOLDS_ARRAY (node))
    {
      JsonArray *a = json_node_get_array (node);
      *n = (int) json_array_get_length (a);
      gboolean *v = g_new0 (gboolean, *n > 0 ? *n : 1);
      for (int k = 0; k < *n; k++)
        {
          JsonNode *x = json_array_get_element (a, k);
          v[k] = JSON_NODE_HOLDS_VALUE (x) && json_node_get_value_type (x) == G_TYPE_BOOLEAN
                 && json_node_get_boolean (x);
        }
      return v;
    }
  if (JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_BOOLEAN)
    {
      *n = 1;
      gboolean *v = g_new0 (gboolean, 1);
      v[0] = json_node_get_boolean (node);
      return v;
    }
  return NULL;
}

static gboolean
bool_param (JsonObject *params, const char *key)
{
  if (!params || !json_object_has_member (params, key))
    return FALSE;
  JsonNode *n = json_object_get_member (params, key);
  return JSON_NODE_HOLDS_VALUE (n) && json_node_get_value_type (n) == G_TYPE_BOOLEAN
         && json_node_get_boolean (n);
}

static void
clear_metadata (PsModule *m)
{
  for (guint ck = 0; ck < m->computations->len; ck++)
    {
      PsComputation *c = g_ptr_array_index (m->computations, ck);
      for (guint k = 0; k < c->instrs->len; k++)
        {
          PsInstr *i = g_ptr_array_index (c->instrs, k);
          g_clear_pointer (&i->metadata, g_free);
          if (i->sharding)
            {
              g_clear_pointer (&i->sharding->metadata, g_free);
              for (int e = 0; e < i->sharding->n_elems; e++)
                g_clear_pointer (&i->sharding->elems[e]->metadata, g_free);
            }
        }
    }
}

/* Runs one case; returns the expectation lines. */
static GString *
run_case (JsonObject *cs)
{
  GString *out = g_string_new (NULL);
  const char *hlo = json_object_get_string_member (cs, "hlo");
  JsonArray *expect = json_object_get_array_member (cs, "expect");
  guint ne = expect ? json_array_get_length (expect) : 0;
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (hlo, strlen (hlo), "case.hlo", &error);
  if (!m)
    {
      for (guint k = 0; k < ne; k++)
        emit (out, FALSE, json_object_get_string_member (json_array_get_object_element (expect, k), "kind"),
              "module does not parse: %s", error->message);
      if (ne == 0)
        emit (out, FALSE, "parse", "module does not parse: %s", error->message);
      g_error_free (error);
      return out;
    }
  JsonObject *params = json_object_has_member (cs, "params")
                           ? json_object_get_object_member (cs, "params") : NULL;
  if (json_object_has_member (cs, "clear_metadata_before_run")
      && json_object_get_boolean_member (cs, "clear_metadata_before_run"))
    clear_metadata (m);
  PsPropagateOptions o;
  memset (&o, 0, sizeof o);
  o.is_spmd = bool_param (params, "is_spmd");
  o.propagate_metadata = bool_param (params, "propagate_metadata");
  o.cse_prevention_only = bool_param (params, "cse_prevention_only");
  gboolean *to_out = bool_list (params, "allow_spmd_sharding_propagation_to_output", &o.n_to_output);
  gboolean *to_par = bool_list (params, "allow_spmd_sharding_propagation_to_parameters",
                                &o.n_to_parameters);
  o.to_output = to_out;
  o.to_parameters = to_par;
  o.max_iterations = 200;
  o.source_name = "case.hlo";
  g_autoptr (GPtrArray) threads = NULL;
  if (params && json_object_has_member (params, "execution_threads")
      && JSON_NODE_HOLDS_ARRAY (json_object_get_member (params, "execution_threads")))
    {
      JsonArray *a = json_object_get_array_member (params, "execution_threads");
      threads = g_ptr_array_new ();
      for (guint k = 0; k < json_array_get_length (a); k++)
        g_ptr_array_add (threads, (gpointer) json_array_get_string_element (a, k));
      g_ptr_array_add (threads, NULL);
      o.execution_threads = (const char *const *) threads->pdata;
    }
  PsPropagateStats stats;
  gboolean ok = ps_propagate_full (m, &o, &stats, &error);
  for (guint k = 0; k < ne; k++)
    {
      JsonObject *e = json_array_get_object_element (expect, k);
      const char *kind = json_object_get_string_member (e, "kind");
      if (!ok)
        {
          if (strcmp (kind, "error_substr") == 0)
            {
              const char *sub = json_object_get_string_member (e, "substr");
              emit (out, strstr (error->message, sub) != NULL, kind, "error: %s", error->message);
            }
          else
            emit (out, FALSE, kind, "the pass failed: %s", error->message);
          continue;
        }
      check_one (out, m, e, stats.changed);
    }
  if (!ok && ne == 0)
    emit (out, FALSE, "error", "the pass failed: %s", error->message);
  if (error)
    g_error_free (error);
  g_free (to_out);
  g_free (to_par);
  ps_module_free (m);
  return out;
}

/* ---- the parent ---------------------------------------------------------- */

static GString *
run_case_cb (gpointer cs)
{
  return run_case (cs);
}

/* A crash or a hang of the child fails the case (kind "crash"). */
static GString *
run_isolated (JsonObject *cs)
{
  g_autofree char *why = NULL;
  GString *r = ps_cli_run_isolated (run_case_cb, cs, CASE_TIME_LIMIT_S, &why);
  if (r == NULL)
    return run_case (cs);
  if (why)
    g_string_append_printf (r, "0\tcrash\tthe case %s\n", why);
  return r;
}

typedef struct {
  int core_ok, core_n, other_ok, other_n, meta_ok, meta_n;
  int runs_ok, runs_n;
} Totals;

int
ps_cmd_conformance_propagation (int argc, char **argv)
{
  gboolean json = FALSE, in_process = FALSE, quiet = FALSE;
  char *filter = NULL, *only = NULL;
  GOptionEntry entries[] = {
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print the result of every expectation as JSON", NULL },
    /* --match, --case and --in-process as conformance partitioner has them. */
    { "match", 0, 0, G_OPTION_ARG_STRING, &filter, "Only run cases whose name contains TEXT", "TEXT" },
    { "case", 0, 0, G_OPTION_ARG_STRING, &only, "Only run the case named exactly NAME", "NAME" },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet, "No progress on stderr (shown on a terminal: the case being run)", NULL },
    { "in-process", 0, 0, G_OPTION_ARG_NONE, &in_process,
      "Run cases in this process (no crash or time-limit isolation; for debuggers; --no-fork: the same)", NULL },
    { "no-fork", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_NONE, &in_process, NULL, NULL },
    { NULL, 0, 0, 0, NULL, NULL, NULL },
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE.jsonl");
  g_option_context_set_summary (
      ctx, "Runs every case of a sharding-propagation conformance file (JSON Lines, see\n"
           "tests/data/conformance/README.md; use the expanded file for concrete\n"
           "parameters) through podsim's propagation pass. Prints one line per failing\n"
           "run with what differed, the figures per kind of expectation, and ends with\n"
           "'N passed, N failed', counting runs whose every sharding, no_sharding and\n"
           "has_sharding expectation holds (and that did not fail or crash). Each case\n"
           "runs in its own process with a time limit. Exit status 0 when every run\n"
           "passed, 1 otherwise, 2 on bad input.");
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!ps_cli_parse (ctx, &argc, &argv))
    return PS_EXIT_USAGE;
  if (argc != 2)
    {
      fprintf (stderr, "%s: expected one FILE.jsonl (see '%s --help')\n", g_get_prgname (),
               g_get_prgname ());
      g_free (filter);
      g_free (only);
      return PS_EXIT_USAGE;
    }
  g_autofree char *text = NULL;
  gsize len = 0;
  GError *error = NULL;
  if (!ps_cli_read_input (argv[1], &text, &len, &error))
    {
      g_free (filter);
      g_free (only);
      return ps_cli_fail (error);
    }
  g_auto (GStrv) lines = g_strsplit (text, "\n", -1);
  gboolean progress = ps_progress_on (quiet);
  Totals t = { 0 };
  g_autoptr (JsonBuilder) jb = json_builder_new ();
  json_builder_begin_object (jb);
  json_builder_set_member_name (jb, "runs");
  json_builder_begin_array (jb);
  for (int ln = 0; lines[ln]; ln++)
    {
      if (!*g_strstrip (lines[ln]))
        continue;
      if (!ps_json_depth_ok (lines[ln], argv[1], ln + 1, &error))
        {
          g_free (filter);
          g_free (only);
          return ps_cli_fail (error);
        }
      g_autoptr (JsonParser) p = json_parser_new ();
      if (!json_parser_load_from_data (p, lines[ln], -1, &error)
          || !JSON_NODE_HOLDS_OBJECT (json_parser_get_root (p)))
        {
          g_autofree char *msg = g_strdup_printf ("%s:%d: not a JSON object: %s", argv[1], ln + 1,
                                                  error ? error->message : "wrong type");
          g_clear_error (&error);
          g_free (filter);
          g_free (only);
          return ps_cli_failf ("%s", msg);
        }
      JsonObject *cs = json_node_get_object (json_parser_get_root (p));
      const char *name = json_object_has_member (cs, "name")
                             ? json_object_get_string_member (cs, "name") : "(unnamed)";
      if ((filter && !strstr (name, filter)) || (only && strcmp (name, only) != 0))
        continue;
      if (!json_object_has_member (cs, "hlo"))
        {
          g_free (filter);
          g_free (only);
          return ps_cli_failf ("%s:%d: case has no 'hlo'", argv[1], ln + 1);
        }
      ps_progress (progress, "podsim conformance: line %d: %s", ln + 1, name);
      GString *res = in_process ? run_case (cs) : run_isolated (cs);
      g_auto (GStrv) rl = g_strsplit (res->str, "\n", -1);
      gboolean run_ok = TRUE;
      GString *why = g_string_new (NULL);
      json_builder_begin_object (jb);
      json_builder_set_member_name (jb, "name");
      json_builder_add_string_value (jb, name);
      json_builder_set_member_name (jb, "expectations");
      json_builder_begin_array (jb);
      for (int k = 0; rl[k]; k++)
        {
          if (!*rl[k])
            continue;
          g_auto (GStrv) f = g_strsplit (rl[k], "\t", 3);
          if (!f[0] || !f[1] || !f[2])
            continue;
          gboolean ok = f[0][0] == '1';
          const char *kind = f[1];
          gboolean core = is_core_kind (kind);
          gboolean meta = strcmp (kind, "metadata") == 0;
          gboolean fatal = strcmp (kind, "crash") == 0 || strcmp (kind, "parse") == 0
                           || strcmp (kind, "error") == 0 || strcmp (kind, "error_substr") == 0;
          if (core)
            {
              t.core_n++;
              t.core_ok += ok;
            }
          else if (meta)
            {
              t.meta_n++;
              t.meta_ok += ok;
            }
          else if (!fatal || strcmp (kind, "error_substr") == 0)
            {
              t.other_n++;
              t.other_ok += ok;
            }
          if (!ok && (core || fatal))
            {
              run_ok = FALSE;
              g_string_append_printf (why, "%s%s", why->len ? "; " : "", f[2]);
            }
          json_builder_begin_object (jb);
          json_builder_set_member_name (jb, "kind");
          json_builder_add_string_value (jb, kind);
          json_builder_set_member_name (jb, "ok");
          json_builder_add_boolean_value (jb, ok);
          json_builder_set_member_name (jb, "detail");
          json_builder_add_string_value (jb, f[2]);
          json_builder_end_object (jb);
        }
      json_builder_end_array (jb);
      json_builder_set_member_name (jb, "passed");
      json_builder_add_boolean_value (jb, run_ok);
      json_builder_end_object (jb);
      t.runs_n++;
      t.runs_ok += run_ok;
      if (!run_ok && !json)
        {
          ps_progress (progress, NULL);
          printf ("FAIL %s: %s\n", name, why->str);
          fflush (stdout);
        }
      g_string_free (why, TRUE);
      g_string_free (res, TRUE);
    }
  ps_progress (progress, NULL);
  json_builder_end_array (jb);
  json_builder_set_member_name (jb, "summary");
  json_builder_begin_object (jb);
#define MEMBER(k, v) json_builder_set_member_name (jb, k); json_builder_add_int_value (jb, v);
  MEMBER ("runs_passed", t.runs_ok);
  MEMBER ("runs_failed", t.runs_n - t.runs_ok);
  MEMBER ("sharding_expectations_held", t.core_ok);
  MEMBER ("sharding_expectations", t.core_n);
  MEMBER ("other_expectations_held", t.other_ok);
  MEMBER ("other_expectations", t.other_n);
  MEMBER ("metadata_expectations_held", t.meta_ok);
  MEMBER ("metadata_expectations", t.meta_n);
#undef MEMBER
  json_builder_end_object (jb);
  json_builder_end_object (jb);
  g_free (filter);
  g_free (only);
  if (json)
    {
      g_autoptr (JsonGenerator) gen = json_generator_new ();
      json_generator_set_pretty (gen, TRUE);
      g_autoptr (JsonNode) root = json_builder_get_root (jb);
      json_generator_set_root (gen, root);
      g_autofree char *s = json_generator_to_data (gen, NULL);
      puts (s);
    }
  else
    {
      printf ("sharding/no_sharding/has_sharding expectations: %d/%d held (%.1f%%)\n", t.core_ok,
              t.core_n, t.core_n ? 100.0 * t.core_ok / t.core_n : 100.0);
      printf ("other expectations: %d/%d held (%.1f%%)\n", t.other_ok, t.other_n,
              t.other_n ? 100.0 * t.other_ok / t.other_n : 100.0);
      printf ("metadata expectations: %d/%d held (%.1f%%)\n", t.meta_ok, t.meta_n,
              t.meta_n ? 100.0 * t.meta_ok / t.meta_n : 100.0);
      printf ("runs: %.1f%% passed\n", t.runs_n ? 100.0 * t.runs_ok / t.runs_n : 100.0);
      printf ("%d passed, %d failed\n", t.runs_ok, t.runs_n - t.runs_ok);
    }
  if (fflush (stdout) != 0)
    return PS_EXIT_USAGE;
  return t.runs_ok == t.runs_n ? 0 : 1;
}
