/* Model families, their parameters and model files: see family.h. */
#include "config.h"

#include "models/family.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/checked.h"
#include "common/error.h"

/* ---- the registry ------------------------------------------------------------- */

gboolean
ps_params_check_devices (const PsParams *p, const PsModelTarget *t, int64_t n, const char *what, GError **error)
{
  if (!t || n == t->n_cores || (n < t->n_cores && ps_params_bool (p, "idle_cores")))
    return TRUE;
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s has %" G_GINT64_FORMAT " devices but slice %s has %d cores%s",
               what, n, ps_params_str (p, "slice"), t->n_cores,
               n < t->n_cores ? " (--idle-cores leaves the rest idle)" : "");
  return FALSE;
}

/* One line per family; each lives in its own models/<name>_family.c. */
extern const PsModelFamily ps_dense_family;
extern const PsModelFamily ps_hlo_family;
extern const PsModelFamily ps_moe_family;
extern const PsModelFamily ps_unet_family;
extern const PsModelFamily ps_conformer_family;
extern const PsModelFamily ps_encdec_family;

static const PsModelFamily *const families[] = {
  &ps_dense_family,
  &ps_moe_family,
  &ps_unet_family,
  &ps_conformer_family,
  &ps_encdec_family,
  &ps_hlo_family,
  NULL
};

/* [slice] and [options]: the same for every family, appended to its specs. */
static const PsParamSpec common_specs[] = {
  { "slice", "slice", PS_PARAM_STRING, "v3-8",
    "Pod slice: v3-8, v3-32, v3-64, v3-128, v3-256, v3-512, v3-1024 or v3-2048", 0, 0, NULL, NULL, NULL },
  { "slice", "wrap", PS_PARAM_CHOICE, "auto",
    "Wrap links: auto (only on dimensions spanning the full pod), on, off", 0, 0, "auto|on|off", NULL, NULL },
  { "slice", "hw", PS_PARAM_PATH, "",
    "Hardware file (empty: the bundled TPU v3, topology/tpu-v3.ini)", 0, 0, NULL, NULL, NULL },
  { "options", "schedule", PS_PARAM_CHOICE, "xla",
    "Schedule of the partitioned step (doc/partitioner.md): xla (memory-aware order, "
    "collective-permutes overlapped), xla-all (every collective kind overlapped), sync, eager",
    0, 0, "xla|xla-all|sync|eager", NULL, NULL },
  { "options", "fusion", PS_PARAM_CHOICE, "xla",
    "Fusion of the partitioned step before its cost (doc/compute-model.md): xla (XLA's rules: "
    "single-user producers, cheap producers duplicated into all their consumers), producer "
    "(an elementwise op joins its single-use producer only), none (every op its own kernel)",
    0, 0, "xla|producer|none", NULL, NULL },
  { "options", "async_collectives", PS_PARAM_BOOL, "false",
    "Same as schedule = eager: every collective overlapped as early and late as data allows",
    0, 0, NULL, NULL, "*" },
  { "options", "windowed_einsum", PS_PARAM_INT, "-1",
    "Partition dots whose operand would be all-gathered to more than this many bytes per "
    "device as windowed einsums (0: all such dots; -1: off)", -1, G_MAXINT64, NULL, NULL, NULL },
  { "options", "collectives", PS_PARAM_CHOICE, "torus2d",
    "Collective algorithms (doc/collectives.md): torus2d, dim-by-dim, ring, torus2d-wrap-a2a "
    "(torus2d with the all-to-all through the wrap links)", 0, 0,
    "torus2d|dim-by-dim|ring|torus2d-wrap-a2a", NULL, NULL },
  { "options", "idle_cores", PS_PARAM_BOOL, "false",
    "Let the program use fewer devices than the slice has cores (device d on core d; the rest idle)",
    0, 0, NULL, NULL, NULL },
  { "options", "cache", PS_PARAM_BOOL, "true",
    "Replay identical collectives on an idle network from a cache (false: simulate each)",
    0, 0, NULL, NULL, NULL },
};

static const char *const sections[] = { "model", "parallelism", "slice", "options", NULL };

const PsModelFamily *const *
ps_model_families (void)
{
  return families;
}

const PsModelFamily *
ps_model_family_find (const char *name, GError **error)
{
  for (int i = 0; families[i]; i++)
    if (g_ascii_strcasecmp (name, families[i]->name) == 0)
      return families[i];
  GString *known = g_string_new (NULL);
  for (int i = 0; families[i]; i++)
    g_string_append_printf (known, "%s%s", i ? ", " : "", families[i]->name);
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "unknown model family '%s' (known: %s)", name, known->str);
  g_string_free (known, TRUE);
  return NULL;
}

int
ps_model_family_n_specs (const PsModelFamily *f)
{
  return f->n_specs + (int) G_N_ELEMENTS (common_specs);
}

const PsParamSpec *
ps_model_family_spec (const PsModelFamily *f, int i)
{
  g_return_val_if_fail (i >= 0 && i < ps_model_family_n_specs (f), NULL);
  return i < f->n_specs ? &f->specs[i] : &common_specs[i - f->n_specs];
}

