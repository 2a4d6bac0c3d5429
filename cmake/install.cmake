# `cmake --install BUILD --prefix P` (issue 17): include/qkv/, the layers' static libraries and a CMake
# package, so that another project does
#   find_package(qkv REQUIRED)                       # CMAKE_PREFIX_PATH=P
#   target_link_libraries(app PRIVATE qkv::qkv)
# tests/package/ is such a project (scripts/test.sh builds it against an install prefix).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

get_property(_qkv_layers GLOBAL PROPERTY QKV_LAYERS)
# The layers name the source tree's include/ directly; installed, they name the prefix's.
foreach(lib ${_qkv_layers})
  set_property(TARGET ${lib} PROPERTY INTERFACE_INCLUDE_DIRECTORIES
               $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/qkv DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ${_qkv_layers} qkv EXPORT qkvTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT qkvTargets NAMESPACE qkv:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/qkv)

# What the static libraries need from the consumer's link: recorded here, found again by qkvConfig.cmake.
set(QKV_BLIS_LIBRARY ${BLIS_LIBRARY})
# pkg-config imported targets the layers link (PkgConfig::NAME), with the module each one is: a layer
# that links a new one must add it here, or the install would name a target no consumer can find.
set(_qkv_pkg_modules PCRE2 libpcre2-8 ICU icu-uc)
set(QKV_PKG_CHECKS "")
foreach(lib ${_qkv_layers})
  get_target_property(_links ${lib} INTERFACE_LINK_LIBRARIES)
  foreach(l ${_links})
    if(l MATCHES "^PkgConfig::(.+)$")
      set(_name ${CMAKE_MATCH_1})
      list(FIND _qkv_pkg_modules ${_name} _i)
      if(_i LESS 0)
        message(FATAL_ERROR "cmake/install.cmake: ${lib} links ${l}; add its pkg-config module to _qkv_pkg_modules")
      endif()
      math(EXPR _i "${_i} + 1")
      list(GET _qkv_pkg_modules ${_i} _module)
      string(FIND "${QKV_PKG_CHECKS}" "(${_name} " _seen)
      if(_seen LESS 0)
        string(APPEND QKV_PKG_CHECKS "pkg_check_modules(${_name} REQUIRED IMPORTED_TARGET ${_module})\n")
      endif()
    endif()
  endforeach()
endforeach()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/qkvConfig.cmake.in ${PROJECT_BINARY_DIR}/qkvConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/qkv)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/qkvConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/qkvConfig.cmake ${PROJECT_BINARY_DIR}/qkvConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/qkv)
