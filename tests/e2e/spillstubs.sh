#!/bin/sh
# The spill tier without sorted runs (-o spill_runs=0: a stub and an index
# entry in the pool per spilled row): tests/e2e/spill.sh's checks again.
EMBFS_TEST_OPTS="${EMBFS_TEST_OPTS:-} -o spill_runs=0" exec sh "$(dirname "$0")/spill.sh"