/* Option names are derived once per spec and kept for the program's life. */
const char *
ps_param_option (const PsParamSpec *s)
{
  static GHashTable *options;
  static GMutex lock;
  if (s->option)
    return s->option;
  g_mutex_lock (&lock);
  if (!options)
    options = g_hash_table_new (NULL, NULL);
  char *o = g_hash_table_lookup (options, s);
  if (!o)
    {
      o = g_strdelimit (g_strdup (s->key), "_", '-');
      g_hash_table_insert (options, (gpointer) s, o);
    }
  g_mutex_unlock (&lock);
  return o;
}

/* Keys and options match with '-' and '_' alike. */
static gboolean
name_equal (const char *a, const char *b)
{
  for (; *a && *b; a++, b++)
    {
      char x = *a == '-' ? '_' : *a, y = *b == '-' ? '_' : *b;
      if (x != y)
        return FALSE;
    }
  return *a == *b;
}

static int
spec_index (const PsModelFamily *f, const char *name)
{
  int n = ps_model_family_n_specs (f);
  for (int i = 0; i < n; i++)
    {
      const PsParamSpec *s = ps_model_family_spec (f, i);
      if (name_equal (name, s->key) || name_equal (name, ps_param_option (s)))
        return i;
    }
  return -1;
}

const PsParamSpec *
ps_model_family_find_spec (const PsModelFamily *f, const char *name)
{
  int i = spec_index (f, name);
  return i < 0 ? NULL : ps_model_family_spec (f, i);
}

/* ---- values ------------------------------------------------------------------- */

typedef struct {
  int64_t i;                 /* INT; BOOL 0/1; CHOICE: index in choices */
  double d;                  /* FLOAT */
  int rank;                  /* MESH */
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  char *s;                   /* STRING, PATH */
  char *where;               /* "--option" or "FILE:LINE:COL: key" */
} Value;

struct PsParams {
  const PsModelFamily *family;
  int n;
  Value *v;
  double published;          /* [published] throughput, 0 when none */
  char *published_table;
  char *published_source;
  double published_step_s;   /* [published] step_time: a published step time
                              * of a run whose configuration is not known */
  char *published_series;    /* [published] series */
};

const PsModelFamily *
ps_params_family (const PsParams *p)
{
  return p->family;
}

/* Index of `text` among the '|'-separated choices, or -1. */
static int
choice_index (const char *choices, const char *text)
{
  g_auto (GStrv) c = g_strsplit (choices, "|", -1);
  for (int i = 0; c[i]; i++)
    if (strcmp (c[i], text) == 0)
      return i;
  return -1;
}

static char *
choice_name (const char *choices, int64_t i)
{
  g_auto (GStrv) c = g_strsplit (choices, "|", -1);
  g_return_val_if_fail (i >= 0 && i < (int64_t) g_strv_length (c), g_strdup (""));
  return g_strdup (c[i]);
}

/* Parses `text` for spec s into *v. The error message is the problem only;
 * the caller says where. */
