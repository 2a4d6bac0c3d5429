# Precompiled headers (build speed only; -DQKV_PCH=OFF builds without them). Included at the end of the
# top-level CMakeLists.txt, once every target exists, so that it sees their final flags.
#
# Most translation units parse the same third-party headers: nlohmann/json (every TU that includes
# qkv/arch.hpp), the standard library, GoogleTest in every test, CLI11 in every CLI command. Each is
# parsed once per build into a precompiled header that the targets share
# (REUSE_FROM): one per kind of target, because a PCH is only used by a TU compiled with the same
# code-generation flags (-fPIC, the sanitizer and coverage flags, -fopenmp, GoogleTest's defines):
#   layers (QKV_LAYERS)      the standard library + nlohmann/json
#   qkv_cli                  that + CLI11 (only there: its namespace-scope validator objects are
#                            compiled into every TU that sees the header, PCH or not)
#   qkv_tests_*              that + GoogleTest
# Each kind's PCH is built by a one-file object library, qkv_pch_<kind>_<hash>, that carries the flags
# of the targets reusing it; targets of one kind whose flags differ (the fuzz build instruments the
# layers but not the tests) get one PCH per set of flags, and a target alone (the CLI) builds its own.
# Only third-party and standard headers go in: the project's own headers change too often to pay.
# A TU that forgets an #include still compiles here; the Python module, the fuzz targets, the package
# consumer (tests/package) and the aarch64 build (tests/arm/run.sh) build without PCH and catch it, as
# does -DQKV_PCH=OFF.
option(QKV_PCH "Precompile the third-party and standard headers shared by most translation units" ON)
if(NOT QKV_PCH)
  return()
endif()

set(_qkv_pch_std <algorithm> <array> <atomic> <chrono> <cmath> <cstdint> <cstdio> <cstdlib> <cstring>
    <filesystem> <fstream> <functional> <iostream> <limits> <map> <memory> <numeric> <optional> <random>
    <set> <sstream> <string> <string_view> <unordered_map> <utility> <vector> <nlohmann/json.hpp>)
set(_qkv_pch_headers_lib ${_qkv_pch_std})
set(_qkv_pch_headers_cli ${_qkv_pch_std} <CLI/CLI.hpp>)
set(_qkv_pch_headers_test ${_qkv_pch_std} <gtest/gtest.h>)

# qkv_pch_use(<kind> <target>...): the targets reuse a PCH of <kind> made with their own flags.
function(qkv_pch_use kind)
  # Group the targets by the flags a PCH must share: -fPIC and the target-level options.
  set(keys "")
  foreach(t ${ARGN})
    if(NOT TARGET ${t})
      continue()
    endif()
    get_target_property(pic ${t} POSITION_INDEPENDENT_CODE)
    get_target_property(opts ${t} COMPILE_OPTIONS)
    if(NOT pic)
      set(pic OFF)
    endif()
    if(NOT opts)
      set(opts "")
    endif()
    string(MD5 key "${pic}|${opts}")
    list(APPEND keys ${key})
    list(APPEND targets_${key} ${t})
    set(pic_${key} ${pic})
    set(opts_${key} "${opts}")
  endforeach()
  list(REMOVE_DUPLICATES keys)
  foreach(key ${keys})
    list(LENGTH targets_${key} n)
    if(n EQUAL 1)  # a target alone builds its own
      target_precompile_headers(${targets_${key}} PRIVATE ${_qkv_pch_headers_${kind}})
      continue()
    endif()
    # Shared: an object library with no project flags (so that every reusing target's macros are a
    # superset of the PCH's, as clang requires), the targets' -fPIC and options, and the usage
    # requirements every one of them has: -fopenmp (all link a layer), the json target, GoogleTest's
    # GTEST_HAS_PTHREAD for the tests.
    set(owner qkv_pch_${kind}_${key})
    string(SUBSTRING ${owner} 0 24 owner)
    add_library(${owner} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch_owner.cpp)
    set_target_properties(${owner} PROPERTIES POSITION_INDEPENDENT_CODE ${pic_${key}} COMPILE_OPTIONS "${opts_${key}}")
    target_link_libraries(${owner} PRIVATE OpenMP::OpenMP_CXX Threads::Threads nlohmann_json::nlohmann_json)
    if(kind STREQUAL "test")
      target_link_libraries(${owner} PRIVATE GTest::gtest)
    endif()
    target_precompile_headers(${owner} PRIVATE ${_qkv_pch_headers_${kind}})
    set_target_properties(${targets_${key}} PROPERTIES PRECOMPILE_HEADERS_REUSE_FROM ${owner})
  endforeach()
endfunction()

get_property(_qkv_layers GLOBAL PROPERTY QKV_LAYERS)
# Not core: its kernels include neither json nor most of the standard headers, and loading the PCH costs
# about 0.8 s of CPU a TU, more than those TUs spend parsing.
list(REMOVE_ITEM _qkv_layers qkv_core)
qkv_pch_use(lib ${_qkv_layers})
qkv_pch_use(cli qkv_cli)
# The tests: every qkv_tests_* target of the top directory and tests/robustness.
set(_qkv_tests "")
set(_qkv_test_dirs ${PROJECT_SOURCE_DIR})
if(QKV_BUILD_TESTS)  # tests/robustness is added only with the tests (the main job's setup builds without)
  list(APPEND _qkv_test_dirs ${PROJECT_SOURCE_DIR}/tests/robustness)
endif()
foreach(dir ${_qkv_test_dirs})
  get_property(ts DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  list(FILTER ts INCLUDE REGEX "^qkv_tests_")
  list(APPEND _qkv_tests ${ts})
endforeach()
qkv_pch_use(test ${_qkv_tests})
