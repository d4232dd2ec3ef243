# Shared test infrastructure. Each folder's local.mk adds its own Check suites
# (tests/check_<module>.c) and end-to-end scripts (tests/*.sh) to TESTS.
TESTS += tests/cli_basics.sh
EXTRA_DIST += tests/cli_basics.sh tests/lib.sh