static gboolean
parse_value (const PsParamSpec *s, const char *text, Value *v, char **problem)
{
  switch (s->type)
    {
    case PS_PARAM_INT:
      {
        gint64 x;
        GError *e = NULL;
        if (!g_ascii_string_to_signed (text, 10, G_MININT64, G_MAXINT64, &x, &e))
          {
            gboolean range = g_error_matches (e, G_NUMBER_PARSER_ERROR, G_NUMBER_PARSER_ERROR_OUT_OF_BOUNDS);
            g_error_free (e);
            *problem = range ? g_strdup_printf ("must be at most %" G_GINT64_FORMAT " (got %s)", s->max, text)
                             : g_strdup_printf ("'%s' is not an integer", text);
            return FALSE;
          }
        if (x < s->min)
          {
            if (s->min == 1)
              *problem = g_strdup_printf ("must be positive (got %" G_GINT64_FORMAT ")", x);
            else
              *problem = g_strdup_printf ("must be at least %" G_GINT64_FORMAT " (got %" G_GINT64_FORMAT ")",
                                          s->min, x);
            return FALSE;
          }
        if (x > s->max)
          {
            *problem = g_strdup_printf ("must be at most %" G_GINT64_FORMAT " (got %" G_GINT64_FORMAT ")",
                                        s->max, x);
            return FALSE;
          }
        v->i = x;
        return TRUE;
      }
    case PS_PARAM_FLOAT:
      {
        char *end = NULL;
        double x = g_ascii_strtod (text, &end);
        if (end == text || *end != '\0' || !isfinite (x))
          {
            *problem = g_strdup_printf ("'%s' is not a number", text);
            return FALSE;
          }
        if (x < (double) s->min || x > (double) s->max)
          {
            *problem = g_strdup_printf ("must be between %" G_GINT64_FORMAT " and %" G_GINT64_FORMAT " (got %s)",
                                        s->min, s->max, text);
            return FALSE;
          }
        v->d = x;
        return TRUE;
      }
    case PS_PARAM_BOOL:
      {
        static const char *yes[] = { "true", "1", "yes", "on" }, *no[] = { "false", "0", "no", "off" };
        for (gsize k = 0; k < G_N_ELEMENTS (yes); k++)
          if (g_ascii_strcasecmp (text, yes[k]) == 0 || g_ascii_strcasecmp (text, no[k]) == 0)
            {
              v->i = g_ascii_strcasecmp (text, yes[k]) == 0;
              return TRUE;
            }
        *problem = g_strdup_printf ("'%s' is not true or false", text);
        return FALSE;
      }
    case PS_PARAM_CHOICE:
      {
        int k = choice_index (s->choices, text);
        if (k < 0)
          {
            g_autofree char *list = g_strdup (s->choices);
            g_strdelimit (list, "|", ',');
            g_autofree char *pretty = NULL;
            g_auto (GStrv) parts = g_strsplit (list, ",", -1);
            pretty = g_strjoinv (", ", parts);
            *problem = g_strdup_printf ("'%s' is not one of %s", text, pretty);
            return FALSE;
          }
        v->i = k;
        return TRUE;
      }
    case PS_PARAM_MESH:
      {
        if (*text == '\0' && s->min == 0)
          {
            v->rank = 0;
            return TRUE;
          }
        PsTraceMesh m = { 0 };
        if (!ps_trace_mesh_parse_dims (text, s->key, &m, NULL) || m.rank > PS_PARAM_MESH_MAX_RANK)
          {
            *problem = g_strdup_printf ("'%s' is not a mesh like 8x16 (dims of 1 or more, separated by 'x')", text);
            return FALSE;
          }
        int rank = (int) m.rank;
        int64_t dims[PS_PARAM_MESH_MAX_RANK] = { 0 };
        for (int k = 0; k < rank; k++)
          dims[k] = m.dims[k];
        if (rank < s->min || rank > s->max)
          {
            if (s->min == s->max)
              *problem = g_strdup_printf ("'%s' has %d dims, this model takes %" G_GINT64_FORMAT, text, rank, s->min);
            else
              *problem = g_strdup_printf ("'%s' has %d dims, this model takes %" G_GINT64_FORMAT " to %" G_GINT64_FORMAT,
                                          text, rank, s->min, s->max);
            return FALSE;
          }
        v->rank = rank;
        memcpy (v->dims, dims, sizeof dims);
        return TRUE;
      }
    case PS_PARAM_STRING:
    case PS_PARAM_PATH:
    case PS_PARAM_LIST:
      g_free (v->s);
      v->s = g_strdup (text);
      return TRUE;
    }
  g_assert_not_reached ();
}

static char *
value_text (const PsParamSpec *s, const Value *v)
{
  switch (s->type)
    {
    case PS_PARAM_INT:
      return g_strdup_printf ("%" G_GINT64_FORMAT, v->i);
    case PS_PARAM_FLOAT:
      {
        /* The shortest text that reads back to the same number. */
        char buf[G_ASCII_DTOSTR_BUF_SIZE];
        g_ascii_formatd (buf, sizeof buf, "%.15g", v->d);
        if (g_ascii_strtod (buf, NULL) != v->d)
          g_ascii_formatd (buf, sizeof buf, "%.17g", v->d);
        return g_strdup (buf);
      }
    case PS_PARAM_BOOL:
      return g_strdup (v->i ? "true" : "false");
    case PS_PARAM_CHOICE:
      return choice_name (s->choices, v->i);
    case PS_PARAM_MESH:
      {
        GString *g = g_string_new (NULL);
        for (int k = 0; k < v->rank; k++)
          g_string_append_printf (g, "%s%" G_GINT64_FORMAT, k ? "x" : "", v->dims[k]);
        return g_string_free (g, FALSE);
      }
    case PS_PARAM_STRING:
    case PS_PARAM_PATH:
    case PS_PARAM_LIST:
      return g_strdup (v->s ? v->s : "");
    }
  g_assert_not_reached ();
}

static char *
option_where (const PsParamSpec *s)
{
  return g_strdup_printf ("--%s", ps_param_option (s));
}

PsParams *
ps_params_new (const PsModelFamily *f)
{
  PsParams *p = g_new0 (PsParams, 1);
  p->family = f;
  p->n = ps_model_family_n_specs (f);
  p->v = g_new0 (Value, p->n);
  for (int i = 0; i < p->n; i++)
    {
      const PsParamSpec *s = ps_model_family_spec (f, i);
      g_autofree char *problem = NULL;
      if (!parse_value (s, s->def, &p->v[i], &problem))
        g_error ("model family %s: the default of %s: %s", f->name, s->key, problem);
      p->v[i].where = option_where (s);
    }
  return p;
}

