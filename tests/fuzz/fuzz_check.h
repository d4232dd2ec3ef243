/* What every libFuzzer target checks of an input its reader refuses: a
 * user error, one line in the PS_ERROR domain (podsim prints it as
 * "podsim: FILE:LINE:COL: what" and exits 2), never a NULL error, another
 * domain or a message over several lines. Anything else is a finding. */
#ifndef PS_TESTS_FUZZ_CHECK_H
#define PS_TESTS_FUZZ_CHECK_H

#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* Aborts unless `error` is such a user error; frees it. */
static inline void
fuzz_check_error (GError *error)
{
  if (error == NULL || error->domain != PS_ERROR || strchr (error->message, '\n'))
    {
      fprintf (stderr, "refused without one PS_ERROR line: %s\n", error ? error->message : "(no error)");
      abort ();
    }
  g_error_free (error);
}

/* Aborts unless printing what was read back from FIRST printed AGAIN, the
 * same text: a printer and its reader meet in a fixed point. WHAT opens
 * the finding's message, both texts follow it. */
static inline void
fuzz_check_fixed_point (const char *what, const char *first, const char *again)
{
  if (strcmp (first, again) != 0)
    {
      fprintf (stderr, "%s:\n%s\n----\n%s\n", what, first, again);
      abort ();
    }
}

#endif
