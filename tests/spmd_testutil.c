/* See spmd_testutil.h. */
#include "config.h"

#include <string.h>

#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_printer.h"
#include "partitioner/interp/verify.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/ir/sharding.h"
#include "tests/spmd_testutil.h"

gboolean
spmd_test_verify (const PsModule *m, int64_t n, const PsSpmdOptions *opts, guint32 seed,
                  char **out_text, GError **error)
{
  g_autoptr (PsModule) part = ps_spmd_partition (m, n, opts, error);
  if (!part)
    return FALSE;
  if (out_text)
    *out_text = ps_hlo_print (part, NULL);
  PsVerifyOptions vo;
  ps_verify_options_init (&vo);
  vo.seed = seed;
  PsVerifyResult res = { 0 };
  if (!ps_verify_spmd (m, part, n, &vo, &res, error))
    return FALSE;
  gboolean ok = res.agree && res.n_compared > 0;
  if (!ok)
    g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "%s",
                 res.agree ? "nothing compared" : res.message);
  ps_verify_result_clear (&res);
  return ok;
}

gboolean
spmd_test_verify_text (const char *hlo, int64_t n, gboolean propagate, const PsSpmdOptions *opts,
                       char **out_text, GError **error)
{
  g_autoptr (PsModule) m = ps_hlo_parse (hlo, strlen (hlo), "test.hlo", error);
  if (!m)
    return FALSE;
  if (propagate && !ps_propagate (m, NULL, error))
    return FALSE;
  return spmd_test_verify (m, n, opts, 42, out_text, error);
}

int
spmd_test_count_op (const PsModule *m, PsOpcode op)
{
  int k = 0;
  for (guint c = 0; c < m->computations->len; c++)
    {
      const PsComputation *comp = g_ptr_array_index (m->computations, c);
      for (guint i = 0; i < comp->instrs->len; i++)
        if (((const PsInstr *) g_ptr_array_index (comp->instrs, i))->opcode == op)
          k++;
    }
  return k;
}