PsParams *
ps_params_copy (const PsParams *p)
{
  PsParams *c = g_new0 (PsParams, 1);
  *c = *p;
  c->v = g_new0 (Value, p->n);
  for (int i = 0; i < p->n; i++)
    {
      c->v[i] = p->v[i];
      c->v[i].s = g_strdup (p->v[i].s);
      c->v[i].where = g_strdup (p->v[i].where);
    }
  c->published_table = g_strdup (p->published_table);
  c->published_source = g_strdup (p->published_source);
  c->published_step_s = p->published_step_s;
  c->published_series = g_strdup (p->published_series);
  return c;
}

void
ps_params_free (PsParams *p)
{
  if (!p)
    return;
  for (int i = 0; i < p->n; i++)
    {
      g_free (p->v[i].s);
      g_free (p->v[i].where);
    }
  g_free (p->v);
  g_free (p->published_table);
  g_free (p->published_source);
  g_free (p->published_series);
  g_free (p);
}

/* Sets value i from text; `where` is "--option" (PS_ERROR_OPTION) or a file
 * position "FILE:LINE:COL" (PS_ERROR_PARSE). */
static gboolean
set_index (PsParams *p, int i, const char *text, const char *where, GError **error)
{
  const PsParamSpec *s = ps_model_family_spec (p->family, i);
  gboolean is_option = g_str_has_prefix (where, "--");
  g_autofree char *problem = NULL;
  Value v = p->v[i];
  v.s = NULL;
  /* A value is one line of a model file: a newline would inject lines
   * (sections, keys) into the files and CSV rows it is written to. */
  if (strpbrk (text, "\n\r"))
    {
      g_set_error (error, PS_ERROR, is_option ? PS_ERROR_OPTION : PS_ERROR_PARSE,
                   "%s%s%s: a value cannot hold a line break", where, is_option ? "" : ": ", is_option ? "" : s->key);
      return FALSE;
    }
  if (!parse_value (s, text, &v, &problem))
    {
      g_free (v.s);
      /* "--layers must be positive (got 0)", "--layers: 'x' is not an integer". */
      const char *sep = g_str_has_prefix (problem, "must ") ? " " : ": ";
      if (is_option)
        g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s%s%s", where, sep, problem);
      else
        g_set_error (error, PS_ERROR, PS_ERROR_PARSE, "%s: %s%s%s", where, s->key, sep, problem);
      return FALSE;
    }
  if (s->type != PS_PARAM_STRING && s->type != PS_PARAM_PATH && s->type != PS_PARAM_LIST)
    v.s = g_strdup (p->v[i].s);
  g_free (p->v[i].s);
  g_free (p->v[i].where);
  p->v[i] = v;
  p->v[i].where = is_option ? g_strdup (where) : g_strdup_printf ("%s: %s", where, s->key);
  return TRUE;
}

gboolean
ps_params_set (PsParams *p, const char *key, const char *text, const char *where, GError **error)
{
  int i = spec_index (p->family, key);
  if (i < 0)
    {
      g_set_error (error, PS_ERROR, g_str_has_prefix (where, "--") ? PS_ERROR_OPTION : PS_ERROR_PARSE,
                   "%s: '%s' is not a parameter of model family %s", where, key, p->family->name);
      return FALSE;
    }
  return set_index (p, i, text, where, error);
}

gboolean
ps_params_append (PsParams *p, const char *key, const char *text, const char *where, GError **error)
{
  int i = spec_index (p->family, key);
  g_return_val_if_fail (i >= 0 && ps_model_family_spec (p->family, i)->type == PS_PARAM_LIST, FALSE);
  if (strchr (text, ';'))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: '%s': one item at a time (no ';')", where, text);
      return FALSE;
    }
  const char *old = p->v[i].s ? p->v[i].s : "";
  g_autofree char *joined = *old ? g_strconcat (old, ";", text, NULL) : g_strdup (text);
  return set_index (p, i, joined, where, error);
}

static const Value *
get (const PsParams *p, const char *key, PsParamType type)
{
  int i = spec_index (p->family, key);
  g_assert (i >= 0);
  const PsParamSpec *s = ps_model_family_spec (p->family, i);
  g_assert (s->type == type || (type == PS_PARAM_STRING && (s->type == PS_PARAM_CHOICE
                                                            || s->type == PS_PARAM_PATH
                                                            || s->type == PS_PARAM_LIST)));
  return &p->v[i];
}

int64_t
ps_params_int (const PsParams *p, const char *key)
{
  return get (p, key, PS_PARAM_INT)->i;
}

double
ps_params_double (const PsParams *p, const char *key)
{
  return get (p, key, PS_PARAM_FLOAT)->d;
}

gboolean
ps_params_bool (const PsParams *p, const char *key)
{
  return get (p, key, PS_PARAM_BOOL)->i != 0;
}

