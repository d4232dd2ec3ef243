/* Test helper for the suites that run a model's step on the reference
 * interpreter (check_layers, check_models, check_pipeline): deterministic
 * values for a module's parameters, the same for the same (key, element)
 * in any suite, so that two forms of one model (a layer loop and its
 * unrolled layers, a pipeline and its plain stack) get equal weights when
 * they name a weight's element with the same key and index.
 *
 * Ownership: ps_test_args is transfer full; free with ps_test_args_free. */
#ifndef PS_TESTS_INTERP_INPUTS_H
#define PS_TESTS_INTERP_INPUTS_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/interp/interp.h"
#include "partitioner/ir/ir.h"

/* How a suite's values are spread. */
typedef struct {
  double spread;             /* weights and activations: spread * [-0.5, 0.5) */
  double ln_spread;          /* norm scales ("ln" in the name): 1 + ln_spread * [-0.5, 0.5) */
  gboolean train_state;      /* ".opt" state 1e-3 * [1, 2), learning_rate 0.01, decay 0.8 */
} PsTestInputs;

/* The value of element k of the tensor `key`, for a parameter called
 * `name` (which decides its kind: token ids for "ids", "labels" and
 * "*_ids", below vocab). */
double ps_test_input (const PsTestInputs *in, const char *name, const char *key, int64_t k, int64_t vocab);

/* One value per element of each entry parameter of m: value (p, k, user),
 * or, when value is NULL, ps_test_input (in, p->name, p->name, k, vocab). */
typedef double (*PsTestValueFn) (const PsInstr *p, int64_t k, gpointer user);
PsValue **ps_test_args (const PsModule *m, const PsTestInputs *in, int64_t vocab, PsTestValueFn value,
                        gpointer user);
void ps_test_args_free (const PsModule *m, PsValue **args);

/* m's step on args (the suite's check fails when the interpreter does).
 * transfer full. */
PsValue *ps_test_run (const PsModule *m, PsValue **args);

#endif
