# models/: model builders, their sharding presets, the published configs.
noinst_LTLIBRARIES += libpodsim_models.la
PS_LIB_MODELS = libpodsim_models.la
libpodsim_models_la_SOURCES = models/net.c models/net.h models/layers.c models/layers.h \
	models/dense_lm.c models/dense_lm.h models/moe_layer.c models/moe_layer.h \
	models/moe_lm.c models/moe_lm.h models/pipeline.c models/pipeline.h \
	models/conv_layers.c models/conv_layers.h models/unet3d.c models/unet3d.h \
	models/conformer.c models/conformer.h
libpodsim_models_la_LIBADD = libpodsim_partitioner.la $(PS_LIB_TRACES) libpodsim_common.la $(GLIB_LIBS) -lm
PS_MODELS_TEST_LIBS = libpodsim_models.la $(PS_PARTITIONER_TEST_LIBS)
check_PROGRAMS += tests/check_models
TESTS += tests/check_models
tests_check_models_SOURCES = tests/check_models.c
tests_check_models_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_models_LDADD = $(PS_MODELS_TEST_LIBS)
check_PROGRAMS += tests/check_layers
TESTS += tests/check_layers
tests_check_layers_SOURCES = tests/check_layers.c tests/spmd_testutil.c tests/spmd_testutil.h
tests_check_layers_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_layers_LDADD = $(PS_MODELS_TEST_LIBS)
check_PROGRAMS += tests/check_moe
TESTS += tests/check_moe
tests_check_moe_SOURCES = tests/check_moe.c tests/spmd_testutil.c tests/spmd_testutil.h
tests_check_moe_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_moe_LDADD = $(PS_MODELS_TEST_LIBS)
check_PROGRAMS += tests/check_pipeline
TESTS += tests/check_pipeline
tests_check_pipeline_SOURCES = tests/check_pipeline.c
tests_check_pipeline_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_pipeline_LDADD = $(PS_MODELS_TEST_LIBS)
check_PROGRAMS += tests/check_convnets
TESTS += tests/check_convnets
tests_check_convnets_SOURCES = tests/check_convnets.c tests/spmd_testutil.c tests/spmd_testutil.h
tests_check_convnets_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_check_convnets_LDADD = $(PS_MODELS_TEST_LIBS)
