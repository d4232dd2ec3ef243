/* libFuzzer target: the hardware-file reader (topology/hardware.c). A file it
 * accepts has every value finite and within its bounds, so the machine
 * model's times are finite (doc/hardware.md). Build and run:
 * doc/robustness.md ("Fuzzing"). */
#include "config.h"

#include "tests/fuzz/fuzz_check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "topology/hardware.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  GError *error = NULL;
  PsHardware *hw = ps_hardware_load_data ((const char *) data, size, "fuzz.ini", &error);
  if (hw == NULL)
    {
      fuzz_check_error (error);
      return 0;
    }
  double peak = ps_hardware_peak_flops_per_core (hw);
  if (!isfinite (peak) || peak <= 0 || !isfinite (1.0 / hw->ici_link_bw_bytes_per_s)
      || !isfinite (1.0 / hw->hbm_bw_bytes_per_s))
    abort ();
  ps_hardware_free (hw);
  return 0;
}
