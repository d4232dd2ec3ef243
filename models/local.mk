# models/: the model-family registry, model builders, their presets.
noinst_LTLIBRARIES += libpodsim_models.la
PS_LIB_MODELS = libpodsim_models.la
libpodsim_models_la_SOURCES = models/family.c models/family_files.c models/family.h models/family_private.h \
	models/dense_lm.c models/dense_lm.h models/dense_family.c models/hlo_family.c \
	models/net.c models/net.h models/layers.c models/layers_base.c models/layers_attention.c models/layers.h models/layers_private.h \
	models/moe_layer.c models/moe_layer.h models/moe_lm.c models/moe_lm.h \
	models/pipeline.c models/pipeline.h models/conv_layers.c models/conv_layers.h \
	models/unet3d.c models/unet3d.h models/conformer.c models/conformer.h models/moe_family.c \
	models/unet_family.c models/conformer_family.c \
	models/encdec.c models/encdec.h models/encdec_family.c
nodist_libpodsim_models_la_SOURCES = models/presets.c
CLEANFILES += models/presets.c
libpodsim_models_la_LIBADD = libpodsim_partitioner.la $(PS_LIB_TRACES) libpodsim_common.la $(GLIB_LIBS) -lm
PS_MODELS_TEST_LIBS = libpodsim_models.la $(PS_PARTITIONER_TEST_LIBS)

# Presets are model files (models/presets/NAME.ini), one per line here. They
# are compiled in (each line a C string literal) so podsim works from any
# directory, and installed as examples of model files.
PS_MODEL_PRESETS = \
	models/presets/DenseLm128B8x8.ini \
	models/presets/DenseLm128B16x16.ini \
	models/presets/DenseLm128B32x32.ini \
	models/presets/DenseLm175B32x32.ini \
	models/presets/MoE128E12L.ini \
	models/presets/MoE128E36L.ini \
	models/presets/MoE512E12L.ini \
	models/presets/MoE512E36L.ini \
	models/presets/MoE2048E12L.ini \
	models/presets/MoE2048E36L.ini \
	models/presets/GspmdMoE32E.ini \
	models/presets/GspmdMoE128E.ini \
	models/presets/GShard128E12L.ini \
	models/presets/GShard128E36L.ini \
	models/presets/GShard512E12L.ini \
	models/presets/GShard512E36L.ini \
	models/presets/GShard2048E12L.ini \
	models/presets/GShard2048E36L.ini \
	models/presets/Unet3d128.ini \
	models/presets/Unet3d128S16.ini \
	models/presets/Unet3d256S32.ini \
	models/presets/Gpt3Small.ini \
	models/presets/Gpt3Medium.ini \
	models/presets/Gpt3Large.ini \
	models/presets/Gpt3XL.ini \
	models/presets/Gpt3_2B7.ini \
	models/presets/Gpt3_6B7.ini \
	models/presets/Gpt3_13B.ini \
	models/presets/Gpt3_175B.ini \
	models/presets/Llama2_7B.ini \
	models/presets/Llama2_13B.ini \
	models/presets/Llama2_70B.ini \
	models/presets/GptJ6B.ini \
	models/presets/T5Base.ini \
	models/presets/T5Large.ini \
	models/presets/ConformerS.ini \
	models/presets/ConformerM.ini \
	models/presets/ConformerL.ini
presetsdir = $(pkgdatadir)/presets
dist_presets_DATA = $(PS_MODEL_PRESETS)
models/presets.c: $(PS_MODEL_PRESETS:%=$(top_srcdir)/%) $(top_srcdir)/models/local.mk
	$(AM_V_GEN)$(MKDIR_P) models && { \
	  echo '/* Generated from the files of models/presets by models/local.mk; do not edit. */'; \
	  echo '#include "config.h"'; \
	  echo '#include "models/family.h"'; \
	  echo 'const PsModelPreset ps_model_preset_table[] = {'; \
	  for f in $(PS_MODEL_PRESETS); do \
	    n=$$(basename "$$f" .ini); echo "$$n $$f"; \
	  done | LC_ALL=C sort | while read n f; do \
	    echo "  { \"$$n\","; \
	    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/	/\\t/g' -e 's/^/    "/' -e 's/$$/\\n"/' \
	      "$(top_srcdir)/$$f"; \
	    echo '  },'; \
	  done; \
	  echo '  { NULL, NULL }'; \
	  echo '};'; \
	} > $@.tmp && mv $@.tmp $@

check_PROGRAMS += tests/check_models
TESTS += tests/check_models
tests_check_models_SOURCES = tests/check_models.c tests/interp_inputs.c tests/interp_inputs.h
tests_check_models_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SIMGRID_CFLAGS)
tests_check_models_LDADD = $(PS_LIB_DRIVER) $(PS_LIB_SIM) $(PS_MODELS_TEST_LIBS) $(PS_LIB_TOPOLOGY) $(SIMGRID_LIBS) -lstdc++
check_PROGRAMS += tests/check_layers
TESTS += tests/check_layers
tests_check_layers_SOURCES = tests/check_layers.c tests/interp_inputs.c tests/interp_inputs.h tests/spmd_testutil.c \
	tests/spmd_testutil.h
tests_check_layers_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_layers_LDADD = $(PS_MODELS_TEST_LIBS)
check_PROGRAMS += tests/check_moe
TESTS += tests/check_moe
tests_check_moe_SOURCES = tests/check_moe.c tests/spmd_testutil.c tests/spmd_testutil.h
tests_check_moe_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_moe_LDADD = $(PS_MODELS_TEST_LIBS)
check_PROGRAMS += tests/check_pipeline
TESTS += tests/check_pipeline
tests_check_pipeline_SOURCES = tests/check_pipeline.c tests/interp_inputs.c tests/interp_inputs.h
tests_check_pipeline_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_pipeline_LDADD = $(PS_MODELS_TEST_LIBS)
check_PROGRAMS += tests/check_convnets
TESTS += tests/check_convnets
tests_check_convnets_SOURCES = tests/check_convnets.c tests/spmd_testutil.c tests/spmd_testutil.h
tests_check_convnets_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_convnets_LDADD = $(PS_MODELS_TEST_LIBS)