const char *
ps_params_str (const PsParams *p, const char *key)
{
  int i = spec_index (p->family, key);
  g_assert (i >= 0);
  const PsParamSpec *s = ps_model_family_spec (p->family, i);
  if (s->type == PS_PARAM_CHOICE)
    {
      /* Choices are returned from static storage: the spec's own string
       * split once per spec. */
      static GHashTable *split;
      static GMutex lock;
      g_mutex_lock (&lock);
      if (!split)
        split = g_hash_table_new (NULL, NULL);
      char **c = g_hash_table_lookup (split, s);
      if (!c)
        {
          c = g_strsplit (s->choices, "|", -1);
          g_hash_table_insert (split, (gpointer) s, c);
        }
      g_mutex_unlock (&lock);
      return c[p->v[i].i];
    }
  return get (p, key, PS_PARAM_STRING)->s;
}

int
ps_params_mesh (const PsParams *p, const char *key, int64_t *dims)
{
  const Value *v = get (p, key, PS_PARAM_MESH);
  memcpy (dims, v->dims, sizeof v->dims);
  return v->rank;
}

int64_t
ps_params_mesh_size (const PsParams *p, const char *key)
{
  const Value *v = get (p, key, PS_PARAM_MESH);
  int64_t n = 1;
  for (int k = 0; k < v->rank; k++)
    n *= v->dims[k];
  return n;
}

char *
ps_params_text (const PsParams *p, const char *key)
{
  int i = spec_index (p->family, key);
  g_assert (i >= 0);
  return value_text (ps_model_family_spec (p->family, i), &p->v[i]);
}

const char *
ps_params_where (const PsParams *p, const char *key)
{
  int i = spec_index (p->family, key);
  g_assert (i >= 0);
  return p->v[i].where;
}

double
ps_params_published_step (const PsParams *p, const char **series)
{
  if (series)
    *series = p->published_series;
  return p->published_step_s;
}

double
ps_params_published (const PsParams *p, const char **table, const char **source)
{
  if (table)
    *table = p->published_table;
  if (source)
    *source = p->published_source;
  return p->published;
}

/* ---- model files ---------------------------------------------------------------- */

static gboolean
is_key_char (char c)
{
  return g_ascii_isalnum (c) || c == '_' || c == '-';
}

typedef struct {
  const char *path;
  const char *text;
  const char *line;          /* start of the current line */
  int lineno;
  const char *const *extra;  /* more sections a caller reads (NULL-terminated) */
} Reader;

static void G_GNUC_PRINTF (4, 5)
reader_error (Reader *r, GError **error, const char *at, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  ps_set_error_at (error, PS_ERROR_PARSE, r->path, r->lineno, (int) (at - r->line) + 1, "%s", msg);
}

/* Calls fn for each "key = value" line with its section; syntax errors
 * stop the walk. Values are trimmed; keys are [A-Za-z0-9_-]+. */
typedef gboolean (*EntryFn) (Reader *r, const char *section, const char *key, const char *value,
                             const char *key_at, const char *value_at, gpointer data, GError **error);

static gboolean
walk (Reader *r, EntryFn fn, gpointer data, GError **error)
{
  g_autofree char *section = NULL;
  const char *p = r->text;
  r->lineno = 0;
  while (*p)
    {
      const char *eol = strchr (p, '\n');
      if (!eol)
        eol = p + strlen (p);
      r->line = p;
      r->lineno++;
      const char *q = p;
      while (q < eol && (*q == ' ' || *q == '\t'))
        q++;
      const char *end = eol;
      while (end > q && g_ascii_isspace (end[-1]))
        end--;
      if (q == end || *q == '#')
        ;
      else if (*q == '[')
        {
          const char *close = memchr (q, ']', (size_t) (end - q));
          if (!close || close + 1 != end)
            {
              reader_error (r, error, q, "a section header is '[name]' on its own line");
              return FALSE;
            }
          g_free (section);
          section = g_strndup (q + 1, (gsize) (close - q - 1));
          gboolean known = strcmp (section, "published") == 0;
          for (int i = 0; sections[i]; i++)
            known |= strcmp (section, sections[i]) == 0;
          for (int i = 0; r->extra && r->extra[i]; i++)
            known |= strcmp (section, r->extra[i]) == 0;
          if (!known)
            {
              g_autofree char *more = r->extra ? g_strjoinv (", ", (char **) r->extra) : NULL;
              reader_error (r, error, q + 1,
                            "unknown section [%s] (known: model, parallelism, slice, options, published%s%s)",
                            section, more ? ", " : "", more ? more : "");
              return FALSE;
            }
        }
      else
        {
          const char *k = q;
          while (q < end && is_key_char (*q))
            q++;
          const char *kend = q;
          while (q < end && (*q == ' ' || *q == '\t'))
            q++;
          if (kend == k || q == end || *q != '=')
            {
              reader_error (r, error, k, "expected 'key = value', '[section]' or a '#' comment");
              return FALSE;
            }
          q++;
          while (q < end && (*q == ' ' || *q == '\t'))
            q++;
          if (!section)
            {
              reader_error (r, error, k, "a key before the first [section]");
              return FALSE;
            }
          g_autofree char *key = g_strndup (k, (gsize) (kend - k));
          g_autofree char *value = g_strndup (q, (gsize) (end - q));
          if (!fn (r, section, key, value, k, q, data, error))
            return FALSE;
        }
      p = *eol ? eol + 1 : eol;
    }
  return TRUE;
}

