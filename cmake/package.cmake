# SPDX-License-Identifier: Apache-2.0
# CPack: Debian packages, one per install component (cmake/install.cmake).
#
#   cpack -G DEB --config build/CPackConfig.cmake -B packages
#
#   libdurable-dev   headers, libdurable.a (or the .so links), the CMake package, durable.pc
#   durable          the durable command, its man page and bash completion
#   libdurable0.2    libdurable.so.0.2, in a -DBUILD_SHARED_LIBS=ON build only
#
# Configure with -DCMAKE_INSTALL_PREFIX=/usr for Debian's multiarch library directory
# (/usr/lib/x86_64-linux-gnu); otherwise the libraries go to /usr/lib, which works as well.
# Included by the root CMakeLists.txt when durable is the top-level project.

set(durable_soversion ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})

set(CPACK_PACKAGE_NAME durable)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "durable execution for C++20 on SQLite")
if(NOT CPACK_PACKAGE_CONTACT)  # set -DCPACK_PACKAGE_CONTACT="Name <mail>" for packages you ship
  set(CPACK_PACKAGE_CONTACT "durable maintainers <maintainers@durable.invalid>")
endif()
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_GENERATOR DEB)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # name_version_arch.deb
set(CPACK_STRIP_FILES ON)  # the command and shared libraries, as Debian ships them
if(BUILD_SHARED_LIBS)
  set(CPACK_COMPONENTS_ALL runtime development cli)
else()
  set(CPACK_COMPONENTS_ALL development cli)  # the static build has no runtime files
endif()

set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "durable execution for C++20 on SQLite: shared library
Workflows whose steps are journaled in an SQLite file and survive crashes and restarts.")
set(CPACK_COMPONENT_DEVELOPMENT_DESCRIPTION "durable execution for C++20 on SQLite: development files
Workflows whose steps are journaled in an SQLite file and survive crashes and restarts.
Headers, the library, the test kit, a CMake package (find_package(durable)) and
pkg-config files (durable, durable-testing).")
set(CPACK_COMPONENT_CLI_DESCRIPTION "inspect and operate durable workflow databases
The durable command lists, shows, starts, retries and cancels the runs in a durable
SQLite file, sends events, prints stats and metrics, and serves an HTTP API and dashboard.")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libdurable${durable_soversion})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libdurable-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_CLI_PACKAGE_NAME durable)
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION utils)

# What libdurable-dev needs: the -dev packages that the CMake package config finds and that
# durable.pc names (Requires, or Requires.private for pkg-config's --cflags).
set(durable_dev_depends "nlohmann-json3-dev (>= 3.10), libsqlite3-dev, libsqlitecpp-dev, libboost-context-dev (>= 1.74), libpq-dev, libssl-dev")
# The shared libraries the binaries need: dpkg-shlibdeps reads them off the ELF files when it is
# installed (Debian's dpkg-dev); otherwise they are written here from what the build found.
find_program(DURABLE_DPKG_SHLIBDEPS dpkg-shlibdeps)
find_program(DURABLE_FILE file)  # CPack's shlibdeps step needs it
if(DURABLE_DPKG_SHLIBDEPS AND DURABLE_FILE)
  set(durable_binary_depends "")
  set(durable_shlibdeps ON)
else()
  set(durable_binary_depends "libsqlite3-0, libpq5, libssl3, libboost-context${Boost_VERSION_MAJOR}.${Boost_VERSION_MINOR}.${Boost_VERSION_PATCH}, libstdc++6, libc6")
  set(durable_shlibdeps OFF)
endif()
if(BUILD_SHARED_LIBS)
  set(durable_runtime_package "libdurable${durable_soversion} (= ${PROJECT_VERSION})")
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ${durable_shlibdeps})
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "${durable_binary_depends}")
  set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS "${durable_runtime_package}, ${durable_dev_depends}")
  # The CLI links libdurable.so.0.2, which dpkg-shlibdeps cannot place in any installed package:
  # the runtime package it depends on brings the rest.
  set(CPACK_DEBIAN_CLI_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_CLI_PACKAGE_DEPENDS "${durable_runtime_package}")
else()
  set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS "${durable_dev_depends}")
  set(CPACK_DEBIAN_CLI_PACKAGE_SHLIBDEPS ${durable_shlibdeps})
  set(CPACK_DEBIAN_CLI_PACKAGE_DEPENDS "${durable_binary_depends}")
endif()
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SUGGESTS "durable, pkg-config")

# Debian's place for each package's license: /usr/share/doc/PACKAGE/copyright. Only in the
# packages (EXCLUDE_FROM_ALL: a plain `cmake --install` leaves it out).
foreach(component IN LISTS CPACK_COMPONENTS_ALL)
  string(TOUPPER ${component} upper)
  install(FILES ${PROJECT_SOURCE_DIR}/LICENSE RENAME copyright
    DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${CPACK_DEBIAN_${upper}_PACKAGE_NAME}
    COMPONENT ${component} EXCLUDE_FROM_ALL)
endforeach()

include(CPack)
