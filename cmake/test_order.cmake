# The order ctest -j starts the tests in (build speed only; included at the end of the top-level
# CMakeLists.txt). With no timings from an earlier run in the build directory (a fresh CI clone has none)
# ctest starts the tests in the order they were added: the GoogleTests first, the CLI scripts last. The
# scripts are the longest tests (many qkv runs, Chromium, npm, MPI ranks; a minute or more under the
# sanitizers), so one of them would end the suite alone on one core. A COST starts them first, and the
# many short GoogleTests fill both cores at the end.
get_property(_qkv_tests DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTY TESTS)
list(FILTER _qkv_tests INCLUDE REGEX "^cli\\.")
if(_qkv_tests)
  set_tests_properties(${_qkv_tests} PROPERTIES COST 100)
endif()