static gboolean
find_family (Reader *r, const char *section, const char *key, const char *value,
             const char *key_at, const char *value_at, gpointer data, GError **error)
{
  const PsModelFamily **f = data;
  (void) key_at;
  if (strcmp (section, "model") != 0 || strcmp (key, "family") != 0)
    return TRUE;
  if (*f)
    {
      reader_error (r, error, key_at, "family is set twice");
      return FALSE;
    }
  GError *local = NULL;
  *f = ps_model_family_find (value, &local);
  if (!*f)
    {
      reader_error (r, error, value_at, "%s", local->message);
      g_error_free (local);
      return FALSE;
    }
  return TRUE;
}

typedef struct {
  PsParams *p;
  gboolean *seen;            /* per spec */
  guint published_seen;      /* bit per [published] key */
  char *dir;                 /* the file's folder, for relative paths */
} Load;

static gboolean
set_published (Reader *r, Load *l, const char *key, const char *value, const char *key_at,
               const char *value_at, GError **error)
{
  static const char *keys[] = { "throughput", "table", "source", "step_time", "series" };
  int k = -1;
  for (int i = 0; i < (int) G_N_ELEMENTS (keys); i++)
    if (strcmp (key, keys[i]) == 0)
      k = i;
  if (k < 0)
    {
      reader_error (r, error, key_at, "unknown key '%s' in [published] (known: throughput, table, source, "
                    "step_time, series)", key);
      return FALSE;
    }
  if (l->published_seen & (1u << k))
    {
      reader_error (r, error, key_at, "'%s' is set twice", key);
      return FALSE;
    }
  l->published_seen |= 1u << k;
  if (k == 0 || k == 3)
    {
      char *end = NULL;
      double x = g_ascii_strtod (value, &end);
      if (end == value || *end != '\0' || !(x > 0) || x > 1e18)
        {
          reader_error (r, error, value_at, "%s: '%s' is not a positive number", key, value);
          return FALSE;
        }
      if (k == 0)
        l->p->published = x;
      else
        l->p->published_step_s = x;
    }
  else if (k == 1)
    l->p->published_table = g_strdup (value);
  else if (k == 2)
    l->p->published_source = g_strdup (value);
  else
    l->p->published_series = g_strdup (value);
  return TRUE;
}

static gboolean
set_entry (Reader *r, const char *section, const char *key, const char *value,
           const char *key_at, const char *value_at, gpointer data, GError **error)
{
  Load *l = data;
  for (int i = 0; r->extra && r->extra[i]; i++)
    if (strcmp (section, r->extra[i]) == 0)
      return TRUE;
  if (strcmp (section, "published") == 0)
    return set_published (r, l, key, value, key_at, value_at, error);
  if (strcmp (section, "model") == 0 && strcmp (key, "family") == 0)
    return TRUE;
  int i = -1, n = l->p->n;
  for (int k = 0; k < n && i < 0; k++)
    if (strcmp (ps_model_family_spec (l->p->family, k)->key, key) == 0)
      i = k;
  if (i < 0)
    {
      reader_error (r, error, key_at, "unknown key '%s' for model family %s (podsim run %s --print-config "
                    "lists them)", key, l->p->family->name, l->p->family->name);
      return FALSE;
    }
  const PsParamSpec *s = ps_model_family_spec (l->p->family, i);
  if (strcmp (s->section, section) != 0)
    {
      reader_error (r, error, key_at, "'%s' belongs in [%s], not [%s]", key, s->section, section);
      return FALSE;
    }
  if (l->seen[i])
    {
      reader_error (r, error, key_at, "'%s' is set twice", key);
      return FALSE;
    }
  l->seen[i] = TRUE;
  g_autofree char *where = g_strdup_printf ("%s:%d:%d", r->path, r->lineno, (int) (value_at - r->line) + 1);
  g_autofree char *resolved = NULL;
  if (s->type == PS_PARAM_PATH && *value && !g_path_is_absolute (value) && l->dir)
    resolved = g_build_filename (l->dir, value, NULL);
  return set_index (l->p, i, resolved ? resolved : value, where, error);
}

PsParams *
ps_params_read (const char *path, const char *text, GError **error)
{
  return ps_params_read_extra (path, text, NULL, error);
}

PsParams *
ps_params_read_extra (const char *path, const char *text, const char *const *extra, GError **error)
{
  Reader r = { path, text, text, 0, extra };
  const PsModelFamily *f = NULL;
  if (!walk (&r, find_family, &f, error))
    return NULL;
  if (!f)
    {
      GString *known = g_string_new (NULL);
      for (int i = 0; families[i]; i++)
        g_string_append_printf (known, "%s%s", i ? ", " : "", families[i]->name);
      ps_set_error_at (error, PS_ERROR_PARSE, path, 0, 0,
                       "no 'family' in [model] (known families: %s)", known->str);
      g_string_free (known, TRUE);
      return NULL;
    }
  g_autoptr (PsParams) p = ps_params_new (f);
  g_autofree gboolean *seen = g_new0 (gboolean, p->n);
  g_autofree char *dir = strchr (path, '/') ? g_path_get_dirname (path) : NULL;
  Load l = { p, seen, 0, dir };
  if (!walk (&r, set_entry, &l, error))
    return NULL;
  return g_steal_pointer (&p);
}

