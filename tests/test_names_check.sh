#!/usr/bin/env bash
# CTest's catch_discover_tests splits a test name at ';' (a CMake list separator) into entries
# that run no test and pass: every Catch2 name must be free of it.
set -euo pipefail
root=${1:?usage: test_names_check.sh TESTS_DIR}
if bad=$(grep -rnE --include='*.cpp' 'TEST_CASE\("[^"]*;' "$root"); then
  echo "Catch2 test names with ';' (CTest would split them into empty passing tests):" >&2
  echo "$bad" >&2
  exit 1
fi
echo "no test name holds ';'"
