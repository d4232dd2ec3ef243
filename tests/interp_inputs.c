/* Deterministic interpreter inputs for the model suites: see interp_inputs.h. */
#include "config.h"

#include "tests/interp_inputs.h"

#include <check.h>
#include <string.h>

double
ps_test_input (const PsTestInputs *in, const char *name, const char *key, int64_t k, int64_t vocab)
{
  guint32 st = g_str_hash (key) ^ (guint32) (k * 2654435761u);
  st = st * 1664525u + 1013904223u;
  st = st * 1664525u + 1013904223u;
  double r = (double) (st >> 8) / (double) (1u << 24);
  if (strcmp (name, "ids") == 0 || g_str_has_suffix (name, "_ids") || strcmp (name, "labels") == 0)
    return (double) ((st >> 8) % (guint32) vocab);
  if (in->train_state)
    {
      if (strstr (name, ".opt"))
        return 1e-3 * (1 + r);
      if (strcmp (name, "learning_rate") == 0)
        return 0.01;
      if (strcmp (name, "decay") == 0)
        return 0.8;
    }
  if (strstr (name, "ln") && !strstr (name, ".opt"))
    return 1.0 + in->ln_spread * (r - 0.5);
  return (r - 0.5) * in->spread;
}

PsValue **
ps_test_args (const PsModule *m, const PsTestInputs *in, int64_t vocab, PsTestValueFn value, gpointer user)
{
  int n = (int) m->entry->params->len;
  PsValue **args = g_new0 (PsValue *, n);
  for (int i = 0; i < n; i++)
    {
      PsInstr *p = m->entry->params->pdata[i];
      args[i] = ps_value_new (p->shape);
      for (int64_t k = 0; k < args[i]->n; k++)
        ps_value_set (args[i], k, value ? value (p, k, user) : ps_test_input (in, p->name, p->name, k, vocab));
    }
  return args;
}

void
ps_test_args_free (const PsModule *m, PsValue **args)
{
  for (guint i = 0; i < m->entry->params->len; i++)
    ps_value_free (args[i]);
  g_free (args);
}

PsValue *
ps_test_run (const PsModule *m, PsValue **args)
{
  GError *error = NULL;
  PsValue *out = ps_interp_run (m, (int) m->entry->params->len, args, NULL, &error);
  ck_assert_msg (out != NULL, "interp: %s", error ? error->message : "");
  return out;
}