void
ps_ini_entry_free (PsIniEntry *e)
{
  if (!e)
    return;
  g_free (e->key);
  g_free (e->value);
  g_free (e->where);
  g_free (e->key_where);
  g_free (e);
}

typedef struct {
  const char *section;
  GPtrArray *entries;
  gboolean found;
} Collect;

static gboolean
collect_entry (Reader *r, const char *section, const char *key, const char *value,
               const char *key_at, const char *value_at, gpointer data, GError **error)
{
  Collect *c = data;
  (void) error;
  if (strcmp (section, c->section) != 0)
    return TRUE;
  PsIniEntry *e = g_new0 (PsIniEntry, 1);
  e->key = g_strdup (key);
  e->value = g_strdup (value);
  e->where = g_strdup_printf ("%s:%d:%d", r->path, r->lineno, (int) (value_at - r->line) + 1);
  e->key_where = g_strdup_printf ("%s:%d:%d", r->path, r->lineno, (int) (key_at - r->line) + 1);
  g_ptr_array_add (c->entries, e);
  return TRUE;
}

/* A section header alone, without keys, still counts as present. */
static gboolean
has_section (const char *text, const char *section)
{
  g_autofree char *hdr = g_strdup_printf ("[%s]", section);
  for (const char *p = text; (p = strstr (p, hdr)); p += strlen (hdr))
    {
      const char *b = p;
      while (b > text && (b[-1] == ' ' || b[-1] == '\t'))
        b--;
      if (b == text || b[-1] == '\n')
        return TRUE;
    }
  return FALSE;
}

GPtrArray *
ps_ini_read_section (const char *path, const char *text, const char *const *extra, const char *section,
                     gboolean *found, GError **error)
{
  Reader r = { path, text, text, 0, extra };
  g_autoptr (GPtrArray) entries = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_ini_entry_free);
  Collect c = { section, entries, FALSE };
  if (!walk (&r, collect_entry, &c, error))
    return NULL;
  if (found)
    *found = has_section (text, section);
  return g_steal_pointer (&entries);
}

char *
ps_ini_load_text (const char *path, GError **error)
{
  /* Capped, and stopped at a NUL byte: /dev/zero or a FIFO fed forever
   * fails at once instead of growing without bound. Each path is read once
   * per process (the option parser looks at --config more than once), so
   * a FIFO or standard input works and every reader sees the same text. */
  G_LOCK_DEFINE_STATIC (loaded);
  static GHashTable *loaded;
  G_LOCK (loaded);
  const char *seen = loaded ? g_hash_table_lookup (loaded, path) : NULL;
  char *copy = seen ? g_strdup (seen) : NULL;
  G_UNLOCK (loaded);
  if (copy)
    return copy;
  char *text = NULL;
  gsize len = 0;
  if (!ps_read_text_file (path, PS_MAX_CONFIG_BYTES, &text, &len, error))
    return NULL;
  G_LOCK (loaded);
  if (!loaded)
    loaded = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  g_hash_table_replace (loaded, g_strdup (path), g_strdup (text));
  G_UNLOCK (loaded);
  return text;
}

PsParams *
ps_params_load (const char *path, GError **error)
{
  g_autofree char *text = ps_ini_load_text (path, error);
  return text ? ps_params_read (path, text, error) : NULL;
}

static void
append_doc (GString *out, const PsParamSpec *s)
{
  g_string_append_printf (out, "# %s", s->doc);
  if ((s->type == PS_PARAM_INT || s->type == PS_PARAM_FLOAT) && s->max != G_MAXINT64)
    g_string_append_printf (out, " (%" G_GINT64_FORMAT " .. %" G_GINT64_FORMAT ")", s->min, s->max);
  else if (s->type == PS_PARAM_CHOICE)
    {
      g_autofree char *c = g_strdup (s->choices);
      g_strdelimit (c, "|", ' ');
      g_string_append_printf (out, " (%s)", c);
    }
  g_string_append (out, "\n");
}

