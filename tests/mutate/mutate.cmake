# Mutation testing (scripts/mutate.py, `make mutate`) is not part of `make test`: it
# rebuilds the tree once per mutant. What is: its catalogue still applies, each `find`
# found exactly once in its file, so that a change to the code cannot retire a mutant
# silently.
if(CGC_PYTHON3)
  add_test(NAME mutation_catalogue
           COMMAND ${CGC_PYTHON3} ${CMAKE_SOURCE_DIR}/scripts/mutate.py --check)
else()
  add_test(NAME mutation_catalogue COMMAND sh -c "echo 'python3 not found: skipped'; exit 77")
endif()
set_tests_properties(mutation_catalogue PROPERTIES LABELS cpu TIMEOUT 60 SKIP_RETURN_CODE 77)
