/* Private to family*.c (models/, doc/architecture.md): the parameters of
 * a run, which family.c (values) and family_files.c (model files,
 * presets) both fill. */
#ifndef PS_MODELS_FAMILY_PRIVATE_H
#define PS_MODELS_FAMILY_PRIVATE_H

#include "models/family.h"

/* A run's parameters: the family's typed values (common/params.h) and the
 * [published] section of the file they came from. */
struct PsParams {
  const PsModelFamily *family;
  PsParamStore *st;
  double published;          /* [published] throughput, 0 when none */
  char *published_table;
  char *published_source;
  double published_step_s;   /* [published] step_time: a published step time
                              * of a run whose configuration is not known */
  char *published_series;    /* [published] series */
};

#endif