char *
ps_params_print (const PsParams *p, const char *comment)
{
  GString *out = g_string_new (NULL);
  if (comment)
    {
      g_auto (GStrv) lines = g_strsplit (comment, "\n", -1);
      for (int i = 0; lines[i]; i++)
        g_string_append_printf (out, "# %s\n", lines[i]);
    }
  for (int k = 0; sections[k]; k++)
    {
      g_string_append_printf (out, "%s[%s]\n", out->len ? "\n" : "", sections[k]);
      if (k == 0)
        g_string_append_printf (out, "# %s\nfamily = %s\n", p->family->summary, p->family->name);
      for (int i = 0; i < p->n; i++)
        {
          const PsParamSpec *s = ps_model_family_spec (p->family, i);
          if (strcmp (s->section, sections[k]) != 0)
            continue;
          g_autofree char *v = value_text (s, &p->v[i]);
          if (s->type == PS_PARAM_PATH && *v && !g_path_is_absolute (v))
            {
              /* The file may be saved anywhere: name paths absolutely. */
              char *abs = g_canonicalize_filename (v, NULL);
              g_free (v);
              v = abs;
            }
          append_doc (out, s);
          g_string_append_printf (out, "%s =%s%s\n", s->key, *v ? " " : "", v);
        }
    }
  double throughput = 0;
  const char *row = ps_params_published_match (p, &throughput);
  if (row)
    {
      g_autoptr (PsParams) pre = ps_model_preset_load (row, NULL);
      g_string_append_printf (out, "\n[published]\n# The published throughput of this configuration, "
                              "%s per second\nthroughput = %.10g\n", p->family->item_unit, throughput);
      if (pre && pre->published_table)
        g_string_append_printf (out, "# The table it belongs to (podsim tables TABLE)\ntable = %s\n",
                                pre->published_table);
      if (pre && pre->published_step_s > 0)
        g_string_append_printf (out, "# A published step time (seconds) of a run of unknown configuration\n"
                                "step_time = %.10g\n", pre->published_step_s);
      if (pre && pre->published_series)
        g_string_append_printf (out, "# The series it belongs to (podsim tables: step time against the series' "
                                "smallest run)\nseries = %s\n", pre->published_series);
      if (pre && pre->published_source)
        g_string_append_printf (out, "# Where it was published\nsource = %s\n", pre->published_source);
    }
  return g_string_free (out, FALSE);
}

char *
ps_params_key (const PsParams *p)
{
  GString *out = g_string_new (NULL);
  for (int i = 0; i < p->n; i++)
    {
      g_autofree char *v = value_text (ps_model_family_spec (p->family, i), &p->v[i]);
      g_string_append_printf (out, "%s=%s\n", ps_model_family_spec (p->family, i)->key, v);
    }
  return g_string_free (out, FALSE);
}

char *
ps_params_diff (const PsParams *a, const PsParams *b)
{
  g_return_val_if_fail (a->family == b->family, g_strdup ("family"));
  GString *out = g_string_new (NULL);
  for (int i = 0; i < a->n; i++)
    {
      const PsParamSpec *s = ps_model_family_spec (a->family, i);
      if (strcmp (s->section, "options") == 0)
        continue;
      g_autofree char *x = value_text (s, &a->v[i]);
      g_autofree char *y = value_text (s, &b->v[i]);
      if (strcmp (x, y) != 0)
        g_string_append_printf (out, "%s%s", out->len ? ", " : "", ps_param_option (s));
    }
  return g_string_free (out, FALSE);
}

/* ---- presets -------------------------------------------------------------------- */

/* models/presets.c, generated from models/presets/NAME.ini by models/local.mk. */
extern const PsModelPreset ps_model_preset_table[];

const PsModelPreset *
ps_model_presets (void)
{
  return ps_model_preset_table;
}

PsParams *
ps_model_preset_load (const char *name, GError **error)
{
  for (const PsModelPreset *pr = ps_model_preset_table; pr->name; pr++)
    if (g_ascii_strcasecmp (name, pr->name) == 0)
      {
        g_autofree char *path = g_strdup_printf ("models/presets/%s.ini", pr->name);
        GError *local = NULL;
        PsParams *p = ps_params_read (path, pr->text, &local);
        if (!p)
          g_error ("compiled-in preset %s", local->message);
        /* A preset's values are the run's starting point: checks name the
         * option that changes them, not a line of a compiled-in file. */
        for (int i = 0; i < p->n; i++)
          {
            g_free (p->v[i].where);
            p->v[i].where = option_where (ps_model_family_spec (p->family, i));
          }
        return p;
      }
  GString *known = g_string_new (NULL);
  for (const PsModelPreset *pr = ps_model_preset_table; pr->name; pr++)
    g_string_append_printf (known, "%s%s", known->len ? ", " : "", pr->name);
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "unknown preset '%s' (known: %s)", name, known->str);
  g_string_free (known, TRUE);
  return NULL;
}

const char *
ps_params_published_match (const PsParams *p, double *throughput)
{
  for (const PsModelPreset *pr = ps_model_preset_table; pr->name; pr++)
    {
      g_autoptr (PsParams) q = ps_model_preset_load (pr->name, NULL);
      if (q->family != p->family || q->published <= 0)
        continue;
      g_autofree char *d = ps_params_diff (p, q);
      if (*d == '\0')
        {
          if (throughput)
            *throughput = q->published;
          return pr->name;
        }
    }
  if (throughput)
    *throughput = 0;
  return NULL;
}
