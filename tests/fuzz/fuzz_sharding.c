/* libFuzzer target: the sharding text parser (partitioner/ir/sharding_text.c,
 * HLO_SYNTAX.md section 6). A sharding it accepts must print and read back
 * to an equal sharding. Build and run: doc/robustness.md ("Fuzzing"). */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/ir/sharding.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  GError *error = NULL;
  gsize off = 0;
  PsSharding *s = ps_sharding_parse ((const char *) data, size, &off, &error);
  if (s == NULL)
    {
      if (error == NULL || error->domain != PS_ERROR || off > size)
        abort ();
      g_error_free (error);
      return 0;
    }
  char *text = ps_sharding_to_string (s);
  PsSharding *back = ps_sharding_parse (text, strlen (text), &off, &error);
  if (back == NULL || !ps_sharding_equal (s, back))
    {
      fprintf (stderr, "'%s' does not read back: %s\n", text, error ? error->message : "differs");
      abort ();
    }
  g_free (text);
  ps_sharding_free (back);
  ps_sharding_free (s);
  return 0;
}
