# models/: its convenience library, Check suites (tests/check_*.c) and data.
# Define PS_LIB_MODELS = libpodsim_models.la once the library exists.
